"""A command group whose first argument is either one of its sub-commands or a node name:
``logs parse FILE`` / ``logs NODE``, ``models pin REPO`` / ``models NODE``."""

from __future__ import annotations

from typing import Any

import click


class NodeOrSubcommandGroup(click.Group):
    """Sub-commands, plus ``GROUP NODE …`` handed to ``node_command`` when the first
    argument names no sub-command (and is not an option); ``usage`` is the usage line."""

    def __init__(self, *args: Any, node_command: click.Command, usage: str,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_command = node_command
        self.usage = usage

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            return self.node_command.name, self.node_command, args
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, self.usage)

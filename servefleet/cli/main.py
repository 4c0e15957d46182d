"""The ``servefleet`` command group and its error handling.

Each sub-command lives in a module of its own under :mod:`servefleet.cli`, registered by
name in :data:`servefleet.cli.commands.ALL` and imported only when it is used (so
``servefleet --help`` does not pay for paramiko, pydantic or rich). Known errors print one
line (``--verbose`` adds the trace) and exit with the error's code.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from servefleet.core.errors import ServefleetError


@dataclass(frozen=True)
class CliContext:
    """What every sub-command receives: where the project lives and which stack is chosen."""

    project_dir: Path
    stack: str
    verbose: bool


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use (click's lazy-group
    pattern): ``lazy`` maps a name to ``"module:attribute"``; its order is the help order."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        eager = [name for name in super().list_commands(ctx) if name not in self.lazy]
        return [*self.lazy, *sorted(eager)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module_name, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            self.commands[cmd_name] = command
        return super().get_command(ctx, cmd_name)


class _Group(LazyGroup):
    """A click group that turns :class:`ServefleetError` into one clear line."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ServefleetError as error:
            verbose = bool(ctx.params.get("verbose"))
            if verbose:
                traceback.print_exc()
            for line in str(error).splitlines() or [type(error).__name__]:
                click.secho(f"error: {line}", fg="red", err=True)
            sys.exit(error.exit_code)


@click.group(cls=_Group)
@click.option("--project", "project_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("."), show_default=True, envvar="SERVEFLEET_PROJECT",
              help="The servefleet project folder (holds nodes/, profiles/, Pulumi.*.yaml).")
@click.option("--stack", default="sim", show_default=True, envvar="SERVEFLEET_STACK",
              help="The stack whose Pulumi.<stack>.yaml assigns profiles to nodes.")
@click.option("--verbose", "-v", is_flag=True, help="Show the full trace of an error.")
@click.pass_context
def cli(ctx: click.Context, project_dir: Path, stack: str, verbose: bool) -> None:
    """servefleet: deploy LLM inference engines to your GPU nodes and prove what booted."""
    ctx.obj = CliContext(project_dir=project_dir.resolve(), stack=stack, verbose=verbose)


def build_cli() -> click.Group:
    """The ``servefleet`` group with every sub-command of :mod:`servefleet.cli.commands`
    registered lazily (``ALL`` order = help order). Calling it again changes nothing, so
    tests and :func:`main` share the one group."""
    from servefleet.cli import commands

    assert isinstance(cli, LazyGroup)
    for name, target in commands.ALL.items():
        cli.lazy.setdefault(name, target)
    return cli


def main() -> None:
    """Console-script entry point."""
    build_cli()(prog_name="servefleet")


if __name__ == "__main__":
    main()

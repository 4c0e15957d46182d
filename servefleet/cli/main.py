"""The ``servefleet`` command group and its error handling.

Each sub-command lives in a module of its own under :mod:`servefleet.cli` and is added to
the group in :func:`build_cli`. Known errors print one line (``--verbose`` adds the trace)
and exit with the error's code.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import click

from servefleet.core.errors import ServefleetError


@dataclass(frozen=True)
class CliContext:
    """What every sub-command receives: where the project lives and which stack is chosen."""

    project_dir: Path
    stack: str
    verbose: bool


class _Group(click.Group):
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
    (``ALL`` order = help order). Calling it again changes nothing: a command is added under
    its name once, so tests and :func:`main` share the one group."""
    from servefleet.cli import commands

    for command in commands.ALL:
        if command.name not in cli.commands:
            cli.add_command(command)
    return cli


def main() -> None:
    """Console-script entry point."""
    build_cli()(prog_name="servefleet")


if __name__ == "__main__":
    main()

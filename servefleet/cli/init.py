"""``servefleet init [DIR]``: start the config repository an operator owns.

It writes a Pulumi project whose program is servefleet's (so ``pulumi up`` works from a pip
install), a stack file that places nothing yet, the shipped profiles, an example node that
is not loaded and the editor schemas; ``servefleet validate`` is clean on the result. A file
that exists is never touched, edited or not, so running it again only adds what is missing
(each file is reported ``created`` or ``kept (exists)``).
"""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from servefleet.cli.main import CliContext


def _stack(ctx: click.Context, own: str | None) -> str:
    """``init --stack``, else the group's ``--stack``/``SERVEFLEET_STACK`` when given, else
    ``home`` (the group's default, ``sim``, names the simulated fleet)."""
    from servefleet.core.scaffold import DEFAULT_STACK

    if own is not None:
        return own
    root = ctx.find_root()
    if root.get_parameter_source("stack") in (ParameterSource.COMMANDLINE,
                                               ParameterSource.ENVIRONMENT):
        return str(root.params["stack"])
    return DEFAULT_STACK


@click.command("init")
@click.argument("directory", required=False, metavar="[DIR]",
                type=click.Path(file_okay=False, path_type=Path))
@click.option("--stack", default=None,
              help="Name of the stack file to create (Pulumi.<stack>.yaml).  [default: home]")
@click.pass_context
def init_command(ctx: click.Context, directory: Path | None, stack: str | None) -> None:
    """Create a config repo in DIR (default: the current folder): Pulumi.yaml and its
    program, a stack file placing nothing yet, profiles/, example nodes (an RTX 5090 and
    a DGX Spark), the bench scenarios, schemas/.

    Never overwrites a file: run it again to add what is missing.
    """
    from servefleet.adapters.scaffold import shipped_profiles, shipped_seeds, write_all
    from servefleet.core.scaffold import pulumi_project_name, scaffold

    obj: CliContext = ctx.obj
    name = _stack(ctx, stack)
    given = directory if directory is not None else obj.project_option or Path(".")
    root = given.resolve()
    # A bad stack name is refused here, before any write.
    files = scaffold(name, shipped_profiles(), project=pulumi_project_name(root.name),
                     scenarios=shipped_seeds())
    click.echo(f"servefleet init: {root} (stack {name})")
    for path, written in write_all(root, files):
        click.echo(f"  {'created' if written else 'kept (exists)':<14} {path}")
    _print_next_steps(name, None if root == Path.cwd().resolve() else str(given))


def _print_next_steps(stack: str, where: str | None) -> None:
    from servefleet.core.scaffold import next_steps

    click.echo("\nNext steps:")
    for number, step in enumerate(next_steps(stack, where), start=1):
        click.echo(f"  {number}. {step}")

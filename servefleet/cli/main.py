"""The ``servefleet`` command group and its error handling.

Each sub-command lives in a module of its own under :mod:`servefleet.cli`, registered by
name in :data:`servefleet.cli.commands.ALL` and imported only when it is used (so
``servefleet --help`` does not pay for paramiko, pydantic or rich). Known errors print one
line (``--verbose`` adds the trace, and the SSH library's own log) and exit with the
error's code.

The global options (``--project``, ``--stack``, ``--verbose``) may come before or after
the sub-command: ``servefleet validate --stack home`` is ``servefleet --stack home
validate``. Without ``--project`` the project folder is found the way git finds its root:
the nearest folder, from the current one up, holding ``Pulumi.yaml`` or a stack file.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from servefleet.core.errors import ServefleetError

QUIET_LOGGERS = ("paramiko",)
"""Libraries whose log (connection tracebacks from their own threads) is shown only with
``--verbose``: servefleet reports the failure itself, in one line."""


@dataclass(frozen=True)
class CliContext:
    """What every sub-command receives: where the project lives and which stack is chosen."""

    project_option: Path | None
    """``--project`` (or ``SERVEFLEET_PROJECT``) as given; ``None``: find it."""
    stack_option: str | None
    """``--stack`` (or ``SERVEFLEET_STACK``) as given; ``None``: :attr:`stack` picks it."""
    verbose: bool
    start: Path = field(default_factory=Path.cwd)
    """Where the search for the project folder starts."""

    @property
    def stack(self) -> str:
        """``--stack``, else the project folder's only stack file's, else ``sim``
        (:func:`servefleet.core.project_root.default_stack`)."""
        if self.stack_option is not None:
            return self.stack_option
        from servefleet.core.project_root import FALLBACK_STACK, default_stack

        try:
            return default_stack(self.project_dir)
        except ServefleetError:  # no project: the command says so when it loads it
            return FALLBACK_STACK

    @property
    def project_dir(self) -> Path:
        """The project folder: ``--project``, else the nearest folder from :attr:`start` up
        holding ``Pulumi.yaml`` or a ``Pulumi.<stack>.yaml`` (a :class:`ConfigError`
        naming the folders looked in when there is none)."""
        if self.project_option is not None:
            return self.project_option.resolve()
        from servefleet.core.project_root import find_project_root

        return find_project_root(self.start)


def quiet_libraries(verbose: bool) -> None:
    """Keep the SSH library's log (``Exception (client): …`` and tracebacks from its
    transport thread) off stderr unless ``--verbose``: the failure is reported in one line."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.CRITICAL)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        number = version("servefleet")
    except PackageNotFoundError:  # run from a source tree that is not installed
        from servefleet import __version__ as number
    click.echo(f"servefleet {number}")
    ctx.exit()


# -- global options after the sub-command ----------------------------------------------------
def _update_obj(ctx: click.Context, **changes: Any) -> None:
    """Apply a global option given after the sub-command to this context and every parent
    (the error handler reads ``verbose`` from the root)."""
    current: click.Context | None = ctx
    while current is not None:
        if isinstance(current.obj, CliContext):
            current.obj = dataclasses.replace(current.obj, **changes)
        current = current.parent


def _late(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None or value is False or ctx.resilient_parsing:
            return
        if name == "project_option":
            value = Path(value).resolve()
        _update_obj(ctx, **{name: value})
        if name == "verbose":
            quiet_libraries(True)

    return callback


def _late_options() -> list[click.Option]:
    """The global options as a sub-command accepts them: hidden, no default, no envvar (the
    group's already applied those), each overriding the group's value when given."""
    return [
        click.Option(["--project"], type=click.Path(file_okay=False, path_type=Path),
                     default=None, expose_value=False, hidden=True,
                     callback=_late("project_option")),
        click.Option(["--stack"], default=None, expose_value=False, hidden=True,
                     callback=_late("stack_option")),
        click.Option(["--verbose", "-v"], is_flag=True, default=False, expose_value=False,
                     hidden=True, callback=_late("verbose")),
    ]


def accept_global_options(command: click.Command) -> None:
    """Let ``command`` (and, for a group, every command under it) take the global options
    after its name. An option a command already has keeps its own meaning."""
    if getattr(command, "_servefleet_globals", False):
        return
    taken = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for option in _late_options():
        if not taken.intersection(option.opts):
            command.params.append(option)
    command._servefleet_globals = True  # type: ignore[attr-defined]
    children: list[click.Command] = []
    if isinstance(command, click.Group):
        children += command.commands.values()
    extra = getattr(command, "node_command", None)  # `logs NODE`
    if isinstance(extra, click.Command):
        children.append(extra)
    for child in children:
        accept_global_options(child)


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use (click's lazy-group
    pattern): ``lazy`` maps a name to ``"module:attribute"``; its order is the help order."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = dict(lazy or {})
        self.sections: dict[str, tuple[str, ...]] = {}
        """Heading → command names, for :meth:`format_commands` (empty: one flat list)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        eager = [name for name in super().list_commands(ctx) if name not in self.lazy]
        return [*self.lazy, *sorted(eager)]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands under the headings of :attr:`sections` (what is in none under
        "Other commands"), each with its short help."""
        names = self.list_commands(ctx)
        placed = {name for members in self.sections.values() for name in members}
        groups = [(title, [n for n in members if n in names])
                  for title, members in self.sections.items()]
        groups.append(("Other commands", [n for n in names if n not in placed]))
        longest = max((len(n) for n in names), default=0)
        width = formatter.width - 6 - longest
        for title, members in groups:
            rows = []
            for name in members:
                command = self.get_command(ctx, name)
                if command is not None and not command.hidden:
                    # Padded: every section's descriptions start in one column.
                    rows.append((name.ljust(longest), command.get_short_help_str(width)))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module_name, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            self.commands[cmd_name] = command
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            accept_global_options(command)
        return command


class _Group(LazyGroup):
    """A click group that turns :class:`ServefleetError` into one clear line."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ServefleetError as error:
            verbose = ctx.obj.verbose if isinstance(ctx.obj, CliContext) else \
                bool(ctx.params.get("verbose"))
            if verbose:
                traceback.print_exc()
            for line in str(error).splitlines() or [type(error).__name__]:
                click.secho(f"error: {line}", fg="red", err=True)
            sys.exit(error.exit_code)
        finally:
            # The next command in this process (tests) starts from the rollout's policy.
            from servefleet.core import connect_policy

            connect_policy.use(connect_policy.ROLLOUT)


@click.group(cls=_Group)
@click.option("--project", "project_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, envvar="SERVEFLEET_PROJECT",
              help="The servefleet project folder (holds nodes/, profiles/, Pulumi.*.yaml). "
                   "Default: the nearest folder, from the current one up, holding Pulumi.yaml "
                   "or a Pulumi.<stack>.yaml.")
@click.option("--stack", default=None, envvar="SERVEFLEET_STACK",
              help="The stack whose Pulumi.<stack>.yaml assigns profiles to nodes. "
                   "Default: the project folder's only stack file, else sim.")
@click.option("--verbose", "-v", is_flag=True,
              help="Show the full trace of an error and the SSH library's log.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Print servefleet's version and exit.")
@click.pass_context
def cli(ctx: click.Context, project_dir: Path | None, stack: str | None, verbose: bool) -> None:
    """servefleet: deploy LLM inference engines to your GPU nodes and prove what booted.

    The options below may also follow the command (`servefleet validate --stack home`).
    """
    quiet_libraries(verbose)
    from servefleet.core import connect_policy

    # Read-only commands make one short connect attempt per node; rollouts retry.
    connect_policy.use(connect_policy.READ_ONLY if ctx.invoked_subcommand in
                       connect_policy.READ_ONLY_COMMANDS else connect_policy.ROLLOUT)
    ctx.obj = CliContext(project_option=project_dir.resolve() if project_dir else None,
                         stack_option=stack, verbose=verbose)


def build_cli() -> click.Group:
    """The ``servefleet`` group with every sub-command of :mod:`servefleet.cli.commands`
    registered lazily (``ALL`` order = help order). Calling it again changes nothing, so
    tests and :func:`main` share the one group."""
    from servefleet.cli import commands

    assert isinstance(cli, LazyGroup)
    for name, target in commands.ALL.items():
        cli.lazy.setdefault(name, target)
    cli.sections = commands.SECTIONS
    return cli


def main() -> None:
    """Console-script entry point."""
    build_cli()(prog_name="servefleet")


if __name__ == "__main__":
    main()

"""``servefleet drift`` and ``servefleet nightly install``.

``drift`` compares every node of the stack with git and prints a table (or ``--json``);
exit status 0 when every node matches, 2 when any drifted, 1 on error (an unreachable node,
a configuration error), as ``terraform plan -detailed-exitcode`` does. ``--notify CMD``
runs CMD with the JSON report on stdin when drift or an error was found.

``nightly install`` renders a systemd service + timer (and prints the equivalent cron line)
that run the drift check every night on the operator's control machine.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servefleet.cli.main import CliContext
from servefleet.cli.notify import run_notify

if TYPE_CHECKING:
    from rich.console import Console

    from servefleet.adapters.drift_collect import CollectOptions
    from servefleet.core.drift import DriftReport
    from servefleet.core.project import Project

DEFAULT_TIMEOUT_SECONDS = 60.0
"""``--timeout``'s default, spelled out so that --help need not import the collector; a test
holds it equal to :data:`servefleet.adapters.drift_collect.DEFAULT_TIMEOUT_SECONDS`."""

SHOWN_VALUE_CHARS = 48
STATUS_STYLES = {"ok": "bold green", "drift": "bold yellow", "error": "bold red"}
NIGHTLY_TEMPLATES = "nightly"
UNIT_NAME = "servefleet-drift"

PULUMI_ROUTE = (
    "The Pulumi-native route: `pulumi preview --refresh --expect-no-changes` refreshes "
    "every node resource (the provider's read() observes the node) and exits non-zero "
    "when the refreshed state differs from the program."
)


def _shown(value: object) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[: SHOWN_VALUE_CHARS - 1] + "…"


def print_report(console: Console, report: DriftReport) -> None:
    """The report for people: one line per node, a table of what differs."""
    from rich.table import Table
    from rich.text import Text

    for error in report.errors:
        console.print(Text(f"error: {error}", style="bold red"))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    for name, node in report.nodes.items():
        line = Text(f"{name}: ", style="bold")
        line.append(node.status, style=STATUS_STYLES[node.status])
        if node.items:
            line.append(f" ({len(node.items)} item{'s' if len(node.items) != 1 else ''})")
        console.print(line)
    items = report.items
    if items:
        table = Table(show_lines=False, highlight=False)
        for column in ("#", "node", "deployment", "kind", "what", "expected", "observed"):
            table.add_column(column, overflow="fold", no_wrap=column in ("#", "kind"))
        for number, item in enumerate(items, start=1):
            style = "red" if item.kind in ("unreachable", "error") else "yellow"
            table.add_row(str(number), item.node, item.deployment or "-",
                          Text(item.kind.value, style=style), item.subject or "-",
                          _shown(item.expected), _shown(item.observed))
        console.print(table)
        for number, item in enumerate(items, start=1):
            line = Text(f"{number:>3}. ", style="dim")
            line.append(item.message)
            console.print(line)
    verdict = {"ok": "every node matches git", "drift": "drift found",
               "error": "some nodes could not be checked"}[report.status]
    console.print(Text(f"stack {report.stack or '?'}: {verdict}",
                       style=STATUS_STYLES[report.status]))


def notify(command: str, report: DriftReport) -> str | None:
    """Hand the JSON to the ``--notify`` command (:func:`servefleet.cli.notify.run_notify`)."""
    return run_notify(command, report.to_json())


def _with_multinode(project: Project, nodes: tuple[str, ...], check_fleet: Any,
                    secrets: dict[str, str], options: CollectOptions) -> DriftReport:
    """The per-node report of NODES, and one entry per engine spanning nodes with a rank
    on them (:mod:`servefleet.adapters.drift_collect.multinode`)."""
    from servefleet.adapters.drift_collect.multinode import check_multinode
    from servefleet.adapters.multinode import select_multinode
    from servefleet.core.drift import build_report

    single, multi = select_multinode(project, nodes)
    report = None if single == [] else check_fleet(project, single, secrets=secrets,
                                                   options=options)
    gateway = _gateway_items(project, nodes)
    if not multi and report is not None and not gateway:
        return report
    entries = {name: list(node.items) for name, node in (report.nodes.items() if report
                                                         else ())}
    entries.update(check_multinode(project, multi, secrets=secrets, options=options))
    for item in gateway:
        entries.setdefault(item.node, []).append(item)
    return build_report(entries, stack=project.stack.stack,
                        checked_at=report.checked_at if report else
                        datetime.now(UTC).isoformat(timespec="seconds"),
                        errors=report.errors if report else (),
                        notes=report.notes if report else ())


def _gateway_items(project: Project, nodes: tuple[str, ...]) -> list[Any]:
    """The gateway's drift items, when the stack has one on a node being checked."""
    from servefleet.adapters.gateway.drift import gateway_drift
    from servefleet.adapters.runtime import connect
    from servefleet.core.drift.items import DriftItem, DriftKind
    from servefleet.core.errors import ServefleetError
    from servefleet.core.gateway.render import render_gateway

    where = project.stack.gateway.node
    if where is None or (nodes and where not in nodes):
        return []
    rendered = render_gateway(project)
    try:
        with connect(project.nodes[where]) as transport:
            return gateway_drift(rendered, transport)
    except ServefleetError as error:
        return [DriftItem(node=where, deployment="gateway", kind=DriftKind.UNREACHABLE,
                          message=f"the gateway could not be checked: {error}")]


@click.command("drift", epilog=PULUMI_ROUTE)
@click.argument("nodes", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--timeout", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_SECONDS,
              show_default=True, help="Seconds per node before it is reported unreachable.")
@click.option("--notify", "notify_cmd", metavar="CMD",
              help="On drift or error, run CMD (no shell) with the JSON report on stdin.")
@click.option("--no-probe", is_flag=True, help="Skip the GPU probe (driver, CUDA, GPUs).")
@click.pass_obj
def drift_command(ctx: CliContext, nodes: tuple[str, ...], as_json: bool, timeout: float,
                  notify_cmd: str | None, no_probe: bool) -> None:
    """Compare every node (or NODES) with git: releases and their files, the engine
    container (state, command, env, labels, image digest, patch set), driver and GPUs, the
    engine version, and the latest boot's KV pool and CUDA-graph mode.

    Exit status: 0 every node matches, 2 drift, 1 error (an unreachable node, a
    configuration error). Nodes are checked in parallel, each with its own deadline; an
    unreachable node is reported and the others are still checked. Secret values for the
    release ids are read from environment variables of the same name (HF_TOKEN…); they are
    compared by sha256 and never shown.
    """
    from rich.console import Console

    from servefleet.adapters.drift_collect import CollectOptions
    from servefleet.adapters.drift_collect.check import check_fleet, secrets_from_environment
    from servefleet.core.drift import build_report
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project

    started = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        project = load_project(ctx.project_dir, ctx.stack)
        report = _with_multinode(project, nodes, check_fleet, secrets_from_environment(project),
                                 CollectOptions(timeout=timeout, probe=not no_probe))
    except ConfigError as error:
        report = build_report({}, stack=ctx.stack, checked_at=started, errors=error.problems)
    if as_json:
        click.echo(report.to_json(), nl=False)
    else:
        print_report(Console(highlight=False), report)
    if notify_cmd and report.exit_code != 0:
        problem = notify(notify_cmd, report)
        if problem is not None:
            click.secho(f"error: {problem}", fg="red", err=True)
    sys.exit(report.exit_code)


# --------------------------------------------------------------------------- nightly


def systemd_quote(arg: str) -> str:
    """One ``ExecStart=`` word: quoted when needed, ``%`` and ``$`` escaped (systemd
    expands specifiers and variables there)."""
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if escaped and not any(c in escaped for c in " \t\"'\\;"):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cron_quote(arg: str) -> str:
    """One word of a crontab command: shell-quoted, ``%`` escaped (cron turns it into a
    newline)."""
    return shlex.quote(arg).replace("%", "\\%")


def _nightly_templates(project_dir: Path) -> Path:
    from servefleet.core.render.templating import BUILTIN_TEMPLATES, TEMPLATES_DIR

    own = project_dir / TEMPLATES_DIR / NIGHTLY_TEMPLATES
    return own if own.is_dir() else BUILTIN_TEMPLATES / NIGHTLY_TEMPLATES


def render_nightly(project_dir: Path, stack: str, *, at: str, notify_cmd: str | None,
                   servefleet: list[str], env_file: str, user: str | None) -> dict[str, str]:
    """The unit files and the cron line, by file name."""
    import jinja2

    argv = [*servefleet, "--project", str(project_dir), "--stack", stack, "drift", "--json"]
    if notify_cmd:
        argv += ["--notify", notify_cmd]
    hour, minute = at.split(":")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_nightly_templates(project_dir))),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    context = {
        "unit": UNIT_NAME, "stack": stack, "project_dir": str(project_dir),
        "exec_start": " ".join(systemd_quote(a) for a in argv),
        "cron_command": " ".join(cron_quote(a) for a in argv),
        "cron_project_dir": cron_quote(str(project_dir)),
        "hour": int(hour), "minute": int(minute), "env_file": env_file, "user": user,
        "pulumi_route": PULUMI_ROUTE,
    }
    return {
        f"{UNIT_NAME}.service": env.get_template("service.j2").render(context),
        f"{UNIT_NAME}.timer": env.get_template("timer.j2").render(context),
        f"{UNIT_NAME}.cron": env.get_template("cron.j2").render(context),
    }


def _check_time(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    hour, sep, minute = value.partition(":")
    if not (sep and hour.isdigit() and minute.isdigit() and 0 <= int(hour) < 24
            and 0 <= int(minute) < 60 and len(minute) == 2):
        raise click.BadParameter(f"{value!r} is not a time HH:MM (00:00-23:59)")
    return f"{int(hour):02d}:{minute}"


@click.group("nightly")
def nightly_group() -> None:
    """The nightly drift check on the operator's control machine."""


@nightly_group.command("install", epilog=PULUMI_ROUTE)
@click.option("--at", default="03:15", show_default=True, callback=_check_time,
              help="Time of day (HH:MM, the machine's local time) to run the check.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("nightly"), show_default=True,
              help="Folder the unit files and the cron line are written to.")
@click.option("--notify", "notify_cmd", metavar="CMD",
              help="Command run with the JSON report on stdin when drift or an error is found.")
@click.option("--env-file", default="/etc/servefleet/drift.env", show_default=True,
              help="EnvironmentFile of the service: secret values (HF_TOKEN=…), mode 0600.")
@click.option("--user", default=None, help="Run the service as this user (default: root).")
@click.option("--enable", is_flag=True,
              help="Also copy the units into --systemd-dir and enable the timer (systemctl).")
@click.option("--systemd-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/etc/systemd/system"), show_default=True,
              help="Where --enable puts the units.")
@click.pass_obj
def nightly_install(ctx: CliContext, at: str, out_dir: Path, notify_cmd: str | None,
                    env_file: str, user: str | None, enable: bool, systemd_dir: Path) -> None:
    """Render a systemd service + timer running `servefleet drift --json` every night, and
    print the equivalent cron line.

    Only renders (into --out) unless --enable is given. The service exits 2 on drift and 1
    on error, so systemd marks it failed and `systemctl --failed` (or an OnFailure= hook)
    shows it; --notify sends the JSON report wherever you want it.
    """
    from servefleet.core.errors import ServefleetError

    files = render_nightly(ctx.project_dir, ctx.stack, at=at, notify_cmd=notify_cmd,
                           servefleet=[sys.executable, "-m", "servefleet.cli.main"],
                           env_file=env_file, user=user)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (out_dir / name).write_text(content)
        click.echo(f"wrote {out_dir / name}")
    click.echo("\ncron line (instead of the timer):")
    click.echo(files[f"{UNIT_NAME}.cron"].strip().splitlines()[-1])
    if not enable:
        click.echo(f"\nto install: cp {out_dir}/{UNIT_NAME}.service {out_dir}/{UNIT_NAME}.timer "
                   f"{systemd_dir}/ && systemctl daemon-reload && systemctl enable --now "
                   f"{UNIT_NAME}.timer")
        return
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        raise ServefleetError("--enable: systemctl not found; copy the units by hand or use "
                              "the cron line")
    systemd_dir.mkdir(parents=True, exist_ok=True)
    for suffix in ("service", "timer"):
        shutil.copyfile(out_dir / f"{UNIT_NAME}.{suffix}", systemd_dir / f"{UNIT_NAME}.{suffix}")
    for argv in ([systemctl, "daemon-reload"],
                 [systemctl, "enable", "--now", f"{UNIT_NAME}.timer"]):
        done = subprocess.run(argv, capture_output=True, check=False)
        if done.returncode != 0:
            raise ServefleetError(f"{' '.join(argv)}: "
                                  f"{done.stderr.decode('utf-8', 'replace').strip()}")
    click.echo(f"enabled {UNIT_NAME}.timer (next run at {at})")

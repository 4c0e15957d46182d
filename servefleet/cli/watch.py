"""``servefleet watch``: find engines that are wedged while they still say healthy, and
recover them safely (``docs/watch.md``).

``watch [NODES]`` samples every deployment once per interval over one kept-open SSH
connection per node, prints a table (or ``--json`` lines), writes a Prometheus text file
(``--textfile``) and acts through the recovery ladder of ``servefleet:watch``. ``--notify
CMD`` runs CMD (no shell) with one JSON object on stdin for every action or alert, as
``drift --notify`` does. ``watch install`` renders a systemd service that keeps it running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servefleet.cli.main import CliContext
from servefleet.cli.notify import run_notify

if TYPE_CHECKING:
    from rich.console import Console

    from servefleet.adapters.watch.fleet import WatchEvent

UNIT_NAME = "servefleet-watch"
STATE_STYLES = {"healthy": "green", "idle": "cyan", "starting": "yellow", "wedged": "bold red",
                "crash_looping": "bold red", "down": "red", "unknown": "magenta"}
TEXTFILE_HELP = ("Write the per-deployment state to PATH (Prometheus text format) after "
                 "every interval, for node_exporter's textfile collector.")


def notify_event(command: str, event: dict[str, Any]) -> str | None:
    """Hand the JSON to the ``--notify`` command (:func:`servefleet.cli.notify.run_notify`)."""
    return run_notify(command, json.dumps(event))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(events: Sequence[WatchEvent], restarts: dict[str, int]) -> str:
    """``servefleet_watch_state{node,deployment,state}`` (1 for the current state, 0 for
    the others, so that an alert can say ``== 1``), the restarts the watcher made in the
    policy window, and the time of the sample."""
    from servefleet.core.watch.classify import STATES

    lines = ["# HELP servefleet_watch_state Deployment state seen by servefleet watch "
             "(1 = current).",
             "# TYPE servefleet_watch_state gauge"]
    for event in events:
        where = f'node="{_label(event.node)}",deployment="{_label(event.deployment)}"'
        for state in STATES:
            lines.append(f'servefleet_watch_state{{{where},state="{state}"}} '
                         f"{1 if event.state == state else 0}")
    lines += ["# HELP servefleet_watch_restarts Restarts made by the watcher within the "
              "recovery window.", "# TYPE servefleet_watch_restarts gauge"]
    for event in events:
        where = f'node="{_label(event.node)}",deployment="{_label(event.deployment)}"'
        lines.append(f"servefleet_watch_restarts{{{where}}} "
                     f"{restarts.get(f'{event.node}/{event.deployment}', 0)}")
    lines += ["# HELP servefleet_watch_last_sample_seconds Unix time of the last sample.",
              "# TYPE servefleet_watch_last_sample_seconds gauge"]
    from time import time

    lines.append(f"servefleet_watch_last_sample_seconds {time():.0f}")
    return "\n".join(lines) + "\n"


def write_textfile(path: Path, text: str) -> None:
    """Replace ``path`` atomically (the collector never reads half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def print_table(console: Console, events: Sequence[WatchEvent]) -> None:
    """One row per deployment: state, why, the figures behind it, what was done."""
    from rich.table import Table
    from rich.text import Text

    table = Table(highlight=False)
    for column in ("deployment", "state", "held", "tokens", "canary", "power W", "action",
                   "why"):
        table.add_column(column, overflow="fold")
    for event in events:
        figures = event.figures
        held = (f"{figures.get('running', '-')}/{figures.get('waiting', '-')}"
                if figures else "-")
        power = ",".join(f"{p:.0f}" for p in figures.get("power_watts") or [] if p is not None)
        table.add_row(f"{event.node}/{event.deployment}",
                      Text(event.state, style=STATE_STYLES.get(event.state, "")), held,
                      str(figures.get("generation_tokens", "-")),
                      str(figures.get("canary", "-")), power or "-",
                      "-" if event.action == "none" else event.action, event.reason)
    console.print(table)


class WatchGroup(click.Group):
    """``watch [OPTIONS] [NODES]`` runs the watcher; ``watch install`` renders the unit."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Anything but ``install`` (or help) goes to the ``run`` sub-command."""
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


ONCE_EXIT_HELP = (
    "Exit status with --once (from the last sample): 0 every deployment healthy, idle or "
    "starting, 2 one wedged, crash-looping or down, 1 error (a node unreachable, so its "
    "deployments unknown; a configuration error). Without --once it runs until stopped.")
"""The exit status of ``watch --once``, in ``watch --help`` and ``watch run --help``."""


@click.group("watch", cls=WatchGroup, help=(
    "Watch every engine for wedges, crash loops and outages, and recover them "
    "(`servefleet watch [NODES] [--once] [--json]`, options: `servefleet watch run --help`; "
    f"`servefleet watch install`).\n\n{ONCE_EXIT_HELP}"))
def watch_group() -> None:
    """``watch`` runs the watcher (the ``run`` sub-command) or installs its unit."""


@watch_group.command("run", epilog=ONCE_EXIT_HELP)
@click.argument("nodes", nargs=-1)
@click.option("--once", is_flag=True,
              help="Take samples for one wedge window (wedgeIntervals + 1 reads), act, exit.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line per event.")
@click.option("--interval", type=click.FloatRange(min=1), default=None,
              help="Seconds between samples (default: servefleet:watch intervalSeconds).")
@click.option("--notify", "notify_cmd", metavar="CMD",
              help="On every action or alert, run CMD (no shell) with the JSON event on stdin.")
@click.option("--textfile", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=TEXTFILE_HELP)
@click.option("--no-act", is_flag=True, help="Only report and alert; never restart anything.")
@click.pass_obj
def watch_run(ctx: CliContext, nodes: tuple[str, ...], once: bool, as_json: bool,
              interval: float | None, notify_cmd: str | None, textfile: Path | None,
              no_act: bool) -> None:
    """Sample every deployment (or those on NODES) each interval: container state and
    restarts, /health, the engine's /metrics counters, a one-token canary, GPU power.

    States: healthy, idle, starting, wedged, crash_looping, down (unknown while a node does
    not answer; the others are still watched).
    """
    from rich.console import Console

    from servefleet.adapters.drift_collect.check import secrets_from_environment
    from servefleet.adapters.gateway.follow import following_gateway
    from servefleet.adapters.watch.fleet import FleetWatcher, watched
    from servefleet.adapters.watch.recover import Recovery
    from servefleet.core.project import load_project
    from servefleet.core.secrets import SecretMask
    from servefleet.core.watch.classify import TROUBLE

    if once:
        from servefleet.core import connect_policy

        # One short connect attempt per node: a node that is down is one `unknown` row.
        connect_policy.use(connect_policy.READ_ONLY)
    project = load_project(ctx.project_dir, ctx.stack)
    config = project.stack.watch
    if interval is not None:
        config = config.model_copy(update={"interval_seconds": interval})
    console = Console(highlight=False)

    def on_action(event: WatchEvent) -> None:
        payload = {"stack": project.stack.stack, **event.to_json()}
        if as_json:
            click.echo(json.dumps(payload))
        else:
            console.print(f"[bold]{event.kind}[/bold] {event.node}/{event.deployment}: "
                          f"{event.action}: {event.detail or event.reason}")
        if notify_cmd:
            problem = notify_event(notify_cmd, payload)
            if problem is not None:
                click.secho(f"error: {problem}", fg="red", err=True)

    secrets = secrets_from_environment(project)
    # A stuck engine is not serving, whatever its /health says: drain it even when it is
    # the last of its route.
    held = contextlib.ExitStack()
    gateway = held.enter_context(
        following_gateway(project, allow_outage=True, mask=SecretMask.from_mapping(secrets)))
    watcher = FleetWatcher(project, watched(project, list(nodes) or None), config,
                           secrets=secrets, act=not no_act, on_action=on_action,
                           recovery=Recovery(project, secrets=secrets, gateway=gateway,
                                             memory_wait_seconds=config.recovery
                                             .uma_free_wait_seconds))
    last: list[WatchEvent] = []
    stop = {"now": False}

    def on_events(events: list[WatchEvent]) -> None:
        last[:] = events
        if as_json:
            for event in events:
                click.echo(json.dumps(event.to_json()))
        elif not once:
            print_table(console, events)
        if textfile is not None:
            restarts = {key: len(t.ladder.restarts) for key, t in watcher.tracked.items()}
            write_textfile(textfile, prometheus_text(events, restarts))

    def on_signal(_signum: int, _frame: object) -> None:
        stop["now"] = True

    def should_stop() -> bool:
        # --once: when no node answered, the rest of the wedge window cannot add a sample.
        return stop["now"] or (once and nothing_read(last))

    signal.signal(signal.SIGTERM, on_signal)
    try:
        watcher.run(should_stop, on_events,
                    ticks=config.wedge_intervals + 1 if once else None)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.wait_for_recoveries(timeout=None if once else 1)
        watcher.close()
        held.close()
    if once:
        if last and not as_json:
            print_table(console, last)  # one table: the last sample's
        sys.exit(once_exit_code(last, TROUBLE))


def nothing_read(events: Sequence[WatchEvent]) -> bool:
    """Whether a sample was taken and no deployment in it could be read (every node
    unreachable): ``watch --once`` stops there instead of waiting out its window."""
    return bool(events) and all(e.state == "unknown" for e in events)


def once_exit_code(events: Sequence[WatchEvent], trouble: Collection[str]) -> int:
    """``watch --once``'s exit status, as ``drift``'s: 1 when a deployment could not be
    read (``unknown``: its node did not answer) or none was, 2 when one is in trouble,
    else 0."""
    if not events or any(e.state == "unknown" for e in events):
        return 1
    return 2 if any(e.state in trouble for e in events) else 0


def render_unit(project_dir: Path, stack: str, *, servefleet: list[str], notify_cmd: str | None,
                textfile: str | None, env_file: str, user: str | None) -> str:
    """The systemd service that keeps ``servefleet watch --json`` running."""
    from servefleet.cli.drift import systemd_quote

    argv = [*servefleet, "--project", str(project_dir), "--stack", stack, "watch", "--json"]
    if notify_cmd:
        argv += ["--notify", notify_cmd]
    if textfile:
        argv += ["--textfile", textfile]
    lines = ["[Unit]", f"Description=servefleet watch of stack {stack}: wedged engines, "
             "crash loops, outages", "After=network-online.target",
             "Wants=network-online.target", "", "[Service]", "Type=simple",
             f"WorkingDirectory={systemd_quote(str(project_dir))}",
             f"EnvironmentFile=-{env_file}",
             "ExecStart=" + " ".join(systemd_quote(a) for a in argv),
             # The watcher reconnects to nodes itself; this restarts the watcher.
             "Restart=always", "RestartSec=10"]
    if user:
        lines.append(f"User={user}")
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


@watch_group.command("install")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("watch"), show_default=True, help="Folder the unit is written to.")
@click.option("--notify", "notify_cmd", metavar="CMD",
              help="Command run with the JSON event on stdin on every action or alert.")
@click.option("--textfile", default="/var/lib/node_exporter/textfile/servefleet_watch.prom",
              show_default=True, help=TEXTFILE_HELP)
@click.option("--env-file", default="/etc/servefleet/watch.env", show_default=True,
              help="EnvironmentFile of the service: secret values (HF_TOKEN=…), mode 0600.")
@click.option("--user", default=None, help="Run the service as this user (default: root).")
@click.pass_obj
def watch_install(ctx: CliContext, out_dir: Path, notify_cmd: str | None, textfile: str,
                  env_file: str, user: str | None) -> None:
    """Render a systemd service running `servefleet watch --json` for good (only renders;
    the printed line installs it)."""
    unit = render_unit(ctx.project_dir, ctx.stack,
                       servefleet=[sys.executable, "-m", "servefleet.cli.main"],
                       notify_cmd=notify_cmd, textfile=textfile or None, env_file=env_file,
                       user=user)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{UNIT_NAME}.service"
    path.write_text(unit)
    click.echo(f"wrote {path}")
    click.echo(f"\nto install: cp {path} /etc/systemd/system/ && systemctl daemon-reload && "
               f"systemctl enable --now {UNIT_NAME}.service")

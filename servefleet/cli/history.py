"""``servefleet history NODE``: every release of a deployment on a node, and its gate.

Per deploy or rollback, oldest first: time, release, profile, KV pool, maximum
concurrency, CUDA-graph mode, boot seconds and the gate's verdict, then a bar per release
of the KV pool, so that a pool that shrank (MTP on, another process holding memory, an
image update) shows at a glance. Everything comes from the node's own records, read in one
read-only command (:mod:`servefleet.adapters.history`); see ``docs/history.md``.

Exit status (``docs/exit-codes.md``): 0; 1 on a configuration error or when the node could
not be read (one line: ``NODE: unreachable: reason``), as every command that reads a node.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from servefleet.adapters.history import NodeHistory

EXIT_UNREACHABLE = 1
"""Exit status when the node could not be read: an error, as for every other command (it
was 2, which ``drift`` and ``watch --once`` use for "something drifted")."""
CHART_WIDTH = 40
_VERDICT_COLOURS = {"passed": "green", "interrupted": "yellow", "rolled back": "yellow"}


def print_history(history: NodeHistory) -> None:
    """The table, coloured by verdict, then the KV chart (drops in red)."""
    from servefleet.core.history import kv_chart, table_lines

    rows = history.rows
    click.secho(f"{history.node}/{history.deployment}: {len(rows)} release"
                f"{'' if len(rows) == 1 else 's'} recorded", bold=True)
    if history.book_problem:
        click.secho(f"  warning: {history.book_problem}", fg="yellow")
    if not rows:
        return
    lines = table_lines(rows)
    click.secho("  " + lines[0], bold=True)
    for row, line in zip(rows, lines[1:], strict=True):
        click.secho("  " + line, fg=_VERDICT_COLOURS.get(row.verdict, "red"))
    click.echo()
    click.secho("  KV pool by release", bold=True)
    chart = kv_chart(rows, CHART_WIDTH)
    label = max(len(c.release_id) for c in chart)
    for bar in chart:
        click.echo("  " + bar.release_id.ljust(label) + "  ", nl=False)
        click.secho(bar.bar, fg="red" if bar.drop else "cyan", nl=False)
        click.secho(f" {bar.value}" if bar.bar else bar.value,
                    fg="red" if bar.drop else None, dim=not bar.bar)
    if history.bench:
        from servefleet.core.bench.table import by_release

        click.echo()
        click.secho("  Bench by release (output tok/s per scenario; `servefleet bench "
                    "--compare R1 R2`)", bold=True)
        for release, text in by_release(history.bench):
            click.echo(f"  {release.ljust(label)}  {text}")


@click.command("history")
@click.argument("node")
@click.option("--deployment", "-d", default="main", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--last", "last", type=click.IntRange(min=1), default=None, metavar="N",
              help="Only the N most recent releases.")
@click.pass_obj
def history_command(obj: CliContext, node: str, deployment: str, as_json: bool,
                    last: int | None) -> None:
    """Every release of NODE's deployment, oldest first: profile, KV pool, concurrency,
    CUDA-graph mode, boot time and gate verdict, with a chart of the KV pool."""
    import dataclasses

    from servefleet.adapters.history import node_history
    from servefleet.core.errors import ConfigError, ServefleetError
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    if node not in project.nodes:
        raise ConfigError(f"no node {node!r} in the inventory (known: "
                          f"{', '.join(sorted(project.nodes)) or 'none'})")
    try:
        history = node_history(project.nodes[node], deployment)
    except ServefleetError as error:
        click.echo(f"{node}: unreachable: {str(error).removeprefix(f'{node}: ')}")
        sys.exit(EXIT_UNREACHABLE)
    if last is not None:
        history = dataclasses.replace(history, rows=history.rows[-last:])
    if as_json:
        click.echo(json.dumps({"node": history.node, "deployment": history.deployment,
                               "baselines_problem": history.book_problem,
                               "releases": [r.to_json() for r in history.rows],
                               "bench": [json.loads(r.to_line()) for r in history.bench]},
                              indent=2))
    else:
        print_history(history)

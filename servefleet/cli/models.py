"""``servefleet models NODE``: the weights staged on a node, the releases using each, and
``--prune`` for those no release on the node needs."""

from __future__ import annotations

import json
import re
import sys

import click

from servefleet.cli.main import CliContext
from servefleet.cli.rollout_common import console


def _short(pin: str) -> str:
    """A pin with its digests cut to 12 hex digits, for a table."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{28,52}\b", r"\1…", pin)


@click.command("models")
@click.argument("node")
@click.option("--prune", is_flag=True,
              help="Remove staged weights that no release on the node uses.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_obj
def models_command(obj: CliContext, node: str, prune: bool, as_json: bool) -> None:
    """List the weights servefleet staged on NODE (snapshots in its Hugging Face cache,
    files in its models_dir) and the releases that use each (* = current). With --prune,
    remove those no release still on the node needs; anything the operator put there by
    hand is never listed nor touched."""
    from rich.table import Table

    from servefleet.adapters.runtime import connect
    from servefleet.adapters.weights import size_text
    from servefleet.adapters.weights.models import staged_models
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    if node not in project.nodes:
        raise ConfigError(f"unknown node {node!r}; the inventory has: "
                          f"{', '.join(sorted(project.nodes))}")
    with connect(project.nodes[node]) as transport:
        report = staged_models(transport, prune=prune)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        table = Table(box=None, header_style="bold")
        for column in ("kind", "weights", "size", "used by", *(("pruned",) if prune else ())):
            table.add_column(column)
        for item in report.items:
            row = [item.kind, _short(item.pin), size_text(item.size),
                   ", ".join(item.used_by) or "-"]
            if prune:
                row.append("yes" if item.pruned else "no (in use)" if item.pruned is None
                           else "FAILED")
            table.add_row(*row)
        out = console()
        if report.items:
            out.print(table)
        else:
            out.print(f"{node}: no staged weights")
        freed = sum(i.size for i in report.items if i.pruned)
        if prune:
            out.print(f"{node}: pruned {sum(1 for i in report.items if i.pruned)} item(s), "
                      f"{size_text(freed)} freed")
        for error in report.errors:
            out.print(f"[red]error:[/red] {error}")
    if report.errors:
        sys.exit(1)


COMMANDS: list[click.Command] = [models_command]
"""Commands of this module."""

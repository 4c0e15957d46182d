"""``servefleet rollback | unlock | releases``: a node's releases, an earlier one made
current again (health-gated), and a dead rollout's lock removed."""

from __future__ import annotations

import json
import sys

import click

from servefleet.cli.main import CliContext
from servefleet.cli.results import print_results
from servefleet.cli.rollout_common import console, node_secrets, show_findings


@click.command("rollback")
@click.argument("node")
@click.option("--deployment", "-d", default="main", show_default=True)
@click.option("--to", "to", default=None, help="Release id (default: the previous release).")
@click.option("--force-unlock", "force_unlock", metavar="LOCK_ID", default=None,
              help="Remove the node lock with this id first (a lock with another id stays).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def rollback_command(obj: CliContext, node: str, deployment: str, to: str | None,
                     force_unlock: str | None, as_json: bool) -> None:
    """Make an earlier release of NODE's deployment current again, health-gated (with the
    secrets its profile probes with, e.g. an API key, from the environment)."""
    from servefleet.adapters import rollout
    from servefleet.adapters.rollout import NodeResult
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    for dep in project.stack.multi_node:
        if dep.name == deployment and node in dep.nodes:
            # One rank on another release than its peers cannot join them; restoring every
            # rank is what a deploy of the earlier settings does, gated as one unit.
            raise ConfigError(
                f"{project.stack_file}: servefleet:multiNode.{dep.name}: {node} runs a rank "
                f"of {dep.key}; rolling back one rank is refused (every rank must run one "
                "release). Fix: put the earlier profile or settings back in the stack "
                f"file and run `servefleet deploy {dep.head}`, which moves every rank")
    secrets = node_secrets(project, node)
    if not as_json:
        show_findings(console(), project)
    result = rollout.rollback(project, node, deployment, to, secrets=secrets,
                              unlock_id=force_unlock)
    node_result = NodeResult(node, [result])
    if as_json:
        click.echo(json.dumps(node_result.to_json(), indent=2))
    else:
        print_results(console(), [node_result])
    if not result.ok:
        sys.exit(1)


@click.command("unlock")
@click.argument("node")
@click.argument("lock_id")
@click.pass_obj
def unlock_command(obj: CliContext, node: str, lock_id: str) -> None:
    """Remove NODE's lock if its id is LOCK_ID (as Terraform's force-unlock): for a lock
    left by a rollout that died. A lock with another id, a live rollout's, stays. The next
    `plan` shows what the dead rollout left; the next deploy repairs it."""
    from servefleet.adapters import rollout
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    outcome = rollout.unlock(project, node, lock_id)
    click.echo(f"{node}: lock {lock_id} removed" if outcome == "removed"
               else f"{node}: not locked")


@click.command("releases")
@click.argument("node")
@click.option("--deployment", "-d", default="main", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the releases as JSON.")
@click.pass_obj
def releases_command(obj: CliContext, node: str, deployment: str, as_json: bool) -> None:
    """List the releases of NODE's deployment, newest first (* = current)."""
    from rich.table import Table

    from servefleet.adapters import rollout
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    infos = rollout.list_releases(project, node, deployment,
                                  secrets=node_secrets(project, node))
    if as_json:
        click.echo(json.dumps([{"release_id": i.release_id, "current": i.current,
                                "created_at": i.created_at or None, "profile": i.profile,
                                "created_by": (i.manifest or {}).get("created_by")}
                               for i in infos], indent=2))
        return
    table = Table(box=None, header_style="bold")
    for column in ("", "release", "created", "profile", "by"):
        table.add_column(column)
    for info in infos:
        table.add_row("*" if info.current else "", info.release_id, info.created_at,
                      info.profile or "?", str((info.manifest or {}).get("created_by", "")))
    console().print(table)


COMMANDS: list[click.Command] = [rollback_command, unlock_command, releases_command]
"""Commands of this module."""

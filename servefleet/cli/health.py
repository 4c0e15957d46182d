"""``servefleet health [NODES]``: is what runs on the nodes what was intended?

For every deployment the stack places on NODES (default: all), reads the running engine's
boot log over SSH, holds it to the profile's expectations, probes the engine's HTTP API and
compares the KV pool with the node's baseline (see :mod:`servefleet.adapters.node_health`).
Prints a table per deployment (fact, expected, observed, verdict) and, for every failed
fact, the log lines or HTTP answers that prove it; ``--json`` prints one JSON document.

Exit status: 0 when every deployment is healthy, 1 when any check failed or a node could not
be checked, 3 (:data:`EXIT_BOOTING`) when nothing failed but an engine is still booting inside
its profile's boot deadline (shown as ``booting`` with the phase its log reached); ``--wait
[SECONDS]`` follows such a boot until it is ready (at most SECONDS, default: the deadline).

API keys (``VLLM_API_KEY``, ``LLAMA_API_KEY``) come from the environment when a
profile lists them in ``secret_env``; they are never printed.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from servefleet.adapters.node_health import HealthOptions
    from servefleet.core.health_table import DeploymentHealth
    from servefleet.core.project import Project

EXIT_BOOTING = 3
"""Exit status when no check failed but an engine is still booting inside its deadline (not
2: click exits 2 on a usage error)."""
WAIT_UNTIL_DEADLINE = -1.0
"""``--wait`` without a value: follow a boot until the profile's deadline."""

_VERDICT_COLOURS = {"pass": "green", "fail": "red", "warn": "yellow", "info": None}


def api_secrets(project: Project) -> dict[str, str]:
    """API keys some profile expects, from the environment."""
    from servefleet.adapters.probes import API_KEY_SECRETS

    wanted = {name for profile in project.profiles.values() for name in profile.secret_env
              if name in API_KEY_SECRETS}
    return {name: os.environ[name] for name in sorted(wanted) if os.environ.get(name)}


def print_report(results: list[DeploymentHealth]) -> None:
    """The text report, coloured by verdict."""
    from servefleet.core.health_table import (
        failure_lines,
        summary_line,
        table_lines,
        title_line,
    )

    for result in results:
        colour = "green" if result.ok else "yellow" if result.booting else "red"
        click.secho(title_line(result), fg=colour, bold=True)
        lines = table_lines(result.rows) if result.rows else []
        if lines:
            click.secho("  " + lines[0], bold=True)
        for row, line in zip(result.rows, lines[1:], strict=True):
            click.secho("  " + line, fg=_VERDICT_COLOURS.get(row.verdict))
        for line in failure_lines(result):
            click.secho(line, fg="red" if line.lstrip().startswith(("FAILED", "error")) else None)
        click.echo()
    colour = "green" if all(r.ok for r in results) else \
        "red" if any(r.failed for r in results) else "yellow"
    click.secho(summary_line(results), fg=colour)


def exit_status(results: list[DeploymentHealth]) -> int:
    """0 all healthy, 1 any failed or not checked, :data:`EXIT_BOOTING` when the rest is
    booting."""
    if any(r.failed for r in results):
        return 1
    return EXIT_BOOTING if any(r.booting for r in results) else 0


def _check(project: Project, nodes: tuple[str, ...], deployments: tuple[str, ...],
           options: HealthOptions) -> list[DeploymentHealth]:
    """The per-node deployments NODES select, then each engine spanning nodes (one report
    each, a block of rows per rank; :mod:`servefleet.adapters.multinode_health`)."""
    from servefleet.adapters import node_health
    from servefleet.adapters.multinode import select_multinode
    from servefleet.adapters.multinode_health import check_multinode_fleet

    single, multi = select_multinode(project, nodes)
    multi = [d for d in multi if not deployments or d.name in deployments]
    mine = [] if single == [] else [d for d in project.deployments(single)
                                    if not deployments or d.name in deployments]
    # Without a per-node deployment to check, check_fleet names what the stack lacks.
    results = [] if multi and not mine else node_health.check_fleet(
        project, single or list(nodes) or None, deployments=deployments or None,
        options=options)
    return [*results, *check_multinode_fleet(project, multi, options)]


def with_gateway_rows(project: Project,
                      results: list[DeploymentHealth]) -> list[DeploymentHealth]:
    """Each deployment's state in the stack's gateway as one more row (serving, draining,
    out), read once from its runtime API."""
    import dataclasses

    from servefleet.adapters.gateway.follow import following_gateway
    from servefleet.core.errors import ServefleetError
    from servefleet.core.gateway.routes import resolve_routes
    from servefleet.core.gateway.state import rotation_row

    if not project.stack.gateway.enabled:
        return results
    routes = resolve_routes(project)
    servers, problem = None, ""
    try:
        with following_gateway(project) as gateway:
            assert gateway is not None
            servers = gateway.api.servers()
    except ServefleetError as error:
        problem = str(error)
    out = []
    for result in results:
        row = rotation_row(result.node, result.deployment, routes, servers, problem)
        out.append(result if row is None else
                   dataclasses.replace(result, rows=(*result.rows, row)))
    return out


@click.command("health")
@click.argument("nodes", nargs=-1)
@click.option("--deployment", "-d", "deployments", multiple=True,
              help="Only these deployments (default: every deployment the stack places).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--determinism", is_flag=True,
              help="Also run the determinism probe (the same prompt 3 times at temperature "
                   "0), whatever the profile's health.determinism.probe says.")
@click.option("--wait", "wait", type=float, is_flag=False, flag_value=WAIT_UNTIL_DEADLINE,
              default=None, metavar="[SECONDS]",
              help="Follow an engine that is still booting until it is ready, at most "
                   "SECONDS (default: until its profile's boot deadline), instead of "
                   f"reporting it as booting (exit {EXIT_BOOTING}). Put NODES before it.")
@click.option("--rebaseline", is_flag=True,
              help="Record the current KV pools as the nodes' baselines, replacing the old "
                   "ones (after an intended change the tolerance flagged).")
@click.pass_obj
def health_command(obj: CliContext, nodes: tuple[str, ...], deployments: tuple[str, ...],
                   as_json: bool, determinism: bool, wait: float | None,
                   rebaseline: bool) -> None:
    """Check the engines running on NODES (default: every node of the stack): boot log
    against the profile, HTTP probes, KV pool against the node's baseline."""
    from servefleet.adapters import node_health
    from servefleet.core.health_table import fleet_json
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    if wait is not None and wait < 0 and wait != WAIT_UNTIL_DEADLINE:
        raise click.BadParameter("SECONDS must be 0 or more", param_hint="--wait")
    options = node_health.HealthOptions(
        determinism=True if determinism else None, wait=wait is not None,
        wait_seconds=None if wait is None or wait == WAIT_UNTIL_DEADLINE else wait,
        rebaseline=rebaseline, secrets=api_secrets(project))
    results = with_gateway_rows(project, _check(project, nodes, deployments, options))
    if as_json:
        click.echo(json.dumps(fleet_json(results), indent=2))
    else:
        print_report(results)
    sys.exit(exit_status(results))

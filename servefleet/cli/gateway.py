"""``servefleet gateway``: deploy the fleet's gateway, and see what it routes where."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from servefleet.cli.main import CliContext
from servefleet.cli.rollout_common import console

if TYPE_CHECKING:
    from servefleet.core.gateway.state import ServerState
    from servefleet.core.project import Project


@click.group("gateway")
def gateway_group() -> None:
    """The fleet's gateway (HAProxy): one OpenAI-compatible endpoint, routed by model."""


@gateway_group.command("deploy")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def deploy_command(obj: CliContext, as_json: bool) -> None:
    """Render the gateway from the stack and roll it out on its node, gated; a release
    that fails its gate is replaced by the one before."""
    from servefleet.adapters.gateway.rollout import roll_out
    from servefleet.core.gateway.render import render_gateway
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    rendered = render_gateway(project)
    out = console()
    say = (lambda line: None) if as_json else (
        lambda line: out.print(f"{rendered.node} gateway: {line}", highlight=False))
    result = roll_out(project, rendered, say=say)
    if as_json:
        click.echo(json.dumps({"node": result.node, "release": result.release_id,
                               "status": result.status, "message": result.message,
                               "servers": [_server(s) for s in result.servers]}, indent=2))
    else:
        out.print(f"{result.node} gateway {result.release_id}: {result.status}: "
                  f"{result.message}", highlight=False)
    if not result.ok:
        sys.exit(1)


def gateway_view(project: Project) -> dict[str, Any]:
    """The gateway as git renders it and as it runs: its release on both sides, and each
    route's engines with their state (``None`` where the gateway could not be read)."""
    from servefleet.adapters.gateway.rollout import current_release
    from servefleet.adapters.gateway.runtime_api import api_through
    from servefleet.adapters.runtime import connect
    from servefleet.core.errors import ServefleetError
    from servefleet.core.gateway.render import render_gateway

    rendered = render_gateway(project)
    config = project.stack.gateway
    running: str | None = None
    states: dict[tuple[str, str], ServerState] | None = None
    problem = ""
    try:
        with connect(project.nodes[rendered.node]) as transport:
            running = current_release(transport)
            states = {(s.backend, s.server): s
                      for s in api_through(transport, config.admin_port).servers()}
    except ServefleetError as error:
        problem = str(error)
    routes = []
    for route in rendered.routes:
        r = route.route
        engines = []
        for backend in route.backends:
            state = None if states is None else states.get((route.name, backend.server))
            engines.append({"deployment": backend.key,
                            "rotation": state.rotation if state else None,
                            "status": state.status if state else None,
                            "in_flight": state.in_flight if state else None})
        routes.append({"name": route.name, "model": r.model, "header": r.header,
                       "prompt_over_bytes": r.prompt_over_bytes, "thinking": r.thinking,
                       "engines": engines})
    return {"node": rendered.node, "port": config.port, "release": rendered.release_id,
            "running_release": running, "problem": problem, "routes": routes}


def gateway_lines(view: dict[str, Any]) -> list[str]:
    """``view`` as text: a head line, then each route and its engines."""
    action = ("unchanged" if view["running_release"] == view["release"] else
              f"update (runs {view['running_release'] or 'nothing'})")
    lines = [f"gateway on {view['node']}:{view['port']}  release {view['release']}: {action}"
             + (f"  (not read: {view['problem']})" if view["problem"] else "")]
    for route in view["routes"]:
        lane = " and ".join(x for x in (
            f"header {route['header']}" if route["header"] else "",
            f"body > {route['prompt_over_bytes']} B" if route["prompt_over_bytes"] else "")
            if x) or "any"
        thinking = ("" if route["thinking"] is None else
                    f", thinking {'on' if route['thinking'] else 'off'}")
        lines.append(f"  {route['name']}  {route['model']}  ({lane}{thinking})")
        for engine in route["engines"]:
            shown = ("not in the running gateway" if engine["rotation"] is None and
                     not view["problem"] else "?" if engine["rotation"] is None else
                     f"{engine['rotation']:<9} {engine['status']} "
                     f"({engine['in_flight']} in flight)")
            lines.append(f"      {engine['deployment']:<24} {shown}")
    return lines


@gateway_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_obj
def status_command(obj: CliContext, as_json: bool) -> None:
    """The gateway's release (git's and the running one), its routes and each engine's
    state in it (serving, draining, out), read from its runtime API."""
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    if not project.stack.gateway.enabled:
        # A fact of the stack, not a mistyped command line: exit 1, not click's 2.
        raise ConfigError(f"stack {project.stack.stack!r} has no gateway "
                          "(servefleet:gateway.node)")
    view = gateway_view(project)
    if as_json:
        click.echo(json.dumps(view, indent=2))
    else:
        out = console()
        for line in gateway_lines(view):
            out.print(line, highlight=False)
    if view["problem"]:
        sys.exit(1)


def _server(state: ServerState) -> dict[str, object]:
    return {"route": state.backend, "server": state.server, "admin": state.admin,
            "status": state.status, "in_flight": state.in_flight, "rotation": state.rotation}

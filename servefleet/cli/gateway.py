"""``servefleet gateway``: deploy the fleet's gateway, and see what it routes where."""

from __future__ import annotations

import json
import sys

import click

from servefleet.cli.main import CliContext
from servefleet.cli.rollout_common import console


@click.group("gateway")
def gateway_group() -> None:
    """The fleet's gateway (HAProxy): one OpenAI-compatible endpoint, routed by model."""


@gateway_group.command("deploy")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def deploy_command(obj: CliContext, as_json: bool) -> None:
    """Render the gateway from the stack and roll it out on its node, gated; a release
    that fails its gate is replaced by the one before."""
    from servefleet.adapters.gateway.rollout import deploy_gateway
    from servefleet.adapters.ssh import SshTransport
    from servefleet.core.gateway.render import render_gateway
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    rendered = render_gateway(project)
    out = console()
    say = (lambda line: None) if as_json else (
        lambda line: out.print(f"{rendered.node} gateway: {line}", highlight=False))
    with SshTransport(project.nodes[rendered.node]) as transport:
        result = deploy_gateway(project, rendered, transport, say=say)
    if as_json:
        click.echo(json.dumps({"node": result.node, "release": result.release_id,
                               "status": result.status, "message": result.message,
                               "servers": [_server(s) for s in result.servers]}, indent=2))
    else:
        out.print(f"{result.node} gateway {result.release_id}: {result.status}: "
                  f"{result.message}", highlight=False)
    if result.status not in ("deployed", "unchanged"):
        sys.exit(1)


@gateway_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_obj
def status_command(obj: CliContext, as_json: bool) -> None:
    """The routes and each engine's state in the running gateway (serving, draining,
    out), read from its runtime API."""
    from servefleet.adapters.gateway.follow import following_gateway
    from servefleet.core.gateway.routes import resolve_routes
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    routes = resolve_routes(project)
    with following_gateway(project) as follow:
        if follow is None:
            raise click.UsageError("this stack has no gateway (servefleet:gateway.node)")
        servers = follow.api.servers()
    if as_json:
        click.echo(json.dumps({"routes": [{"name": r.name, "model": r.route.model,
                                           "header": r.route.header,
                                           "prompt_over_bytes": r.route.prompt_over_bytes,
                                           "thinking": r.route.thinking,
                                           "to": [b.key for b in r.backends]}
                                          for r in routes],
                               "servers": [_server(s) for s in servers]}, indent=2))
        return
    out = console()
    states = {(s.backend, s.server): s for s in servers}
    for route in routes:
        r = route.route
        lane = " and ".join(x for x in (f"header {r.header}" if r.header else "",
                                        f"body > {r.prompt_over_bytes} B"
                                        if r.prompt_over_bytes else "") if x) or "any"
        thinking = "" if r.thinking is None else f", thinking {'on' if r.thinking else 'off'}"
        out.print(f"{route.name}  {r.model}  ({lane}{thinking})", highlight=False)
        for backend in route.backends:
            state = states.get((route.name, backend.server))
            shown = (f"{state.rotation:<9} {state.status} ({state.in_flight} in flight)"
                     if state else "not in the running gateway (deploy it)")
            out.print(f"    {backend.key:<24} {shown}", highlight=False)


def _server(state: object) -> dict[str, object]:
    from servefleet.core.gateway.state import ServerState

    assert isinstance(state, ServerState)
    return {"route": state.backend, "server": state.server, "admin": state.admin,
            "status": state.status, "in_flight": state.in_flight, "rotation": state.rotation}

"""The gateway as a Pulumi resource (``servefleet:Gateway``): rendered by the program,
rolled out by the provider before the engines that depend on it, and read back by
``pulumi refresh`` (a gateway running another release than the one rendered is drift and
a change)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

from servefleet.adapters.gateway.rollout import GatewayResult, current_release, roll_out
from servefleet.adapters.gateway.runtime_api import api_through
from servefleet.adapters.pulumi_common import ServefleetProvider
from servefleet.adapters.pulumi_provider import RESOURCE_MODULE
from servefleet.adapters.runtime import connect
from servefleet.core.errors import ConfigError, ServefleetError
from servefleet.core.gateway.render import render_gateway
from servefleet.core.gateway.routes import GATEWAY_DEPLOYMENT
from servefleet.core.project import Project, load_project

GATEWAY_RESOURCE_NAME = "Gateway"
OUTPUT_KEYS = ("endpoint", "runningRelease", "servers")


@dataclass(frozen=True)
class GatewayArgs:
    """Inputs of a :class:`GatewayResource`."""

    node: str
    """The node the gateway runs on."""
    address: str
    """Its address (for the endpoint)."""
    port: int
    """The port clients use."""
    project_dir: str
    stack: str
    release_id: str
    """The release the program rendered (files and routes)."""

    def to_props(self) -> dict[str, Any]:
        """Input properties plus the declared outputs (``None``)."""
        props: dict[str, Any] = {"node": self.node, "address": self.address, "port": self.port,
                                 "projectDir": self.project_dir, "stack": self.stack,
                                 "releaseId": self.release_id}
        return {**props, **dict.fromkeys(OUTPUT_KEYS)}


def gateway_args(project: Project) -> GatewayArgs:
    """Render the gateway and build its resource inputs."""
    rendered = render_gateway(project)
    node = project.nodes[rendered.node]
    return GatewayArgs(node=node.name, address=node.address, port=project.stack.gateway.port,
                       project_dir=str(project.root), stack=project.stack.stack,
                       release_id=rendered.release_id)


def _outs(props: dict[str, Any], result: GatewayResult) -> dict[str, Any]:
    inputs = {k: v for k, v in props.items() if k not in OUTPUT_KEYS}
    return {**inputs, "endpoint": f"http://{props['address']}:{props['port']}",
            "runningRelease": result.release_id,
            "servers": [{"route": s.backend, "server": s.server, "rotation": s.rotation,
                         "status": s.status} for s in result.servers]}


def apply_gateway(props: dict[str, Any]) -> dict[str, Any]:
    """Roll the gateway out; raises with the reason when it does not pass its gate."""
    project = load_project(Path(str(props["projectDir"])), str(props["stack"]))
    rendered = render_gateway(project)
    if rendered.release_id != props.get("releaseId"):
        raise ConfigError(f"gateway: the project renders release {rendered.release_id} now, "
                          f"but the program rendered {props.get('releaseId')}: a file "
                          "changed while pulumi ran; run `pulumi up` again")
    result = roll_out(project, rendered, say=pulumi.log.info)
    if not result.ok:
        raise ServefleetError(f"{result.node} gateway {result.release_id}: {result.status}: "
                              f"{result.message}")
    return _outs(props, result)


class GatewayProvider(ServefleetProvider):
    """Pulumi dynamic provider of :class:`GatewayResource`."""

    def apply(self, props: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
        """Roll the gateway out on its node (gated; the old one restored on failure)."""
        return apply_gateway(props)

    def resource_id(self, props: dict[str, Any]) -> str:
        """``<node>/gateway``."""
        return f"{props['node']}/{GATEWAY_DEPLOYMENT}"

    def diff(self, _id: str, _olds: dict[str, Any],
             _news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        """Changed when the rendered release, the node or the port changes, or when the
        node runs another release than the one deployed (drift, seen by a refresh)."""
        keys = ("releaseId", "node", "address", "port")
        changed = any(_olds.get(k) != _news.get(k) for k in keys)
        drifted = _olds.get("runningRelease") not in (None, _olds.get("releaseId"))
        return pulumi.dynamic.DiffResult(changes=changed or drifted,
                                         replaces=["node"] if _olds.get("node") !=
                                         _news.get("node") else [])

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        """The release the node runs now, and each engine's state (``pulumi refresh``)."""
        project = load_project(Path(str(props["projectDir"])), str(props["stack"]))
        with connect(project.nodes[str(props["node"])]) as transport:
            running = current_release(transport)
            try:
                servers = api_through(transport, project.stack.gateway.admin_port).servers()
            except ServefleetError:
                servers = []
        outs = _outs(props, GatewayResult(str(props["node"]), running or "", "read", "",
                                          tuple(servers)))
        outs["runningRelease"] = running
        return pulumi.dynamic.ReadResult(id_=id_, outs=outs)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Stop the gateway; its releases stay on the node."""
        from servefleet.adapters.gateway.rollout import stop_gateway

        project = load_project(Path(str(_props["projectDir"])), str(_props["stack"]))
        with connect(project.nodes[str(_props["node"])]) as transport:
            stop_gateway(transport)


class GatewayResource(pulumi.dynamic.Resource, module=RESOURCE_MODULE,
                      name=GATEWAY_RESOURCE_NAME):
    """The fleet's gateway, rolled out by servefleet."""

    endpoint: pulumi.Output[str]
    """``http://<address>:<port>``: the fleet's one OpenAI-compatible endpoint."""
    runningRelease: pulumi.Output[str | None]
    """The release ``current`` names on the node."""
    servers: pulumi.Output[list[dict[str, str]]]
    """Each engine in each route: rotation (serving, draining, out) and status."""

    def __init__(self, name: str, args: GatewayArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GatewayProvider(), name, args.to_props(), opts)

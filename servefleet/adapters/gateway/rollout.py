"""The gateway's rollout on its node, like an engine's: upload the release under the node
lock, ``compose up`` it, gate it (HAProxy answers its health URI and its runtime API, and
knows every engine of the stack), then switch ``current``. A release that fails its gate
is replaced by the one that served before (or stopped, when there was none)."""

from __future__ import annotations

import contextlib
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from servefleet.adapters import remote
from servefleet.adapters.gateway.runtime_api import RuntimeApi, api_through
from servefleet.adapters.lock import NodeLock
from servefleet.adapters.releases import checksum_lines, tar_bytes
from servefleet.adapters.runtime import Transport, connect
from servefleet.core.errors import RemoteError, ServefleetError
from servefleet.core.gateway.render import RenderedGateway
from servefleet.core.gateway.routes import GATEWAY_DEPLOYMENT
from servefleet.core.gateway.state import ServerState
from servefleet.core.project import Project

COMPOSE = ("docker", "compose")
GATE_TIMEOUT_SECONDS = 60
HEALTH_PATH = "/servefleet/health"
CURRENT_SCRIPT = 'readlink "$1/' + remote.CURRENT + '" 2>/dev/null | sed "s#.*/##" || true'

Say = Callable[[str], None]


@dataclass(frozen=True)
class GatewayResult:
    """What a gateway rollout did."""

    node: str
    release_id: str
    status: str
    """``unchanged``, ``deployed``, ``rolled_back`` or ``failed``."""
    message: str
    servers: tuple[ServerState, ...] = ()

    @property
    def ok(self) -> bool:
        """The gateway serves this release (newly deployed, or already)."""
        return self.status in ("deployed", "unchanged")


def current_release(transport: Transport) -> str | None:
    """The gateway release ``current`` names on the node, if any."""
    folder = remote.deployment_dir(transport.node.base_dir, GATEWAY_DEPLOYMENT)
    text = transport.run(["sh", "-c", CURRENT_SCRIPT, "sh", folder], idempotent=True,
                         what="read the gateway's current release").text().strip()
    return text or None


def _compose(base_dir: str, release_id: str, *args: str) -> list[str]:
    folder = remote.release_dir(base_dir, GATEWAY_DEPLOYMENT, release_id)
    return [*COMPOSE, "-p", remote.compose_project(GATEWAY_DEPLOYMENT), "--project-directory",
            folder, "-f", f"{folder}/compose.yaml", *args]


def _health(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def gate(project: Project, rendered: RenderedGateway, api: RuntimeApi, *,
         timeout: float = GATE_TIMEOUT_SECONDS,
         health: Callable[[str], bool] = _health) -> list[ServerState]:
    """Wait for the gateway to answer its health URI and its runtime API with every engine
    of the stack in it; the servers it knows. Raises :class:`ServefleetError` past
    ``timeout``."""
    node = project.nodes[rendered.node]
    url = f"http://{node.address}:{project.stack.gateway.port}{HEALTH_PATH}"
    wanted = {(r.name, b.server) for r in rendered.routes for b in r.backends}
    deadline = time.monotonic() + timeout
    problem = "no answer yet"
    while time.monotonic() < deadline:
        if not health(url):
            problem = f"{url} does not answer 200"
        else:
            try:
                servers = api.servers()
            except ServefleetError as error:
                problem = f"runtime API: {error}"
            else:
                missing = wanted - {(s.backend, s.server) for s in servers}
                if not missing:
                    return servers
                problem = "engines missing from the running config: " + ", ".join(
                    f"{b}/{s}" for b, s in sorted(missing))
        time.sleep(0.5)
    raise ServefleetError(f"gateway on {rendered.node}: gate not passed within {timeout:g} s: "
                          f"{problem}")


def deploy_gateway(project: Project, rendered: RenderedGateway, transport: Transport, *,
                   say: Say = lambda line: None,
                   health: Callable[[str], bool] = _health) -> GatewayResult:
    """Roll the gateway's release out on its node (see the module docstring)."""
    node = transport.node
    files = {name: (content, 0o644) for name, content in rendered.files.items()}
    api = api_through(transport, project.stack.gateway.admin_port)
    with NodeLock(transport, "gateway-deploy", datetime.now(UTC)):
        before = current_release(transport)
        if before == rendered.release_id:
            with contextlib.suppress(ServefleetError):
                servers = gate(project, rendered, api, timeout=10, health=health)
                return GatewayResult(node.name, rendered.release_id, "unchanged",
                                     "the gateway runs this release", tuple(servers))
            say("the current release does not pass its gate: starting it again")
        say(f"uploading gateway release {rendered.release_id}")
        transport.run(remote.upload_release(node.base_dir, GATEWAY_DEPLOYMENT,
                                            rendered.release_id, checksum_lines(files)),
                      stdin=tar_bytes(files), idempotent=True,
                      what=f"upload gateway release {rendered.release_id}")
        say("starting HAProxy")
        transport.run(_compose(node.base_dir, rendered.release_id, "up", "-d",
                               "--remove-orphans"), timeout=300, what="start the gateway")
        try:
            servers = gate(project, rendered, api, health=health)
        except ServefleetError as error:
            return _roll_back(transport, rendered, before, str(error), say)
        transport.run(remote.switch_current(node.base_dir, GATEWAY_DEPLOYMENT,
                                            rendered.release_id),
                      idempotent=True, what="switch the gateway's current release")
        say(f"gateway serves on port {project.stack.gateway.port}")
        return GatewayResult(node.name, rendered.release_id, "deployed",
                             f"release {rendered.release_id} passed its gate", tuple(servers))


def roll_out(project: Project, rendered: RenderedGateway, *,
             say: Say = lambda line: None) -> GatewayResult:
    """:func:`deploy_gateway` over a connection of its own to the gateway's node."""
    with connect(project.nodes[rendered.node]) as transport:
        return deploy_gateway(project, rendered, transport, say=say)


def _roll_back(transport: Transport, rendered: RenderedGateway, before: str | None,
               why: str, say: Say) -> GatewayResult:
    node = transport.node
    say(f"gate failed: {why}")
    try:
        if before is not None:
            transport.run(_compose(node.base_dir, before, "up", "-d", "--remove-orphans"),
                          timeout=300, what="start the gateway's previous release")
            return GatewayResult(node.name, rendered.release_id, "rolled_back",
                                 f"{why}; release {before} serves again")
        transport.run(_compose(node.base_dir, rendered.release_id, "down"), timeout=120,
                      what="stop the failed gateway")
    except RemoteError as error:
        return GatewayResult(node.name, rendered.release_id, "failed",
                             f"{why}; and the previous release could not be started: {error}")
    return GatewayResult(node.name, rendered.release_id, "failed", f"{why}; stopped")


def stop_gateway(transport: Transport) -> None:
    """Stop the gateway's containers (its releases stay on the node)."""
    release = current_release(transport)
    if release is None:
        return
    transport.run(_compose(transport.node.base_dir, release, "down"), timeout=120,
                  what="stop the gateway")

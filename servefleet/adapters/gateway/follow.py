"""The gateway follows the rollout: a deployment is drained in every route it serves
before its engine stops (no new requests; those in flight finish, within the gateway's
drain timeout) and re-admitted after its new release passed the gate. A failed rollout
leaves it drained until its restore passes the gate. Draining the last engine of a route
that serves is refused unless the operator allows the outage."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from servefleet.adapters.gateway.runtime_api import RuntimeApi, api_through, wait_for
from servefleet.adapters.rollout.steps import Hook, HookCall, RolloutHooks
from servefleet.adapters.runtime import Transport, open_transport
from servefleet.core.errors import ServefleetError
from servefleet.core.gateway.routes import (
    ResolvedRoute,
    fallback_of,
    resolve_routes,
    servers_of,
)
from servefleet.core.gateway.state import ServerState
from servefleet.core.models.gateway import GatewayConfig
from servefleet.core.project import Project
from servefleet.core.secrets import SecretMask

Say = Callable[[str], None]


@dataclass(frozen=True)
class GatewayEvent:
    """A change this follower made to what the gateway sends to: when a server stopped
    getting new requests, or was about to get them again."""

    what: Literal["drained", "admitting"]
    """``drained``: set to drain (no new request from here on); ``admitting``: about to be
    set back to ready (no new request before this)."""
    backend: str
    server: str
    """HAProxy's server name, ``node.deployment``: what the gateway's
    ``x-servefleet-engine`` response header says."""
    at: float
    """``time.monotonic()`` of the change."""


class OutageRefused(ServefleetError):
    """Draining this engine would leave a route with no engine serving."""


@dataclass
class GatewayFollow:
    """Drain and re-admit one stack's deployments in its gateway."""

    config: GatewayConfig
    routes: list[ResolvedRoute]
    api: RuntimeApi
    allow_outage: bool = False
    drained: set[str] = field(default_factory=set)
    """``node/deployment`` keys this object drained and has not re-admitted."""
    events: list[GatewayEvent] = field(default_factory=list)
    """Every drain and re-admission, in order: the window in which a drained engine must
    get no new request."""
    clock: Callable[[], float] = time.monotonic
    turn: threading.Lock = field(default_factory=threading.Lock)
    """One check-and-drain at a time: two engines of a route rolled out in parallel must
    not both see the other serving and both drain."""

    def drain(self, node: str, deployment: str, say: Say) -> None:
        """Take the deployment out of rotation and wait for its requests in flight."""
        mine = servers_of(self.routes, node, deployment)
        if not mine:
            return
        with self.turn:
            states = self.api.servers()
            if not self.allow_outage:
                self._refuse_outage(node, deployment, mine, states)
            for backend, server in mine:
                self.api.set_state(backend, server, "drain")
                self.events.append(GatewayEvent("drained", backend, server, self.clock()))
            self.drained.add(f"{node}/{deployment}")
        say(f"drained in the gateway ({', '.join(b for b, _ in mine)}); waiting for the "
            "requests in flight")
        wanted = set(mine)

        def idle(now: list[ServerState]) -> bool:
            return all(s.in_flight == 0 for s in now if (s.backend, s.server) in wanted)

        last = wait_for(self.api, idle, timeout=self.config.drain_timeout_seconds)
        left = sum(s.in_flight for s in last if (s.backend, s.server) in wanted)
        say("no request in flight" if not left else
            f"{left} request(s) still in flight after {self.config.drain_timeout_seconds:g} s "
            "(the gateway's drainTimeoutSeconds): stopping anyway")

    def _refuse_outage(self, node: str, deployment: str, mine: list[tuple[str, str]],
                       states: list[ServerState]) -> None:
        """Refuse when a route this deployment serves in would have no engine left: none
        of its own, and (a lane) none in the route its requests fall through to."""
        ours = {server for _, server in mine}
        serving = {(s.backend, s.server) for s in states if s.rotation == "serving"}
        by_name = {r.name: r for r in self.routes}

        def others(route: ResolvedRoute) -> bool:
            return any(b == route.name and s not in ours for b, s in serving)

        for backend, server in mine:
            if (backend, server) not in serving:
                continue  # not serving now: taking it out takes nothing away
            route = by_name[backend]
            fallback = fallback_of(self.routes, route) if route.lane else None
            if others(route) or (fallback is not None and others(fallback)):
                continue
            raise OutageRefused(
                f"gateway: {node}/{deployment} is the last engine serving route {backend} "
                f"({route.route.model}; no other is up and in rotation); its requests would "
                "fail until it is back. Roll out the others first, or allow the outage "
                "(--allow-outage, or servefleet:allowOutage under pulumi up)")

    def readmit(self, node: str, deployment: str, say: Say) -> None:
        """Put the deployment back in rotation and wait for the gateway's health check to
        pass (within its ready timeout)."""
        mine = servers_of(self.routes, node, deployment)
        if not mine:
            return
        for backend, server in mine:
            self.events.append(GatewayEvent("admitting", backend, server, self.clock()))
            self.api.set_state(backend, server, "ready")
        self.drained.discard(f"{node}/{deployment}")
        wanted = set(mine)

        def serving(now: list[ServerState]) -> bool:
            return all(s.rotation == "serving" for s in now
                       if (s.backend, s.server) in wanted)

        last = wait_for(self.api, serving, timeout=self.config.ready_timeout_seconds)
        if not serving(last):
            states = ", ".join(f"{s.backend}/{s.server} {s.status}" for s in last
                               if (s.backend, s.server) in wanted)
            raise ServefleetError(f"gateway: re-admitted, but its health check does not pass "
                                  f"within {self.config.ready_timeout_seconds:g} s ({states})")
        say("serving in the gateway again")

    def readmit_if_drained(self, node: str, deployment: str, say: Say) -> None:
        """Re-admit only what this object drained (a rollout failing before its drain
        leaves the gateway as it was)."""
        if f"{node}/{deployment}" in self.drained:
            self.readmit(node, deployment, say)

    def hooks(self) -> RolloutHooks:
        """The rollout hooks: drain before the stop, re-admit after the gate and after a
        restore."""
        def drain(call: HookCall) -> None:
            self.drain(call.node, call.target.deployment, call.say)

        def readmit(call: HookCall) -> None:
            self.readmit(call.node, call.target.deployment, call.say)

        def restored(call: HookCall) -> None:
            self.readmit_if_drained(call.node, call.target.deployment, call.say)

        return RolloutHooks(before_stop=(Hook("gateway-drain", drain),),
                            after_gate=(Hook("gateway-admit", readmit),),
                            after_restore=(Hook("gateway-admit", restored),))


TransportFactory = Callable[..., contextlib.AbstractContextManager[Transport]]


@contextlib.contextmanager
def following_gateway(project: Project, *, allow_outage: bool = False,
                      mask: SecretMask | None = None,
                      transport_factory: TransportFactory | None = None,
                      ) -> Iterator[GatewayFollow | None]:
    """The stack's gateway, followed for the length of a rollout (one SSH connection to its
    node); ``None`` when the stack has none. Routes are resolved first, so a wrong one stops
    the rollout before any node is touched."""
    config = project.stack.gateway
    if config.node is None:
        yield None
        return
    routes = resolve_routes(project)
    node = project.nodes[config.node]
    factory = transport_factory or open_transport
    with factory(node, mask or SecretMask.from_mapping({})) as transport:
        yield GatewayFollow(config, routes, api_through(transport, config.admin_port),
                            allow_outage=allow_outage)

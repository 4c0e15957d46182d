"""The stack's gateway routes resolved against its deployments: which engines (address and
port) each route sends to, and the route every served model gets without one."""

from __future__ import annotations

from dataclasses import dataclass

from servefleet.core.errors import ConfigError
from servefleet.core.models.gateway import GatewayRoute
from servefleet.core.project import Project

GATEWAY_DEPLOYMENT = "gateway"
"""The gateway's deployment folder and compose project on its node."""


@dataclass(frozen=True)
class Backend:
    """One engine the gateway sends to."""

    node: str
    deployment: str
    address: str
    port: int

    @property
    def server(self) -> str:
        """HAProxy's server name: ``node.deployment`` (names never hold a dot)."""
        return f"{self.node}.{self.deployment}"

    @property
    def key(self) -> str:
        """``node/deployment``, as the rest of servefleet names it."""
        return f"{self.node}/{self.deployment}"


@dataclass(frozen=True)
class ResolvedRoute:
    """A route with its backends; ``name`` is its HAProxy backend."""

    name: str
    route: GatewayRoute
    backends: tuple[Backend, ...]

    @property
    def lane(self) -> bool:
        """Only some requests match (a header, a prompt size); the others, and these too
        when no engine of the lane serves, go to the model's later routes."""
        return self.route.header is not None or self.route.prompt_over_bytes is not None


def serving(project: Project) -> dict[str, list[Backend]]:
    """Served model name → every deployment serving it (single-node deployments, and the
    head of each engine spanning nodes), in stack order."""
    found: dict[str, list[Backend]] = {}
    for dep in project.stack.deployments:
        model = project.profiles[dep.profile].model.served_name
        node = project.nodes[dep.node]
        found.setdefault(model, []).append(
            Backend(dep.node, dep.name, node.address, project.port_of(dep)))
    for multi in project.stack.multi_node:
        model = project.profiles[multi.profile].model.served_name
        head = project.nodes[multi.head]
        found.setdefault(model, []).append(
            Backend(multi.head, multi.name, head.address, multi.port or head.ports[0]))
    return found


def _pick(route: GatewayRoute, index: int, candidates: list[Backend]) -> list[Backend]:
    if not route.to:
        return candidates
    chosen: list[Backend] = []
    for target in route.to:
        hits = [b for b in candidates if target in (b.node, b.key)]
        if not hits:
            served = ", ".join(b.key for b in candidates)
            raise ConfigError(
                f"servefleet:gateway.routes[{index}].to: {target!r} serves no "
                f"{route.model!r} in this stack (deployments serving it: {served}); name "
                "one of them, or leave 'to' out to send to all")
        chosen += [b for b in hits if b not in chosen]
    return chosen


def resolve_routes(project: Project) -> list[ResolvedRoute]:
    """The routes in the order HAProxy tries them: the stack's, then one catch-all route per
    served model that has none of its own. A route naming a model or deployment the stack
    does not serve is a :class:`ConfigError` that says which ones it does."""
    models = serving(project)
    resolved: list[ResolvedRoute] = []
    for index, route in enumerate(project.stack.gateway.routes):
        if route.model not in models:
            raise ConfigError(
                f"servefleet:gateway.routes[{index}].model: no deployment of this stack serves "
                f"{route.model!r} (served: {', '.join(sorted(models)) or 'none'}); use a "
                "profile's model.servedName")
        backends = _pick(route, index, models[route.model])
        resolved.append(ResolvedRoute(f"r{index}", route, tuple(backends)))
    covered = {r.route.model for r in resolved if not r.lane}
    for model, backends in models.items():
        if model not in covered:
            resolved.append(ResolvedRoute(f"m{len(resolved)}", GatewayRoute(model=model),
                                          tuple(backends)))
    return resolved


def fallback_of(routes: list[ResolvedRoute], route: ResolvedRoute) -> ResolvedRoute | None:
    """Where a lane's requests go when none of its engines serves: the first route of the
    same model after it that matches every request."""
    later = routes[routes.index(route) + 1:]
    return next((r for r in later if r.route.model == route.route.model and not r.lane), None)


def servers_of(routes: list[ResolvedRoute], node: str,
               deployment: str) -> list[tuple[str, str]]:
    """``(route, server)`` of every route a deployment is an engine of, in route order."""
    return [(r.name, b.server) for r in routes for b in r.backends
            if b.node == node and b.deployment == deployment]

"""The gateway's release: ``haproxy.cfg``, the Lua script of the thinking default and the
compose file, rendered from the stack with the project's ``templates/gateway/`` (or the
shipped ones), and the release id that names them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from servefleet.core.errors import ConfigError
from servefleet.core.gateway.routes import GATEWAY_DEPLOYMENT, ResolvedRoute, resolve_routes
from servefleet.core.project import Project
from servefleet.core.render.templating import BUILTIN_TEMPLATES, TEMPLATES_DIR, folder_environment

TEMPLATE_FOLDER = "gateway"
FILES = {"haproxy.cfg": "haproxy.cfg.j2", "servefleet.lua": "servefleet.lua",
         "compose.yaml": "compose.yaml.j2"}
"""Rendered file → its template (the Lua script is copied as it is)."""
MIN_VERSION = "2.6"
"""json_query, Lua filters that may replace a body, and ``retry-on``: HAProxy 2.6 has them all
(Debian bookworm's 2.6.12 is what the tests run)."""
CHECK_INTERVAL = "2s"
"""How often HAProxy checks each engine's ``/health``: a re-admitted engine serves again
within this of its check passing."""


@dataclass(frozen=True)
class RenderedGateway:
    """The gateway's release folder, in memory."""

    node: str
    release_id: str
    """12 hex digits of sha256 over the files rendered with an empty id."""
    routes: tuple[ResolvedRoute, ...]
    files: dict[str, bytes] = field(repr=False)

    @property
    def deployment(self) -> str:
        """The gateway's deployment folder on its node."""
        return GATEWAY_DEPLOYMENT


def _quoted(value: str) -> str:
    """A HAProxy configuration word in single quotes (taken literally)."""
    if "'" in value or "\n" in value:
        raise ConfigError(f"gateway: cannot quote {value!r} for HAProxy")
    return f"'{value}'"


def _error(message: str, kind: str) -> str:
    return _quoted(json.dumps({"error": {"message": message, "type": kind}},
                              separators=(",", ":")))


def _describe(route: ResolvedRoute) -> str:
    r = route.route
    when = [f"header {r.header}" if r.header else "",
            f"body over {r.prompt_over_bytes} bytes" if r.prompt_over_bytes else ""]
    thinking = "" if r.thinking is None else f"; thinking {'on' if r.thinking else 'off'}"
    lane = " and ".join(w for w in when if w) or "every request"
    return (f"{r.model}, {lane} -> {', '.join(b.key for b in route.backends)}{thinking}")


def templates_folder(project_root: Path) -> Path:
    """The project's ``templates/gateway`` when it has one, else the shipped one."""
    own = project_root / TEMPLATES_DIR / TEMPLATE_FOLDER
    return own if (own / FILES["haproxy.cfg"]).is_file() else BUILTIN_TEMPLATES / TEMPLATE_FOLDER


def render_gateway(project: Project) -> RenderedGateway:
    """The gateway's files for this stack; :class:`ConfigError` when it has no gateway or a
    route names what the stack does not serve."""
    config = project.stack.gateway
    if config.node is None:
        raise ConfigError("servefleet:gateway.node: this stack has no gateway; name the node "
                          "it runs on")
    if config.node not in project.nodes:
        raise ConfigError(f"servefleet:gateway.node: {config.node!r} is not a node of this "
                          f"project (nodes: {', '.join(sorted(project.nodes))})")
    taken = {project.port_of(d): d.key for d in project.stack.for_node(config.node)}
    for what, port in (("port", config.port), ("adminPort", config.admin_port)):
        if port in taken:
            raise ConfigError(f"servefleet:gateway.{what}: {port} is the port of {taken[port]} "
                              f"on the gateway's node; give the gateway another port")
    routes = resolve_routes(project)
    models = sorted({r.route.model for r in routes})
    folder = templates_folder(project.root)
    env = folder_environment(folder)
    variables = {
        "stack": project.stack.stack, "min_version": MIN_VERSION, "port": config.port,
        "admin_port": config.admin_port, "max_body_bytes": config.max_body_bytes,
        "retries": config.retries, "check_interval": CHECK_INTERVAL,
        "image": config.image, "project": f"servefleet-{GATEWAY_DEPLOYMENT}",
        "models_json": _quoted(json.dumps(
            {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "servefleet"}
                                        for m in models]}, separators=(",", ":"))),
        "unknown_model_json": _error("no engine of this fleet serves that model (GET "
                                     "/v1/models lists them)", "not_found"),
        "too_big_json": _error(f"the request body is larger than the gateway reads whole "
                               f"(servefleet:gateway.maxBodyBytes {config.max_body_bytes} "
                               "less headers and HAProxy reserve); raise it in the stack",
                               "request_too_large"),
        "errors": {
            502: _error("the answer of the engine was cut or invalid", "bad_gateway"),
            503: _error("no engine of this route serves now (drained for a rollout, or "
                        "down); retry later", "unavailable"),
            504: _error("the engine did not answer in time", "timeout")},
        "no_model_json": _error("the request names no model (give one of GET /v1/models)",
                                "invalid_request_error"),
        "routes": [{"name": r.name, "model": r.route.model, "describe": _describe(r),
                    "header_name": r.route.header_name, "header_value": r.route.header_value,
                    "prompt_over_bytes": r.route.prompt_over_bytes, "lane": r.lane,
                    "thinking": r.route.thinking, "backends": r.backends} for r in routes],
    }

    def render(release_id: str) -> dict[str, bytes]:
        out = {}
        for name, template in FILES.items():
            if not template.endswith(".j2"):
                out[name] = (folder / template).read_bytes()
                continue
            text = env.get_template(template).render(**variables, release_id=release_id)
            out[name] = text.encode()
        return out

    draft = render("")
    digest = hashlib.sha256()
    for name in sorted(draft):
        digest.update(name.encode() + b"\0" + draft[name] + b"\0")
    release_id = digest.hexdigest()[:12]
    return RenderedGateway(config.node, release_id, tuple(routes), render(release_id))

"""The gateway's view of its engines, read from HAProxy's runtime API: ``show servers
state`` (what servefleet set: ready, drain, maint) and ``show stat`` (what the health check
sees, and the requests in flight)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from servefleet.core.gateway.routes import ResolvedRoute, servers_of
from servefleet.core.health_table import CheckRow, Verdict

ADMIN_MAINT = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
"""``srv_admin_state`` bits of maintenance (forced, inherited, configured, resolution,
hostname)."""
ADMIN_DRAIN = 0x08 | 0x10
"""``srv_admin_state`` bits of drain (forced, inherited)."""


@dataclass(frozen=True)
class ServerState:
    """One engine (server) in one route (backend)."""

    backend: str
    server: str
    admin: str
    """``ready``, ``drain`` or ``maint``: what was set through the runtime API."""
    status: str
    """``show stat``'s status (``UP``, ``DOWN``, ``DRAIN``, ``MAINT``, ``UP 1/2``…)."""
    in_flight: int
    """Requests on this server now (``scur``)."""

    @property
    def up(self) -> bool:
        """The health check passes (whatever the admin state)."""
        return self.status.startswith(("UP", "DRAIN", "NOLB"))

    @property
    def rotation(self) -> str:
        """``serving`` (gets new requests), ``draining`` (none new, some still in
        flight) or ``out``."""
        if self.admin == "ready" and self.status.startswith("UP"):
            return "serving"
        if self.admin == "drain" and self.in_flight:
            return "draining"
        return "out"


def _admin(bits: int) -> str:
    if bits & ADMIN_MAINT:
        return "maint"
    if bits & ADMIN_DRAIN:
        return "drain"
    return "ready"


def parse_servers_state(text: str) -> dict[tuple[str, str], str]:
    """``show servers state`` → (backend, server) → admin state."""
    found: dict[tuple[str, str], str] = {}
    header: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("# "):
            header = line[2:].split()
            continue
        fields = line.split()
        if header is None or len(fields) < len(header) or not fields[0].isdigit():
            continue
        row = dict(zip(header, fields, strict=False))
        try:
            bits = int(row["srv_admin_state"])
        except (KeyError, ValueError):
            continue
        found[(row["be_name"], row["srv_name"])] = _admin(bits)
    return found


def parse_stat(text: str) -> dict[tuple[str, str], tuple[str, int]]:
    """``show stat`` (CSV) → (backend, server) → (status, requests in flight), servers
    only (not the frontend and backend totals)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        return {}
    reader = csv.DictReader(io.StringIO("\n".join([lines[0][2:], *lines[1:]])))
    found: dict[tuple[str, str], tuple[str, int]] = {}
    for row in reader:
        name = row.get("svname") or ""
        if name in ("FRONTEND", "BACKEND", ""):
            continue
        try:
            in_flight = int(row.get("scur") or 0)
        except ValueError:
            in_flight = 0
        found[(row.get("pxname") or "", name)] = (row.get("status") or "", in_flight)
    return found


def server_states(servers_state: str, stat: str) -> list[ServerState]:
    """Both readings joined, in ``show stat`` order."""
    admin = parse_servers_state(servers_state)
    return [ServerState(backend, server, admin.get((backend, server), "ready"), status, scur)
            for (backend, server), (status, scur) in parse_stat(stat).items()]


def rotation_row(node: str, deployment: str, routes: list[ResolvedRoute],
                 servers: list[ServerState] | None, problem: str = "") -> CheckRow | None:
    """The ``health`` row of one deployment in the gateway: ``pass`` when it serves in
    every route it belongs to, ``warn`` when drained, down or the gateway cannot be read,
    ``fail`` when the running gateway does not know it (deploy the gateway). ``None`` when
    no route sends to it."""
    pairs = servers_of(routes, node, deployment)
    if not pairs:
        return None
    mine = [route for route, _ in pairs]
    expected = f"serving in {', '.join(mine)}"
    if servers is None:
        return CheckRow("gateway", expected, f"not read: {problem}", "warn")
    seen = {s.backend: s for s in servers if (s.backend, s.server) in pairs}
    missing = [name for name in mine if name not in seen]
    if missing:
        return CheckRow("gateway", expected, f"not in the running gateway's {', '.join(missing)} "
                        "(servefleet gateway deploy)", "fail")
    states = [seen[name] for name in mine]
    observed = ", ".join(f"{s.backend} {s.rotation} ({s.status})" for s in states)
    verdict: Verdict = "pass" if all(s.rotation == "serving" for s in states) else "warn"
    return CheckRow("gateway", expected, observed, verdict)

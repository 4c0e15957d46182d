"""A bounded load through the gateway (or straight at one engine): a few workers send small
chat requests one after another until told to stop (or a request cap), and every request
ends in exactly one recorded :class:`Outcome`: its class, its latency and the engine that
answered it. What the gateway's tests and its benchmark measure a rollout against: a failed
request is any answer but 200 with a completion, or no answer.

Nothing is lost on the way: a worker counts a request before it sends it, records an outcome
for whatever happens to it (an exception of any kind included), and :meth:`GatewayLoad.stop`
raises :class:`LoadBroken` when a worker died, did not finish, or a sent request has no
outcome. A load that stopped early therefore cannot pass for a load that saw no failure.

Only loopback or the simulated nodes' addresses are meant to be loaded (the caller names
the URL); the count and the time are bounded.
"""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import statistics
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servefleet.adapters.gateway.follow import GatewayEvent

MAX_REQUESTS = 20_000
"""A hard cap whatever the caller asks."""

ENGINE_HEADER = "x-servefleet-engine"
ROUTE_HEADER = "x-servefleet-route"
"""The gateway's route (HAProxy backend) a request took: an engine in two routes is
drained from one, then the other, and only the first route's requests must avoid it then."""
"""The response header the gateway sets to the server (``node.deployment``) that answered."""

OutcomeClass = Literal["ok", "http_error", "refused", "reset", "cut_body", "timeout", "other"]
OUTCOME_CLASSES: tuple[OutcomeClass, ...] = (
    "ok", "http_error", "refused", "reset", "cut_body", "timeout", "other")
"""Every class a request can end in:

- ``ok``: HTTP 200 with a JSON body that has ``choices``;
- ``http_error``: any other status (the gateway's 502/503/504 included);
- ``refused``: the connection was refused (nothing listening);
- ``reset``: the connection was reset, or closed before a status line arrived;
- ``cut_body``: a status line arrived but the body was cut short or is not JSON;
- ``timeout``: no answer within the request timeout;
- ``other``: anything else (a 200 without ``choices``, junk for a status line, …).
"""


class LoadBroken(RuntimeError):
    """The load did not run as a whole: a worker died, hung, or lost a request."""


@dataclass(frozen=True)
class Outcome:
    """One request."""

    started: float
    """``time.monotonic()`` when it was sent."""
    finished: float
    """``time.monotonic()`` when its outcome was known."""
    kind: OutcomeClass
    engine: str | None
    """The engine that answered: the gateway's :data:`ENGINE_HEADER`, or the load's own
    ``engine`` when it targets one engine; ``None`` when nothing answered."""
    detail: str
    """What happened, in a few words (the status and the start of the body, or the error)."""
    route: str | None = None
    """The gateway's route that answered (:data:`ROUTE_HEADER`); ``None`` without one."""

    @property
    def ok(self) -> bool:
        """Answered 200 with a completion."""
        return self.kind == "ok"

    @property
    def seconds(self) -> float:
        """Latency, send to outcome."""
        return self.finished - self.started


def classify(error: BaseException) -> OutcomeClass:
    """The class of a request that raised ``error`` (see :data:`OUTCOME_CLASSES`)."""
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if isinstance(error, (TimeoutError, socket.timeout)):
        return "timeout"
    # RemoteDisconnected is both a ConnectionResetError and a BadStatusLine: the peer
    # closed before any status line, which is a reset for the client.
    if isinstance(error, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return "reset"
    if isinstance(error, (http.client.IncompleteRead, ValueError)):
        return "cut_body"
    return "other"


@dataclass
class GatewayLoad:
    """Workers sending ``body`` to ``url`` (see the module docstring)."""

    url: str
    body: dict[str, Any]
    workers: int = 2
    timeout: float = 120
    headers: dict[str, str] = field(default_factory=dict)
    engine: str | None = None
    """The engine every answer comes from when ``url`` is one engine, not the gateway."""
    max_requests: int = MAX_REQUESTS
    """Stop after this many requests (never more than :data:`MAX_REQUESTS`)."""
    pause: float = 0.0
    """Seconds each worker waits between two requests: a paced load leaves the CPU to the
    engines booting beside it (a two-core test bed), where a full-speed one starves them."""
    outcomes: list[Outcome] = field(default_factory=list)
    sent: int = 0
    """Requests counted before they were sent: at stop, every one has an outcome."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _died: list[str] = field(default_factory=list)

    def _one(self) -> Outcome:
        """Send one request and classify what came back; never raises."""
        parts = urllib.parse.urlsplit(self.url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        data = json.dumps(self.body).encode()
        started = time.monotonic()
        engine: str | None = None
        route: str | None = None
        connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80,
                                                timeout=self.timeout)
        try:
            connection.request("POST", path, body=data, headers={
                "content-type": "application/json", "connection": "close", **self.headers})
            response = connection.getresponse()
            engine = response.getheader(ENGINE_HEADER) or self.engine
            route = response.getheader(ROUTE_HEADER)
            raw = response.read()
            kind, detail = _judge(response.status, raw)
        except BaseException as error:  # every outcome is recorded
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            kind, detail = classify(error), f"{type(error).__name__}: {error}"[:200]
        finally:
            connection.close()
        return Outcome(started, time.monotonic(), kind, engine if kind != "refused" else None,
                       detail, route)

    def _run(self) -> None:
        me = threading.current_thread()
        try:
            while not self._stop.is_set():
                with self._lock:
                    if self.sent >= min(self.max_requests, MAX_REQUESTS):
                        self._stop.set()
                        break
                    self.sent += 1
                outcome = self._one()
                with self._lock:
                    self.outcomes.append(outcome)
                if self.pause:
                    self._stop.wait(self.pause)
        except BaseException as error:  # said at stop, never lost
            with self._lock:
                self._died.append(f"{me.name}: {type(error).__name__}: {error}")

    def start(self) -> GatewayLoad:
        """Start the workers."""
        for index in range(self.workers):
            thread = threading.Thread(target=self._run, daemon=True, name=f"load-{index}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> list[Outcome]:
        """Stop after the requests in flight; every outcome. Raises :class:`LoadBroken`
        when a worker died or hung, or a request sent has no outcome."""
        self._stop.set()
        deadline = time.monotonic() + self.timeout + 5
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.check()
        return list(self.outcomes)

    def wait(self, timeout: float) -> list[Outcome]:
        """Wait for a load bounded by ``max_requests`` to send them all, then stop it."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self.stop()

    def check(self) -> None:
        """Raise :class:`LoadBroken` unless every worker ran to its end and every request
        sent has an outcome."""
        with self._lock:
            hung = [t.name for t in self._threads if t.is_alive()]
            problems = list(self._died)
            if hung:
                problems.append(f"still running: {', '.join(hung)}")
            if self.sent != len(self.outcomes):
                problems.append(f"{self.sent} requests sent, {len(self.outcomes)} recorded")
        if problems:
            raise LoadBroken("the load did not run to its end: " + "; ".join(problems))

    def between(self, start: float, end: float) -> list[Outcome]:
        """Outcomes of requests sent in ``[start, end)`` (monotonic seconds)."""
        with self._lock:
            return [o for o in self.outcomes if start <= o.started < end]

    def within(self, start: float, end: float) -> list[Outcome]:
        """Outcomes of requests sent at or after ``start`` and answered by ``end``: those
        the gateway surely routed inside the window."""
        with self._lock:
            return [o for o in self.outcomes if start <= o.started and o.finished <= end]


def _judge(status: int, raw: bytes) -> tuple[OutcomeClass, str]:
    if status != 200:
        return "http_error", f"HTTP {status}: {raw[:200]!r}"
    try:
        answer = json.loads(raw)
    except ValueError:
        return "cut_body", f"HTTP 200, body not JSON ({len(raw)} bytes): {raw[:80]!r}"
    if isinstance(answer, dict) and answer.get("choices"):
        return "ok", "HTTP 200"
    return "other", f"HTTP 200 without choices: {raw[:200]!r}"


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0–100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, int(q) - 1))]


def by_class(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """Count per outcome class, every class present (0 where none)."""
    counts = Counter(o.kind for o in outcomes)
    return {kind: counts.get(kind, 0) for kind in OUTCOME_CLASSES}


def by_engine(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """Answered requests per engine (``-`` where no engine answered)."""
    return dict(sorted(Counter(o.engine or "-" for o in outcomes).items()))


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Count, failures by class (with the first few reasons), the engines that answered,
    p50 and p99 latency in ms of the successful requests."""
    latencies = [o.seconds * 1000 for o in outcomes if o.ok]
    failed = [o for o in outcomes if not o.ok]
    classes = by_class(outcomes)
    return {"requests": len(outcomes), "failed": len(failed),
            "by_class": {k: n for k, n in classes.items() if k != "ok"},
            "engines": by_engine(outcomes),
            "failures": sorted({o.detail for o in failed})[:5],
            "p50_ms": round(percentile(latencies, 50), 1),
            "p99_ms": round(percentile(latencies, 99), 1)}


@dataclass(frozen=True)
class DrainWindow:
    """From a server's drain in one route to its re-admission there: no request sent
    through that route in it may reach it."""

    server: str
    start: float
    end: float
    """``math.inf`` when it was not re-admitted while the load ran."""
    backend: str | None = None
    """The route (HAProxy backend) it was drained from."""

    def leaked(self, outcomes: Iterable[Outcome]) -> list[Outcome]:
        """The requests sent through this route after the drain and answered before the
        re-admission that reached the drained server (a request without a route, from a
        gateway that does not name it, counts whatever route it took)."""
        return [o for o in outcomes if o.engine == self.server and self.start <= o.started
                and o.finished <= self.end and (o.route is None or self.backend is None
                                                or o.route == self.backend)]


def drain_windows(events: Sequence[GatewayEvent]) -> list[DrainWindow]:
    """Each drain paired with the next re-admission of the same server (a server in several
    routes gives one window per route)."""
    windows: list[DrainWindow] = []
    open_at: dict[tuple[str, str], float] = {}
    for event in events:
        key = (event.backend, event.server)
        if event.what == "drained":
            open_at.setdefault(key, event.at)
        elif key in open_at:
            windows.append(DrainWindow(event.server, open_at.pop(key), event.at, event.backend))
    windows += [DrainWindow(server, start, float("inf"), backend)
                for (backend, server), start in open_at.items()]
    return sorted(windows, key=lambda w: (w.start, w.server))


def phases(events: Sequence[GatewayEvent], start: float, end: float
           ) -> list[tuple[str, float, float]]:
    """``[start, end)`` cut at every drain and re-admission: ``(name, from, to)`` with names
    saying which servers were drained, so that every request sent in it lies in exactly one
    phase."""
    cuts = sorted({start, end, *(e.at for e in events if start < e.at < end)})
    out = []
    for a, b in itertools.pairwise(cuts):
        drained = sorted({w.server for w in drain_windows(events) if w.start <= a < w.end})
        out.append((f"{', '.join(drained)} drained" if drained else "all in rotation", a, b))
    return out


def phase_table(load: GatewayLoad, parts: list[tuple[str, float, float]]) -> list[str]:
    """One line per phase: requests, failures by class, engines that answered, latency."""
    lines = []
    for name, a, b in parts:
        seen = summary(load.between(a, b))
        failed = ", ".join(f"{k} {n}" for k, n in seen["by_class"].items() if n) or "none"
        engines = ", ".join(f"{k} {n}" for k, n in seen["engines"].items())
        lines.append(f"{name:<28} {b - a:6.1f} s {seen['requests']:>5} requests; failed: "
                     f"{failed}; answered by: {engines or '-'}; p50 {seen['p50_ms']} ms, "
                     f"p99 {seen['p99_ms']} ms")
    return lines

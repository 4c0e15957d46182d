"""A bounded load through the gateway: a few workers send small chat requests one after
another until told to stop (or a request cap), and every request's outcome and latency is
kept. What the gateway's tests and its benchmark measure a rollout against: a failed
request is any answer but 200 with a completion, or no answer.

Only loopback or the simulated nodes' addresses are meant to be loaded (the caller names
the URL); the count and the time are bounded.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

MAX_REQUESTS = 20_000
"""A hard cap whatever the caller asks."""


@dataclass(frozen=True)
class Outcome:
    """One request."""

    started: float
    """``time.monotonic()`` when it was sent."""
    seconds: float
    ok: bool
    detail: str
    """The engine that answered (``x-servefleet-engine``… when known) or the error."""


@dataclass
class GatewayLoad:
    """Workers sending ``body`` to ``url`` (see the module docstring)."""

    url: str
    body: dict[str, Any]
    workers: int = 2
    timeout: float = 120
    headers: dict[str, str] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _one(self) -> Outcome:
        data = json.dumps(self.body).encode()
        request = urllib.request.Request(self.url, data=data, method="POST", headers={
            "content-type": "application/json", **self.headers})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        started = time.monotonic()
        try:
            with opener.open(request, timeout=self.timeout) as response:
                answer = json.loads(response.read())
                ok = response.status == 200 and bool(answer.get("choices"))
                detail = "ok" if ok else f"HTTP {response.status} without choices"
        except urllib.error.HTTPError as error:
            ok, detail = False, f"HTTP {error.code}: {error.read()[:200]!r}"
        except (urllib.error.URLError, OSError, ValueError) as error:
            ok, detail = False, f"{type(error).__name__}: {error}"
        return Outcome(started, time.monotonic() - started, ok, detail)

    def _run(self) -> None:
        while not self._stop.is_set():
            outcome = self._one()
            with self._lock:
                self.outcomes.append(outcome)
                if len(self.outcomes) >= MAX_REQUESTS:
                    self._stop.set()

    def start(self) -> GatewayLoad:
        """Start the workers."""
        for _ in range(self.workers):
            thread = threading.Thread(target=self._run, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> list[Outcome]:
        """Stop after the requests in flight; every outcome so far."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout + 5)
        return list(self.outcomes)

    def between(self, start: float, end: float) -> list[Outcome]:
        """Outcomes of requests sent in ``[start, end)`` (monotonic seconds)."""
        with self._lock:
            return [o for o in self.outcomes if start <= o.started < end]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0–100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, int(q) - 1))]


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Count, failures (with the first few reasons), p50 and p99 latency in ms."""
    latencies = [o.seconds * 1000 for o in outcomes if o.ok]
    failed = [o for o in outcomes if not o.ok]
    return {"requests": len(outcomes), "failed": len(failed),
            "failures": sorted({o.detail for o in failed})[:5],
            "p50_ms": round(percentile(latencies, 50), 1),
            "p99_ms": round(percentile(latencies, 99), 1)}

"""One sample of one deployment, as the watcher's node read reports it.

The node read (:mod:`servefleet.adapters.watch.read`) prints one JSON object per node; this
module turns it into :class:`Sample` objects, one per deployment, parsing the engine's
``/metrics`` page with :mod:`servefleet.core.metrics`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from servefleet.core.engines import ENGINES
from servefleet.core.engines.vllm import VLLM
from servefleet.core.metrics import MetricsError

CanaryResult = Literal["ok", "timeout", "error", "skipped"]
"""``ok``: a token came back; ``timeout``: no answer in time; ``error``: an HTTP error or a
refused connection; ``skipped``: not sent (off, or ``/health`` failing)."""


@dataclass(frozen=True)
class GpuSample:
    """One GPU's readings (``nvidia-smi --query-gpu``); ``None``: not reported."""

    index: int
    power_watts: float | None = None
    utilization_percent: float | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None


@dataclass(frozen=True)
class Sample:
    """What one interval saw of one deployment."""

    at: float
    """Seconds on the watcher's monotonic clock."""
    reachable: bool = True
    """The node answered the read; when False every other field is empty."""
    container_status: str | None = None
    """Docker's ``State.Status`` (``running``, ``restarting``, ``exited``…); ``None``: no
    container."""
    restart_count: int | None = None
    """Docker's ``RestartCount`` of the container."""
    started_at: str | None = None
    """Docker's ``State.StartedAt``: a new value means a new engine process."""
    health_status: int | None = None
    """HTTP status of ``/health``; ``None``: no answer (refused, timed out)."""
    generation_tokens: int | None = None
    prompt_tokens: int | None = None
    requests_running: int | None = None
    requests_waiting: int | None = None
    kv_usage: float | None = None
    canary: CanaryResult = "skipped"
    canary_seconds: float | None = None
    gpus: tuple[GpuSample, ...] = ()
    mem_available_bytes: int | None = None
    """The node's MemAvailable (the pool of a unified-memory GPU)."""
    errors: tuple[str, ...] = field(default=())
    """What the read could not get, one short line each."""

    @property
    def health_ok(self) -> bool:
        """``/health`` answered 200."""
        return self.health_status == 200

    @property
    def held(self) -> int | None:
        """Requests running plus waiting; ``None`` when the engine did not say."""
        if self.requests_running is None and self.requests_waiting is None:
            return None
        return (self.requests_running or 0) + (self.requests_waiting or 0)

    def gpus_idle(self, threshold_watts: float) -> bool | None:
        """True when every GPU reported its power and all draw at most ``threshold_watts``;
        None when any did not report it (the simulated fleet, some drivers)."""
        powers = [g.power_watts for g in self.gpus]
        if not powers or any(p is None for p in powers):
            return None
        return all(p is not None and p <= threshold_watts for p in powers)


def unreachable(at: float, why: str) -> Sample:
    """The sample of a node that did not answer."""
    return Sample(at=at, reachable=False, errors=(why,))


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def parse_gpu_csv(text: str) -> tuple[GpuSample, ...]:
    """``nvidia-smi --query-gpu=index,power.draw,utilization.gpu,memory.used,memory.free
    --format=csv,noheader,nounits`` (or its first four columns without ``power.draw`` when
    the driver refused that field): ``[N/A]`` is None."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if not cells or not cells[0].isdigit():
            continue
        if len(cells) == 4:
            cells.insert(1, "")

        def number(raw: str) -> float | None:
            try:
                return float(raw)
            except ValueError:
                return None

        values = [number(c) for c in cells[1:5]] + [None] * 4
        gpus.append(GpuSample(
            index=int(cells[0]), power_watts=values[0], utilization_percent=values[1],
            memory_used_mib=None if values[2] is None else int(values[2]),
            memory_free_mib=None if values[3] is None else int(values[3])))
    return tuple(gpus)


def _metrics(engine: str, text: str | None, errors: list[str]) -> dict[str, Any]:
    if not text:
        return {}
    try:
        # vLLM's page for an engine the registry does not know, as before it had one.
        return ENGINES.get(engine, VLLM).metric_figures(text)
    except MetricsError as error:
        errors.append(f"/metrics: {error}")
        return {}


def parse_node_read(text: str, at: float, engines: dict[str, str]) -> dict[str, Sample]:
    """The node read's JSON object as one :class:`Sample` per deployment; ``engines`` maps
    each deployment to its engine (``vllm`` or ``llama.cpp``). ValueError when the output
    is not the read's JSON."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"watch read: not JSON ({error.msg} at {error.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("deployments"), dict):
        raise ValueError("watch read: no 'deployments' object")
    gpus = parse_gpu_csv(str(data.get("gpu_csv") or ""))
    mem = _int(data.get("mem_available_bytes"))
    node_errors = [str(e) for e in data.get("errors") or []]
    samples = {}
    for name, raw in data["deployments"].items():
        if not isinstance(raw, dict):
            continue
        errors = list(node_errors) + [str(e) for e in raw.get("errors") or []]
        figures = _metrics(engines.get(name, "vllm"), raw.get("metrics"), errors)
        canary: CanaryResult = "skipped"
        if raw.get("canary") in ("ok", "timeout", "error"):
            canary = raw["canary"]
        samples[name] = Sample(
            at=at, container_status=raw.get("status") or None,
            restart_count=_int(raw.get("restart_count")),
            started_at=raw.get("started_at") or None,
            health_status=_int(raw.get("health")),
            canary=canary, canary_seconds=_float(raw.get("canary_seconds")),
            gpus=gpus, mem_available_bytes=mem, errors=tuple(errors), **figures)
    return samples

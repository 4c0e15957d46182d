"""The service-level objective of a measured tune, and a candidate's score under it.

``ttft_p99<=2s,tpot_mean<=80ms``: each bound names a latency (``ttft``, ``tpot``, ``itl``,
``e2el``), a statistic (``mean``, ``median`` or ``p50``, ``p99``) and a limit in ``s`` or
``ms``; the figure is vLLM's own (``p99_ttft_ms``…, as ``vllm bench serve`` reports it). A
candidate meets the SLO when the mean over its seeds is within every bound and no request
failed; its score is then its output throughput, else it has none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import mean

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = {"mean": "mean", "median": "median", "p50": "median", "p99": "p99"}
_BOUND = re.compile(r"^\s*(?P<metric>[a-z0-9]+)_(?P<stat>[a-z0-9]+)\s*<=\s*"
                    r"(?P<value>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>ms|s)\s*$")
THROUGHPUT = "output_throughput"
"""What a candidate that meets the SLO is scored by (tokens generated per second)."""


@dataclass(frozen=True)
class Bound:
    """One latency bound: vLLM's figure ``key`` at most ``limit_ms``."""

    text: str
    key: str
    limit_ms: float


@dataclass(frozen=True)
class Slo:
    """Every bound of an objective (none: any candidate that answers meets it)."""

    bounds: tuple[Bound, ...] = ()

    def misses(self, figures: Mapping[str, float]) -> list[str]:
        """The bounds ``figures`` miss, each as ``ttft_p99 3.1 s > 2 s``; a bound whose
        figure was not measured is missed too (it cannot be shown to hold)."""
        missed = []
        for bound in self.bounds:
            value = figures.get(bound.key)
            if value is None:
                missed.append(f"{bound.text}: not measured ({bound.key})")
            elif value > bound.limit_ms:
                missed.append(f"{bound.text.split('<=')[0].strip()} {value:.0f} ms > "
                              f"{bound.limit_ms:g} ms")
        return missed

    def __str__(self) -> str:
        return ",".join(b.text for b in self.bounds) or "none"


def parse_slo(text: str | None) -> Slo:
    """``ttft_p99<=2s,tpot_mean<=80ms`` as an :class:`Slo`; ``ValueError`` naming the bound
    that does not read, with the form that does."""
    if not text or not text.strip():
        return Slo()
    bounds = []
    for part in text.split(","):
        found = _BOUND.match(part)
        if found is None or found["metric"] not in METRICS or found["stat"] not in STATS:
            raise ValueError(
                f"{part.strip()!r}: a bound reads METRIC_STAT<=LIMIT with METRIC one of "
                f"{', '.join(METRICS)}, STAT one of {', '.join(STATS)} and LIMIT in s or ms "
                "(e.g. ttft_p99<=2s,tpot_mean<=80ms)")
        limit = float(found["value"]) * (1000.0 if found["unit"] == "s" else 1.0)
        key = f"{STATS[found['stat']]}_{found['metric']}_ms"
        bounds.append(Bound(part.strip(), key, limit))
    return Slo(tuple(bounds))


def seed_means(seeds: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each figure's mean over the seeds that report it."""
    keys = {k for figures in seeds for k, v in figures.items() if isinstance(v, int | float)}
    return {k: mean(float(f[k]) for f in seeds if isinstance(f.get(k), int | float))
            for k in sorted(keys)}


def spread(seeds: Sequence[Mapping[str, float]], key: str = THROUGHPUT) -> float:
    """(max - min) / mean of ``key`` over the seeds; 0 with one seed."""
    values = [float(f[key]) for f in seeds if isinstance(f.get(key), int | float)]
    if len(values) < 2 or not mean(values):
        return 0.0
    return (max(values) - min(values)) / mean(values)

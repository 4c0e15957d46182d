"""A release's benchmark, per scenario: the mean of each figure over the seeds and how
far the seeds spread (the first part of the noise band)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import mean

from servefleet.core.bench.record import FIGURES, BenchRecord


@dataclass(frozen=True)
class ScenarioSummary:
    """One scenario of one bench run."""

    scenario: str
    shape: str
    identity: str
    release: str
    seeds: tuple[int, ...]
    means: dict[str, float] = field(default_factory=dict)
    """Each figure's mean over the seeds."""
    spread: dict[str, float] = field(default_factory=dict)
    """Each figure's seed spread, relative to its mean: (max - min) / mean; 0 with one
    seed."""
    completed: int = 0
    failed: int = 0
    errors: tuple[str, ...] = ()
    kv_peak: float | None = None
    """The highest KV usage (0-1) the engine reported during any seed's run."""
    acceptance_rate: float | None = None
    """Speculative decoding: accepted / drafted tokens (0-1), mean over the seeds."""
    acceptance_length: float | None = None
    """Speculative decoding: 1 + accepted tokens per draft (the bonus token included)."""


def _relative_spread(values: Sequence[float]) -> float:
    middle = mean(values)
    return (max(values) - min(values)) / abs(middle) if len(values) > 1 and middle else 0.0


def summarise_one(records: Sequence[BenchRecord]) -> ScenarioSummary:
    """The summary of one scenario's records (one per seed)."""
    first = records[0]
    means: dict[str, float] = {}
    spread: dict[str, float] = {}
    for figure in FIGURES:
        values = [v for r in records if (v := r.value(figure.key)) is not None]
        if values:
            means[figure.key] = mean(values)
            spread[figure.key] = _relative_spread(values)
    peaks = [v for r in records if (v := r.value("kv_peak")) is not None]
    # `vllm bench serve` reports the acceptance rate in percent (accepted / drafted * 100).
    rates = [v / 100 for r in records
             if (v := r.value("spec_decode_acceptance_rate")) is not None]
    lengths = [v for r in records
               if (v := r.value("spec_decode_acceptance_length")) is not None]
    errors = tuple(str(e) for r in records for e in r.figures.get("errors") or [])
    return ScenarioSummary(
        scenario=first.scenario, shape=first.shape, identity=first.scenario_identity,
        release=first.release, seeds=tuple(r.seed for r in records),
        means=means, spread=spread,
        completed=sum(int(r.value("completed") or 0) for r in records),
        failed=sum(int(r.value("failed") or 0) for r in records), errors=errors[:3],
        kv_peak=max(peaks) if peaks else None,
        acceptance_rate=mean(rates) if rates else None,
        acceptance_length=mean(lengths) if lengths else None)


def summarise(records: Iterable[BenchRecord]) -> list[ScenarioSummary]:
    """Per scenario (first seen first), the summary of its newest run's records."""
    newest: dict[tuple[str, str], str] = {}
    ordered: list[BenchRecord] = list(records)
    for record in ordered:
        newest[(record.scenario, record.scenario_identity)] = record.run_id
    groups: dict[tuple[str, str], list[BenchRecord]] = {}
    for record in ordered:
        key = (record.scenario, record.scenario_identity)
        if record.run_id == newest[key]:
            groups.setdefault(key, []).append(record)
    return [summarise_one(group) for group in groups.values()]

"""Benchmark results as rows of text: the per-scenario table, the throughput chart and the
A/B decision table (the CLI colours and prints them)."""

from __future__ import annotations

from collections.abc import Sequence

from servefleet.core.bench.compare import Change
from servefleet.core.bench.record import BY_KEY, BenchRecord
from servefleet.core.bench.summary import ScenarioSummary, summarise

TABLE_FIGURES = tuple(BY_KEY[k] for k in ("output_throughput", "mean_ttft_ms",
                                           "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms"))
"""The figures the summary table shows (``--json`` has them all)."""
SUMMARY_HEADER = ("scenario", "load", *(f.label for f in TABLE_FIGURES), "failed",
                  "KV peak", "accept")


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}" if abs(value) < 1 \
        else f"{value:.1f}"
    return text + (f" {unit}" if unit else "")


def summary_row(summary: ScenarioSummary) -> tuple[str, ...]:
    """One scenario's row under :data:`SUMMARY_HEADER`; a figure whose seeds spread more
    than 10% carries ``±N%`` (half the spread)."""
    cells = []
    for figure in TABLE_FIGURES:
        value = summary.means.get(figure.key)
        spread = summary.spread.get(figure.key, 0.0)
        cells.append(_number(value) + (f"±{spread / 2:.0%}" if spread > 0.10 else ""))
    accept = "-" if summary.acceptance_rate is None else \
        f"{summary.acceptance_rate:.0%}/{summary.acceptance_length or 0:.2f}"
    return (summary.scenario, summary.shape, *cells,
            str(summary.failed), "-" if summary.kv_peak is None else f"{summary.kv_peak:.1%}",
            accept)


def chart(summaries: Sequence[ScenarioSummary], width: int = 40,
          key: str = "output_throughput") -> list[tuple[str, str, str]]:
    """Per scenario: its name, a bar of ``key`` scaled to the largest, and the value."""
    values = [s.means.get(key) for s in summaries]
    top = max((v for v in values if v), default=0.0)
    return [(s.scenario, "█" * max(1, round(width * v / top)) if v and top else "",
             _number(v)) for s, v in zip(summaries, values, strict=True)]


CHANGE_HEADER = ("scenario", "figure", "A", "B", "A'", "change", "band", "verdict")


def change_row(change: Change) -> tuple[str, ...]:
    """One figure of one scenario under :data:`CHANGE_HEADER`."""
    unit = change.figure.unit
    return (change.scenario, change.figure.label, _number(change.a, unit),
            _number(change.b, unit), _number(change.control, unit),
            f"{change.change:+.1%}", f"±{change.band:.1%}", change.verdict)


def by_release(records: Sequence[BenchRecord]) -> list[tuple[str, str]]:
    """Per release that was benched (first benched first): its newest figures as one
    phrase, ``A 150 · C 699`` (output tok/s per scenario)."""
    releases: dict[str, list[BenchRecord]] = {}
    for record in records:
        releases.setdefault(record.release, []).append(record)
    return [(release, " · ".join(f"{s.scenario} {_number(s.means.get('output_throughput'))}"
                                 for s in summarise(mine)))
            for release, mine in releases.items()]

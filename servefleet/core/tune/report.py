"""A measured tune's answer: the table of every candidate and the verdict against the
control (a winner only outside the noise band)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servefleet.core.tune.search import Trial, band, better
from servefleet.core.tune.slo import THROUGHPUT


@dataclass(frozen=True)
class Verdict:
    """The best candidate, when one beats the control outside the noise band."""

    winner: Trial | None
    best: Trial | None
    """The candidate with the highest score (a winner or not)."""
    reason: str


def verdict(control: Trial, trials: Sequence[Trial], drift: float = 0.0) -> Verdict:
    """The winner among ``trials`` against ``control``; ``drift``: how far the control's own
    throughput moved between its measurements (part of the band)."""
    scored = [t for t in trials if t.status == "measured" and t.score is not None]
    best = max(scored, key=lambda t: t.score or 0.0, default=None)
    if best is None:
        return Verdict(None, None, "no candidate met the SLO")
    if control.score is None:
        return Verdict(best, best, f"{best.label} meets the SLO, the profile as it is does "
                       "not")
    width = band(best, control, drift)
    gain = (best.score or 0.0) / control.score - 1
    if better(best, control, drift):
        return Verdict(best, best, f"{best.label}: {gain:+.1%} output throughput under the "
                       f"SLO, outside the noise band (±{width:.1%})")
    return Verdict(None, best, f"none beats the profile outside the noise band: the best, "
                   f"{best.label}, is {gain:+.1%} (band ±{width:.1%})")


def why_lost(trial: Trial, winner: Trial | None) -> str:
    """One phrase for the table's last column."""
    if trial.status == "refused":
        return f"refused by the planner: {trial.why}"
    if trial.status == "failed":
        return f"failed its gate (the node was restored): {trial.why}"
    if trial.status == "interrupted":
        return f"interrupted: {trial.why}"
    if trial.score is None:
        return f"missed the SLO: {trial.why}"
    if winner is not None and trial is winner:
        return "best"
    if winner is not None and winner.score:
        return f"{trial.score / winner.score - 1:+.1%} against the best"
    return ""


def table(control: Trial, trials: Sequence[Trial], winner: Trial | None) -> list[str]:
    """Every candidate (the control first): its settings, what its boot printed, its
    throughput with the seeds' spread, TTFT p99, and why it lost."""
    rows = [("candidate", "status", "KV pool", "graphs", "out tok/s", "TTFT p99", "verdict")]
    for trial in [control, *trials]:
        kv = trial.boot.get("kv_cache_tokens")
        throughput = trial.figures.get(THROUGHPUT)
        ttft = trial.figures.get("p99_ttft_ms")
        rows.append((
            ("control: " if trial.role == "control" else "") + trial.label,
            trial.status,
            f"{kv:,}" if isinstance(kv, int) else "-",
            str(trial.boot.get("cudagraph_mode") or "-"),
            f"{throughput:.1f} ±{trial.spread:.0%}" if throughput is not None else "-",
            f"{ttft:.0f} ms" if ttft is not None else "-",
            "control" if trial.role == "control" and trial.score is not None
            else why_lost(trial, winner)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
            for row in rows]


def chart(control: Trial, trials: Sequence[Trial], width: int = 40) -> list[str]:
    """Throughput against the SLO, a bar per benched candidate (the control first): the bar
    is the mean output throughput on one scale, ``|`` marks the control's, and each line
    says whether the SLO held (``meets``) or which bound it missed. Candidates that never
    reached a bench (refused, failed their gate, interrupted) are left to the table."""
    benched = [t for t in [control, *trials] if t.figures.get(THROUGHPUT) is not None]
    if not benched:
        return []
    top = max(t.figures[THROUGHPUT] for t in benched) or 1.0
    mark = round((control.figures.get(THROUGHPUT) or 0.0) / top * width)
    names = [("control: " if t.role == "control" else "") + t.label for t in benched]
    pad = max(len(name) for name in names)
    lines = [f"{'':{pad}}  out tok/s (| = the control), against the SLO"]
    for name, trial in zip(names, benched, strict=True):
        value = trial.figures[THROUGHPUT]
        filled = round(value / top * width)
        bar = "".join("█" if i < filled else ("|" if i == mark else " ")
                      for i in range(width + 1))
        slo = "meets" if trial.score is not None else f"misses: {trial.why}"
        lines.append(f"{name:{pad}}  {bar} {value:,.1f}  {slo}".rstrip())
    return lines

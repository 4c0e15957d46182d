"""Is B better than A? Per scenario and figure, the change with a noise band, and which
profile to keep.

The noise band of a figure is the largest of:

* the **control**: A measured again after B (A'), |A' - A| / A. It holds everything that
  moved between the runs and is not the profile: an image pulled in between, the page
  cache, a neighbour's load, thermal state;
* the **seeds' spread** of A and of B ((max - min) / mean over the seeds);
* a floor of :data:`NOISE_FLOOR`.

A change is ``better`` or ``worse`` only outside the band, ``no change`` inside it.
Without a control (``bench --compare`` of two recorded releases) the band is the seeds'
spread and the floor only, and the table says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from servefleet.core.bench.record import DECIDING, FIGURES, Figure
from servefleet.core.bench.summary import ScenarioSummary

NOISE_FLOOR = 0.02
"""Changes within 2% are never called better or worse."""

Verdict = Literal["better", "worse", "no change"]


@dataclass(frozen=True)
class Change:
    """One figure of one scenario, A against B."""

    scenario: str
    figure: Figure
    a: float
    b: float
    band: float
    """The noise band, relative (0.05 = ±5%)."""
    control: float | None = None
    """A' when a control ran."""

    @property
    def change(self) -> float:
        """(B - A) / A."""
        return (self.b - self.a) / self.a if self.a else 0.0

    @property
    def verdict(self) -> Verdict:
        """``better`` or ``worse`` outside the band, else ``no change``."""
        if abs(self.change) <= self.band:
            return "no change"
        return "better" if (self.change > 0) == self.figure.higher_is_better else "worse"


@dataclass(frozen=True)
class Decision:
    """Which profile to keep, and why."""

    keep: Literal["A", "B"]
    reason: str


def compare(a: Sequence[ScenarioSummary], b: Sequence[ScenarioSummary],
            control: Sequence[ScenarioSummary] | None = None,
            figures: Sequence[Figure] = FIGURES) -> list[Change]:
    """Every figure of every scenario both A and B ran (same load), in A's order."""
    by_b = {(s.scenario, s.identity): s for s in b}
    by_control = {(s.scenario, s.identity): s for s in control or ()}
    changes: list[Change] = []
    for one in a:
        other = by_b.get((one.scenario, one.identity))
        if other is None:
            continue
        again = by_control.get((one.scenario, one.identity))
        for figure in figures:
            key = figure.key
            if key not in one.means or key not in other.means:
                continue
            base = one.means[key]
            band = max(NOISE_FLOOR, one.spread.get(key, 0.0), other.spread.get(key, 0.0))
            control_value = again.means.get(key) if again is not None else None
            if control_value is not None and base:
                band = max(band, abs(control_value - base) / abs(base))
            changes.append(Change(one.scenario, figure, base, other.means[key], band,
                                  control_value))
    return changes


def decide(changes: Sequence[Change]) -> Decision:
    """The seeds' rule on the deciding figures (output throughput, mean TTFT): keep B
    when it is better somewhere and worse nowhere; otherwise keep A, saying where B won
    (a split workload may want both: ``docs/bench.md``)."""
    deciding = [c for c in changes if c.figure.key in DECIDING]
    if not deciding:
        return Decision("A", "no scenario ran on both: nothing to decide on")
    better = [c for c in deciding if c.verdict == "better"]
    worse = [c for c in deciding if c.verdict == "worse"]

    def where(items: Sequence[Change]) -> str:
        return ", ".join(f"{c.figure.label} {c.change:+.0%} on {c.scenario}" for c in items)

    if better and not worse:
        return Decision("B", f"better outside the noise band ({where(better)}), "
                             "worse nowhere")
    if worse and not better:
        return Decision("A", f"B is worse ({where(worse)}) and better nowhere")
    if better:
        return Decision("A", f"mixed: B is better ({where(better)}) but worse "
                             f"({where(worse)}); keep A, or serve both and split the "
                             "workload by shape")
    return Decision("A", "no change outside the noise band: B buys nothing measurable")

"""How a measured tune spends its deploys: compass search over the lattice, and the grid it
is measured against.

Compass search (a direct search: Kolda, Lewis and Torczon, "Optimization by direct search:
new perspectives on some classical and modern methods", SIAM Review 45(3), 2003, §3) polls
the points one step from the best point so far along each knob and moves to the first that
is better by more than the noise band; it stops when no neighbour is. Here the lattice is
the step (each knob's values are its mesh), polling is opportunistic (the first better
neighbour is taken) and the knob and direction that last paid are polled first — a pattern
move in Hooke and Jeeves' sense. It needs no model of the landscape and no gradient, and
it deploys only next to the best point: on a landscape that rises towards one corner (more
sequences until the scenario's users are served at once) it walks there in a few deploys,
where a grid deploys every point. A point the planner refuses (it cannot boot, or its pool
misses the floor) costs no deploy, nor any of the budget. When no point one step along a
knob is better, the points one step along two knobs are polled before the search ends, so
that a refused or failed point does not hide the ones around it.

vLLM's own ``benchmarks/auto_tune`` deploys every cell of its grid; :func:`grid` does the
same over the same lattice, for the side-by-side measurement in ``bench/bench_tune.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from servefleet.core.tune.space import Point, Space, label

TrialStatus = Literal["measured", "refused", "failed", "interrupted"]
"""``measured``: deployed, gated and benched; ``refused``: the planner says it cannot boot
or misses the floor (never deployed); ``failed``: deployed, its gate failed and the rollout
restored the node (never benched); ``interrupted``: the search stopped during it."""

NOISE_FLOOR = 0.02
"""A candidate is better only by more than 2% (as ``bench --ab``'s floor)."""


@dataclass
class Trial:
    """One candidate and what became of it."""

    point: Point
    status: TrialStatus
    score: float | None = None
    """Output throughput under the SLO (``None``: not measured, or the SLO was missed)."""
    spread: float = 0.0
    """The seeds' spread of the throughput, relative to its mean."""
    figures: dict[str, float] = field(default_factory=dict)
    """Each figure's mean over the seeds."""
    boot: dict[str, Any] = field(default_factory=dict)
    """What its boot printed (KV pool, graph mode), from the gate."""
    why: str = ""
    """Why it was refused or failed, or which SLO bounds it missed."""
    role: Literal["control", "candidate"] = "candidate"
    deployed: bool = False
    """Whether it cost a deploy."""

    @property
    def label(self) -> str:
        """The point, short."""
        return label(self.point)

    def to_json(self) -> dict[str, Any]:
        """The trial as recorded (and resumed from)."""
        return {"point": [list(pair) for pair in self.point], "status": self.status,
                "score": self.score, "spread": self.spread, "figures": self.figures,
                "boot": self.boot, "why": self.why, "role": self.role,
                "deployed": self.deployed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        """A recorded trial."""
        return cls(point=tuple((str(k), v) for k, v in data["point"]), status=data["status"],
                   score=data.get("score"), spread=float(data.get("spread") or 0.0),
                   figures=dict(data.get("figures") or {}), boot=dict(data.get("boot") or {}),
                   why=str(data.get("why") or ""), role=data.get("role") or "candidate",
                   deployed=bool(data.get("deployed")))


def band(a: Trial, b: Trial, drift: float = 0.0) -> float:
    """The noise band between two trials: the floor, either's seed spread, or how far the
    control moved between its measurements (``drift``), whichever is largest."""
    return max(NOISE_FLOOR, a.spread, b.spread, drift)


def better(candidate: Trial, best: Trial, drift: float = 0.0) -> bool:
    """``candidate`` beats ``best`` by more than the noise band (a candidate with a score
    beats one without: it met the SLO where the other did not)."""
    if candidate.score is None:
        return False
    if best.score is None:
        return True
    return candidate.score > best.score * (1 + band(candidate, best, drift))


Evaluate = Callable[[Point], Trial]
"""Deploy, gate and bench one point (or return it failed)."""
Screen = Callable[[Point], Trial | None]
"""The point refused before any deploy (the rules, the KV planner), or ``None``."""


def _no_screen(_point: Point) -> Trial | None:
    return None


@dataclass
class Budget:
    """How many deploys the search may spend, and whether it must stop now."""

    max_deploys: int
    spent: int = 0
    stop: Callable[[], str | None] = lambda: None
    """Why the search must stop now (time's up, a signal), else ``None``."""

    def exhausted(self) -> str | None:
        """Why no more deploys may be spent, or ``None``."""
        if self.spent >= self.max_deploys:
            return f"--max-deploys {self.max_deploys} spent"
        return self.stop()


def _poll(point: Point, evaluate: Evaluate, screen: Screen, budget: Budget
          ) -> Trial | str:
    """One point: refused by ``screen`` for free, else measured if the budget allows (else
    why not)."""
    refused = screen(point)
    if refused is not None:
        return refused
    stop = budget.exhausted()
    if stop is not None:
        return stop
    trial = evaluate(point)
    if trial.deployed:
        budget.spent += 1
    return trial


def compass_search(space: Space, control: Trial, evaluate: Evaluate, budget: Budget, *,
                   known: Iterable[Trial] = (), screen: Screen = _no_screen,
                   ) -> tuple[list[Trial], str]:
    """The search of the module docstring from ``control`` (the profile as it is, measured
    already). ``known``: trials recorded by an earlier run of the same search (resumed: not
    measured again). Returns every trial, in the order made, and why the search ended."""
    done: dict[Point, Trial] = {t.point: t for t in known}
    trials: list[Trial] = list(known)
    best = control
    for earlier in trials:  # a resumed search goes on from its best point so far
        if earlier.status == "measured" and better(earlier, best):
            best = earlier
    last: tuple[str, int] | None = None
    while True:
        polls = sorted(space.neighbours(best.point),
                       key=lambda n: 0 if last is not None and (n[0], n[1]) == last else 1)
        polls += list(space.diagonals(best.point))
        moved = False
        for knob, step, point in polls:
            if point == control.point or point in done:
                continue
            trial = _poll(point, evaluate, screen, budget)
            if isinstance(trial, str):
                return trials, trial
            done[point] = trial
            trials.append(trial)
            if trial.status == "interrupted":
                return trials, trial.why or "interrupted"
            if trial.status == "measured" and better(trial, best):
                best, last, moved = trial, (knob, step), True
                break
        if not moved:
            return trials, (f"no point next to the best ({best.label}) is better by more "
                            "than the noise band")


def grid(space: Space, control: Trial, evaluate: Evaluate, budget: Budget, *,
         known: Iterable[Trial] = (), screen: Screen = _no_screen) -> tuple[list[Trial], str]:
    """Every point of the lattice but the control, in grid order (vLLM's auto_tune way)."""
    done = {t.point: t for t in known}
    trials: list[Trial] = list(known)
    for point in space.points():
        if point == control.point or point in done:
            continue
        trial = _poll(point, evaluate, screen, budget)
        if isinstance(trial, str):
            return trials, trial
        trials.append(trial)
        if trial.status == "interrupted":
            return trials, trial.why or "interrupted"
    return trials, "every point of the grid measured"

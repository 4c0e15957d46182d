"""``servefleet tune --measure``: every candidate through the real path, on the node itself.

1. bench the **control**: the profile the node serves, as the stack places it (refused
   unless it serves it, gated);
2. the search (:mod:`servefleet.core.tune.search`) asks for candidates; each is the profile
   with the point's settings, placed as the same deployment and **deployed through the
   rollout** (every validation rule first — a candidate the rules or the KV planner refuse
   never reaches the node — then staging, the boot-log gate, and the rollout's own restore
   when the gate fails: a failed candidate costs that one restore and is never benched);
3. a candidate that passed its gate is **benched** with the same scenarios and seeds;
4. at the end, the control is **deployed again, gated, and benched again**: the node ends
   on the profile it served (unless ``apply``), and how far the control moved between its
   two measurements widens the noise band;
5. each trial is written to a state file as it ends: a search stopped by a signal or a lost
   link resumes from it and measures nothing twice.

SIGINT/SIGTERM stop the search after the step under way (a deploy ends restored or gated,
a bench's remote command stops) and the control is put back, gated.

Where the stack's gateway routes to the deployment, :func:`drained_search` takes it out of
rotation for the whole search (no user request meets a candidate, and none shares the node
with the bench) and re-admits it once the node serves a gated profile again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servefleet.adapters.bench.ab import placed
from servefleet.adapters.bench.session import (
    BenchProgress,
    BenchRefused,
    bench_target,
    run_bench,
)
from servefleet.adapters.gateway.follow import GatewayFollow
from servefleet.adapters.rollout import Abort, ProgressEvent, check_rules, deploy_node
from servefleet.adapters.runtime import Transport, connect
from servefleet.core.bench.record import BenchRecord
from servefleet.core.bench.scenario import Scenario
from servefleet.core.errors import ServefleetError, ValidationFailed
from servefleet.core.models import Profile
from servefleet.core.project import Project
from servefleet.core.tune.report import Verdict, verdict
from servefleet.core.tune.search import Budget, Trial, compass_search, grid
from servefleet.core.tune.slo import THROUGHPUT, Slo, seed_means, spread
from servefleet.core.tune.space import Point, Space, apply_point, label

STATE_VERSION = 1


@dataclass
class TuneOutcome:
    """What a measured tune did and where it left the node."""

    profile: str
    control: Trial
    trials: list[Trial] = field(default_factory=list)
    verdict: Verdict | None = None
    ended: str = ""
    """Why the search ended."""
    control_again: Trial | None = None
    """The control measured again at the end (``None``: it could not be put back)."""
    drift: float = 0.0
    """How far the control's throughput moved between its two measurements."""
    serving: str | None = None
    """The profile the node serves at the end."""
    deploys: int = 0
    """Candidates deployed by the search, a resumed one's earlier runs included (the
    control's own deploy at the end not counted)."""
    failure: str | None = None


def candidate_name(profile: str, point: Point) -> str:
    """The candidate profile's name: the profile's, then the point's values."""
    return f"{profile}-tune-" + "-".join(str(v).replace(".", "p") for _, v in point)


def _boot(result: Any) -> dict[str, Any]:
    """The KV pool and graph mode the candidate's gate read from its boot log."""
    health = getattr(result, "health", None)
    facts = getattr(health, "facts", None) or {}
    return {k: facts.get(k) for k in ("kv_cache_tokens", "cudagraph_mode", "max_concurrency")
            if facts.get(k) is not None}


def measured_trial(point: Point, records: Sequence[BenchRecord], slo: Slo, *,
                   role: str = "candidate", boot: Mapping[str, Any] | None = None,
                   deployed: bool = True) -> Trial:
    """A benched candidate: its seeds' means, their spread, and its score under the SLO."""
    seeds = [{k: float(v) for k, v in r.figures.items() if isinstance(v, int | float)}
             for r in records]
    figures = seed_means(seeds)
    failed = sum(int(r.figures.get("failed") or 0) for r in records)
    misses = slo.misses(figures) + ([f"{failed} request(s) failed"] if failed else [])
    return Trial(point, "measured", score=None if misses else figures.get(THROUGHPUT),
                 spread=spread(seeds), figures=figures, boot=dict(boot or {}),
                 why="; ".join(misses), role=role,  # type: ignore[arg-type]
                 deployed=deployed)


class StateFile:
    """The trials of one search (node, deployment, profile, space, scenarios, SLO), one JSON
    document rewritten after each trial; another search's file is not reused."""

    def __init__(self, path: Path, key: Mapping[str, Any]) -> None:
        self.path = path
        self.key = dict(key)

    def load(self) -> list[Trial]:
        """The trials recorded by an earlier run of the same search."""
        if not self.path.is_file():
            return []
        data = json.loads(self.path.read_text())
        if data.get("version") != STATE_VERSION or data.get("key") != self.key:
            return []
        # An interrupted candidate measured nothing: the resumed search tries it again.
        return [trial for trial in map(Trial.from_json, data.get("trials", []))
                if trial.status != "interrupted"]

    def save(self, trials: Sequence[Trial]) -> None:
        """Write every trial so far (atomically: a kill leaves the previous version)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": STATE_VERSION, "key": self.key,
                                   "trials": [t.to_json() for t in trials]}, indent=1))
        tmp.replace(self.path)


@dataclass
class MeasuredTune:
    """One measured tune of ``deployment`` on ``node`` (see the module docstring)."""

    project: Project
    node: str
    deployment: str
    space: Space
    slo: Slo
    scenarios: Sequence[Scenario]
    secrets: Mapping[str, str]
    state: StateFile
    run_id: str
    say: Callable[[str], None]
    bench_progress: BenchProgress
    abort: Abort = field(default_factory=Abort)
    transport_factory: Callable[..., Transport] = connect
    deploy_progress: Callable[[ProgressEvent], None] | None = None
    deployed_now: str | None = None
    """The profile the node serves (after the last deploy this search made)."""

    @property
    def base(self) -> Profile:
        """The profile the stack places as the deployment (the control)."""
        _, entry = placed(self.project, self.node, self.deployment)
        return self.project.profiles[entry.profile]

    def project_with(self, profile: Profile) -> Project:
        """The project with ``profile`` added and placed as the deployment."""
        on_node, entry = placed(self.project, self.node, self.deployment)
        swapped = [d.model_copy(update={"profile": profile.name}) if d is entry else d
                   for d in on_node]
        others = [d for d in self.project.stack.deployments if d.node != self.node]
        stack = self.project.stack.model_copy(update={"deployments": [*others, *swapped]})
        files = {**self.project.profile_files,
                 profile.name: self.project.profile_files.get(self.base.name, "")}
        return replace(self.project, stack=stack, profile_files=files,
                       profiles={**self.project.profiles, profile.name: profile})

    def serving(self) -> str:
        """The profile the deployment serves now (refused unless gated and unlocked)."""
        with self.transport_factory(self.project.nodes[self.node]) as transport:
            return bench_target(transport, self.deployment, self.project).profile

    def bench(self, expected: str) -> list[BenchRecord]:
        """Bench the deployment, which must serve ``expected``, gated."""
        with self.transport_factory(self.project.nodes[self.node]) as transport:
            target = bench_target(transport, self.deployment, self.project)
            if target.profile != expected:
                raise BenchRefused(f"{self.node}/{self.deployment} serves {target.profile}, "
                                   f"not {expected}")
            return run_bench(transport, target, self.scenarios, run_id=self.run_id,
                             role="tune", progress=self.bench_progress)

    def deploy(self, profile: Profile) -> tuple[bool, str, Any]:
        """Deploy ``profile`` as the deployment, gated: (passed, why not, its result)."""
        project = self.project_with(profile)
        on_node = project.stack.for_node(self.node)
        result = deploy_node(project, self.node, on_node, self.secrets,
                             progress=self.deploy_progress, abort=self.abort)
        mine = next((d for d in result.deployments if d.deployment == self.deployment), None)
        if result.ok and mine is not None:
            self.deployed_now = profile.name
            return True, "", mine
        why = (mine.failure.message if mine is not None and mine.failure else
               result.error or (mine.status if mine else "no result"))
        return False, why, mine

    def candidate(self, point: Point) -> Profile:
        """The control's profile with ``point``'s settings, under its candidate name."""
        return apply_point(self.base, point, candidate_name(self.base.name, point))

    def refused(self, point: Point, error: ValidationFailed) -> Trial:
        """A point the rules refuse, with their first error."""
        lines = [line for line in str(error).splitlines() if line.strip()]
        trial = Trial(point, "refused", why=" ".join(lines[-1:]) or str(error))
        self.say(f"candidate {label(point)}: refused before the node: {trial.why}")
        return trial

    def screen(self, point: Point) -> Trial | None:
        """The point refused by every validation rule (the KV planner's among them) before
        it costs a deploy, or ``None``."""
        profile = self.candidate(point)
        try:
            check_rules(self.project_with(profile))
        except ValidationFailed as error:
            return self.refused(point, error)
        return None

    def evaluate(self, point: Point) -> Trial:
        """One candidate through the real path (module docstring, steps 2 and 3)."""
        if self.abort.requested:
            return Trial(point, "interrupted", why=f"interrupted by {self.abort.signal_name}")
        profile = self.candidate(point)
        self.say(f"candidate {label(point)}: deploy (gated)")
        try:
            passed, why, result = self.deploy(profile)
        except ValidationFailed as error:  # the rules changed since the screen: same answer
            return self.refused(point, error)
        if not passed:
            if self.abort.requested:
                why = f"interrupted by {self.abort.signal_name}: {why}"
                self.say(f"candidate {label(point)}: {why}")
                return Trial(point, "interrupted", why=why, deployed=True, boot=_boot(result))
            self.say(f"candidate {label(point)}: failed: {why}")
            return Trial(point, "failed", why=why, deployed=True, boot=_boot(result))
        try:
            records = self.bench(profile.name)
        except KeyboardInterrupt:
            return Trial(point, "interrupted", why="interrupted during the bench",
                         deployed=True, boot=_boot(result))
        trial = measured_trial(point, records, self.slo, boot=_boot(result))
        self.say(f"candidate {label(point)}: {trial.figures.get(THROUGHPUT, 0):.1f} out tok/s"
                 + (f", missed the SLO: {trial.why}" if trial.score is None else ""))
        return trial


def run_tune(tune: MeasuredTune, *, max_deploys: int, max_minutes: float | None,
             method: str = "search", apply: bool = False,
             clock: Callable[[], float] = time.monotonic) -> TuneOutcome:
    """The measured tune of the module docstring; ``method`` ``grid`` deploys every point
    (vLLM's auto_tune way, for the comparison) instead of searching."""
    base = tune.base
    started = clock()
    serving = tune.serving()
    if serving != base.name and serving.startswith(f"{base.name}-tune-"):
        # A search stopped before it put the control back (a killed controller).
        tune.say(f"{tune.node}/{tune.deployment} serves {serving}, left by an earlier "
                 f"search: deploy {base.name} back (gated)")
        passed, why, _ = tune.deploy(base)
        if not passed:
            raise ServefleetError(f"putting {base.name} back failed: {why}")
    tune.say(f"control: bench {base.name} as {tune.node}/{tune.deployment} serves it")
    control = measured_trial(tune.space.origin, tune.bench(base.name), tune.slo,
                             role="control", deployed=False)
    outcome = TuneOutcome(base.name, control, serving=base.name)
    known = tune.state.load()
    if known:
        tune.say(f"resuming: {len(known)} candidate(s) recorded by an earlier run")
    recorded: list[Trial] = list(known)

    def record(trial: Trial | None) -> Trial | None:
        if trial is not None:  # every trial on disk as it ends: a stopped search resumes
            recorded.append(trial)
            tune.state.save(recorded)
        return trial

    def evaluate(point: Point) -> Trial:
        trial = tune.evaluate(point)
        record(trial)
        return trial

    def screen(point: Point) -> Trial | None:
        return record(tune.screen(point))

    def stop() -> str | None:
        if tune.abort.requested:
            return f"interrupted by {tune.abort.signal_name}"
        if max_minutes is not None and clock() - started > max_minutes * 60:
            return f"--max-minutes {max_minutes:g} passed"
        return None

    # --max-deploys bounds the whole search: what a resumed one spent before counts.
    budget = Budget(max_deploys, spent=sum(1 for t in known if t.deployed), stop=stop)
    try:
        with tune.abort.handling_signals():
            search = grid if method == "grid" else compass_search
            trials, outcome.ended = search(tune.space, control, evaluate, budget,
                                           known=known, screen=screen)
    except ServefleetError as error:
        trials, outcome.failure = recorded, str(error)
    outcome.trials = list(trials)
    outcome.deploys = sum(1 for t in trials if t.deployed)
    outcome.verdict = verdict(control, outcome.trials)
    winner = outcome.verdict.winner
    keep = (apply_point(base, winner.point, candidate_name(base.name, winner.point))
            if apply and winner is not None else base)
    _restore(tune, outcome, keep)
    if outcome.control_again is not None and control.figures.get(THROUGHPUT):
        first = control.figures[THROUGHPUT]
        again = outcome.control_again.figures.get(THROUGHPUT, first)
        outcome.drift = abs(again - first) / first
        outcome.verdict = verdict(control, outcome.trials, outcome.drift)
    return outcome


def drained_search(gateway: GatewayFollow | None, node: str, deployment: str,
                   say: Callable[[str], None],
                   search: Callable[[], TuneOutcome]) -> TuneOutcome:
    """Run ``search`` with the deployment drained in the stack's gateway (``None``: the stack
    has none); re-admit it when the search leaves it serving a gated profile, else leave it
    out of rotation and say so. A route it is the last engine of is refused by the drain
    (:class:`~servefleet.adapters.gateway.follow.OutageRefused`) unless the gateway allows
    the outage."""
    if gateway is None:
        return search()
    gateway.drain(node, deployment, say)
    kept_out = (f"gateway: {node}/{deployment} stays out of rotation; a rollout of it that "
                f"passes its gate (`servefleet deploy {node}`) re-admits it")
    try:
        outcome = search()
    except BaseException:
        say(kept_out)
        raise
    if outcome.serving is None:
        say(kept_out)
    else:
        gateway.readmit(node, deployment, say)
    return outcome


def _restore(tune: MeasuredTune, outcome: TuneOutcome, keep: Profile) -> None:
    """Put ``keep`` back on the node, gated (the control, or the winner with ``apply``);
    the control is benched again there, for the drift of the node between its runs."""
    try:
        now: str | None = tune.serving()
    except ServefleetError:  # ungated, locked, down or unreachable: put the profile back
        now = None
    if now == keep.name:
        outcome.serving = keep.name
    else:
        tune.say(f"deploy {keep.name} back (gated)")
        tune.abort = Abort()  # the search's may be tripped: the restore must still run
        passed, why, _ = tune.deploy(keep)
        if not passed:
            outcome.serving = None
            outcome.failure = (outcome.failure or "") + (
                f"; putting {keep.name} back failed: {why}; `servefleet deploy {tune.node}` "
                "puts the stack's profile back")
            return
        outcome.serving = keep.name
    if keep.name == tune.base.name:
        try:
            outcome.control_again = measured_trial(
                tune.space.origin, tune.bench(keep.name), tune.slo, role="control",
                deployed=False)
        except (BenchRefused, KeyboardInterrupt) as error:
            tune.say(f"control not measured again: {error or 'interrupted'}")

"""``servefleet bench NODE --ab PROFILE_B``: is B better than A on this node?

In order, each step only after the one before succeeded:

1. bench **A**, the profile the node serves (it must be the one the stack places there);
2. deploy **B** through the normal rollout (lock, staging, gate, automatic restore);
3. bench **B**;
4. deploy **A** again, gated (its release is still on the node);
5. bench **A'**, the control: what moved between the runs that is not the profile;
6. compare (:mod:`servefleet.core.bench.compare`) and decide.

The node is left on A, or with ``keep_better`` on the winner (B deployed again, gated).
A failure stops the sequence and says what the node serves: a B that fails its gate is
restored to A by the rollout itself. The lock is held only while a step redeploys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from servefleet.adapters.bench.session import (
    BenchProgress,
    BenchRefused,
    BenchTarget,
    bench_target,
    run_bench,
)
from servefleet.adapters.rollout import deploy_node
from servefleet.adapters.rollout.results import NodeResult, Progress
from servefleet.adapters.runtime import Transport, connect
from servefleet.core.bench.compare import Change, Decision, compare, decide
from servefleet.core.bench.record import BenchRecord, Role
from servefleet.core.bench.scenario import Scenario
from servefleet.core.bench.summary import summarise
from servefleet.core.errors import ConfigError
from servefleet.core.models import Deployment
from servefleet.core.project import Project


@dataclass
class AbOutcome:
    """What an A/B measured and where it left the node."""

    profile_a: str
    profile_b: str
    records: dict[Role, list[BenchRecord]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    decision: Decision | None = None
    serving: str | None = None
    """The profile the node serves at the end (``None`` when unknown: a failed restore)."""
    failure: str | None = None
    """Why the sequence stopped early."""


def placed(project: Project, node: str, deployment: str) -> tuple[list[Deployment],
                                                                  Deployment]:
    """Every deployment the stack places on ``node`` and the one named ``deployment``."""
    mine = project.stack.for_node(node)
    for entry in mine:
        if entry.name == deployment:
            return mine, entry
    raise ConfigError(f"the stack places no deployment {deployment!r} on {node} "
                      f"(it places: {', '.join(d.name for d in mine) or 'none'})")


def run_ab(project: Project, node: str, deployment: str, profile_b: str,
           scenarios: Sequence[Scenario], *, run_id: str, secrets: Mapping[str, str],
           say: Callable[[str], None], bench_progress: BenchProgress,
           deploy_progress: Progress | None = None, keep_better: bool = False,
           transport_factory: Callable[..., Transport] = connect) -> AbOutcome:
    """Run the A/B sequence of the module docstring."""
    if profile_b not in project.profiles:
        raise ConfigError(f"no profile {profile_b!r} (known: "
                          f"{', '.join(sorted(project.profiles))})")
    on_node, entry = placed(project, node, deployment)
    outcome = AbOutcome(profile_a=entry.profile, profile_b=profile_b, serving=entry.profile)
    if profile_b == entry.profile:
        raise ConfigError(f"{node}/{deployment} already serves {profile_b}: an A/B needs "
                          "another profile")

    def bench(role: Role, expected: str) -> bool:
        with transport_factory(project.nodes[node]) as transport:
            try:
                target: BenchTarget = bench_target(transport, deployment, project)
            except BenchRefused as error:
                outcome.failure = str(error)
                return False
            if target.profile != expected:
                outcome.failure = (f"{node}/{deployment} serves {target.profile}, not "
                                   f"{expected}: deploy the stack first")
                return False
            say(f"bench {role}: {expected}, release {target.release}")
            try:
                outcome.records[role] = run_bench(transport, target, scenarios,
                                                  run_id=run_id, role=role,
                                                  progress=bench_progress)
            except BenchRefused as error:
                outcome.failure = str(error)
                return False
        return True

    def switch(profile: str) -> bool:
        say(f"deploy {profile} to {node}/{deployment} (gated)")
        swapped = [d.model_copy(update={"profile": profile}) if d is entry else d
                   for d in on_node]
        result: NodeResult = deploy_node(project, node, swapped, secrets,
                                         progress=deploy_progress)
        mine = [d for d in result.deployments if d.deployment == deployment]
        if result.ok:
            outcome.serving = profile
            return True
        status = mine[0].status if mine else "error"
        why = (mine[0].failure.message if mine and mine[0].failure else result.error) or status
        outcome.serving = (outcome.serving if status in ("failed", "rolled_back")
                           else None)
        outcome.failure = f"deploy of {profile} {status}: {why}"
        return False

    try:
        if not bench("A", entry.profile) or not switch(profile_b) \
                or not bench("B", profile_b):
            return outcome
        if not switch(entry.profile) or not bench("control", entry.profile):
            return outcome
    except KeyboardInterrupt:
        # Ctrl-C during a bench: its remote command has stopped; a deploy handles its own
        # signals and ends restored or committed. Say where the node was left.
        outcome.failure = (f"interrupted; {node}/{deployment} serves "
                           f"{outcome.serving or 'nothing known'}, gated"
                           + ("" if outcome.serving == entry.profile else
                              f": `servefleet deploy {node}` puts {entry.profile} back"))
        return outcome
    outcome.changes = compare(summarise(outcome.records["A"]),
                              summarise(outcome.records["B"]),
                              summarise(outcome.records["control"]))
    outcome.decision = decide(outcome.changes)
    if keep_better and outcome.decision.keep == "B":
        switch(profile_b)
    return outcome

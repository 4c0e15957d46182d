"""Recovery of a rollout, without the fleet: every command of an update × every way it can
go wrong (exit status, timeout, lost controller, KeyboardInterrupt, SIGTERM, two signals).

Each case starts from a node that serves release A (deployed and gated), deploys release B
with one fault injected, and checks what the node is left with: the old engine restored
and gated, or the state recorded (lock with its phase, audit line) and visible in the plan;
the lock released unless it had to stay; ``current`` and ``last-good`` naming releases that
exist; no release lost. Then a plain deploy (after ``unlock LOCK_ID`` where the lock had to
stay) must bring the node to B, gated. The node is real ``sh`` running servefleet's remote
scripts over a throw-away folder (see :mod:`tests.adapters.fake_node`).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from fake_node import (
    FAULT_KINDS,
    FakeGateRollout,
    FakeNodeTransport,
    Fault,
    FaultKind,
    fake_runtime,
)
from loopback_sshd import free_port

from servefleet.adapters import remote
from servefleet.adapters.lock import force_unlock
from servefleet.adapters.rollout import (
    Abort,
    Hook,
    HookCall,
    NodeResult,
    Observation,
    RolloutHooks,
    render_for,
    restore_candidate,
)
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.errors import ConfigError, LockHeld
from servefleet.core.models import Deployment
from servefleet.core.observed import ObservedDeployment
from servefleet.core.plan import plan, recovery_notes
from servefleet.core.project import Project, load_project
from servefleet.core.render import RenderedRelease
from tests.reference_project import REPO_ROOT

NODE = "rtx5090"
PROFILE = "qwen36-q4-llamacpp"
SECRETS = {"HF_TOKEN": "hf_recovery_test_secret"}

UPDATE_STEPS = (
    "observe the node",
    "take the node lock",
    "preflight",
    "upload release B",
    "pull the images",
    "record the rollout phase",      # stop
    "stop the old engine",
    "record the rollout phase",      # up
    "start the engine",
    "record the rollout phase",      # boot
    "follow the boot log",
    "mark the engine gated",
    "record the rollout phase",      # switch
    "switch current to B",
    "prune old releases",
    "append the audit line",
    "release the node lock",
)
"""The commands of a clean update from A to B, in order (asserted by the first test)."""

RESTORE_STEPS = (
    *UPDATE_STEPS[:UPDATE_STEPS.index("follow the boot log") + 1],
    "stop the failed engine",
    "record the rollout phase",      # restore
    "list releases",
    "clear the deployment's containers",
    "record the rollout phase",      # up
    "start the engine",
    "record the rollout phase",      # boot
    "follow the boot log",
    "mark the engine gated",
    "switch current to A",
    "append the audit line",
    "release the node lock",
)
"""The commands of an update whose release B fails its gate and A is restored."""
FIRST_RESTORE_STEP = RESTORE_STEPS.index("stop the failed engine")
CASES = [("update", i, label) for i, label in enumerate(UPDATE_STEPS)] + \
    [("restore", i, label) for i, label in enumerate(RESTORE_STEPS) if i >= FIRST_RESTORE_STEP]
"""Every command of both paths (the restore path's own commands only)."""


@pytest.fixture(scope="module")
def ports() -> tuple[int, int]:
    first = free_port()
    second = free_port()
    while second == first:
        second = free_port()
    return first, second


def project_at(base: Path, port: int, ports: tuple[int, int]) -> Project:
    """The repository's project with one deployment on ``rtx5090`` whose base directory is
    ``base``; the port makes release A and release B differ."""
    project = load_project(REPO_ROOT, "reference")
    node = project.nodes[NODE].model_copy(update={"base_dir": str(base), "ports": list(ports)})
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=NODE, name="main", profile=PROFILE, port=port)]})
    return dataclasses.replace(project, nodes={**project.nodes, NODE: node}, stack=stack)


def release_of(project: Project) -> RenderedRelease:
    [rendered] = render_for(project, [NODE], SECRETS)
    return rendered


def deploy(project: Project, transport: FakeNodeTransport, *, failing: frozenset[str] = frozenset(),
           unlock_id: str | None = None, hooks: RolloutHooks | None = None,
           seen: Observation | None = None, read_first: bool = True) -> NodeResult:
    """One deploy of the stack's deployment through the fake node (``seen``: the
    command's earlier read of it; ``read_first``: read it before the lock)."""
    abort = Abort()
    transport.abort = abort
    transport.labels.clear()
    rollout = FakeGateRollout(project, transport.node, fake_runtime(transport),
                              unlock_id=unlock_id,
                              secrets=SECRETS, abort=abort, hooks=hooks)
    rollout.failing = failing
    rendered = release_of(project)
    return rollout.deploy([rendered], {"main": project.stack.deployments[0]}, seen=seen,
                          read_first=read_first)


def planned(project: Project, transport: FakeNodeTransport) -> Observation:
    """A plan's read of the fake node (as ``servefleet deploy`` shows before it confirms)."""
    reader = FakeGateRollout(project, transport.node, fake_runtime(transport), secrets=SECRETS)
    observed, _ = reader.plan([release_of(project)])
    return reader.observation(observed)


@dataclasses.dataclass
class Scene:
    """A node serving release A (gated), and the project that renders release B."""

    transport: FakeNodeTransport
    a: Project
    b: Project
    release_a: str
    release_b: str


def own_folder(name: str) -> Iterator[Path]:
    """A folder of this module's own: pytest's rotation of old ``basetemp`` folders, run by
    another pytest session on the same machine, must not remove it mid-test."""
    folder = Path(tempfile.mkdtemp(prefix=f"servefleet-{name}-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def served_a(ports: tuple[int, int]) -> Iterator[Path]:
    """A node folder (base directory and Docker state) that serves release A, gated: made
    once by a real deploy, copied for each test."""
    for root in own_folder("served-a"):
        a = project_at(root / "srv", ports[0], ports)
        transport = FakeNodeTransport(a.nodes[NODE], root / "node", SECRETS)
        first = deploy(a, transport)
        assert first.status == "deployed", first.to_json()
        yield root


@pytest.fixture
def node_dir() -> Iterator[Path]:
    """This test's node folder."""
    yield from own_folder("node")


@pytest.fixture
def scene(node_dir: Path, ports: tuple[int, int], served_a: Path) -> Scene:
    tmp_path = node_dir
    shutil.copytree(served_a, tmp_path, symlinks=True, dirs_exist_ok=True)
    a = project_at(tmp_path / "srv", ports[0], ports)
    b = project_at(tmp_path / "srv", ports[1], ports)
    transport = FakeNodeTransport(a.nodes[NODE], tmp_path / "node", SECRETS)
    release_a, release_b = release_of(a).release_id, release_of(b).release_id
    assert release_a != release_b
    assert dep_of_transport(transport).running_release == release_a
    return Scene(transport, a, b, release_a, release_b)


def dep_of_transport(transport: FakeNodeTransport) -> ObservedDeployment:
    return transport.observed().deployments["main"]


def dep_of(scene: Scene) -> ObservedDeployment:
    observed = scene.transport.observed().deployments["main"]
    return observed


def assert_old_engine_untouched(scene: Scene) -> None:
    """Neither stopped nor started: release A still current and running, gated."""
    labels = scene.transport.labels
    assert "stop the old engine" not in labels and "start the engine" not in labels
    dep = dep_of(scene)
    assert dep.running_release == dep.current_release == scene.release_a
    assert not dep.ungated


def audit_lines(scene: Scene) -> list[list[str]]:
    path = Path(scene.a.nodes[NODE].base_dir) / "main" / remote.AUDIT_FILE
    return [line.split("\t") for line in path.read_text().splitlines()]


def test_a_clean_update_runs_these_commands_and_ends_gated(scene: Scene) -> None:
    result = deploy(scene.b, scene.transport)
    assert result.status == "deployed", result.to_json()
    labels = [label.replace(scene.release_b, "B") for label in scene.transport.labels]
    assert tuple(labels) == UPDATE_STEPS
    dep = dep_of(scene)
    assert dep.current_release == dep.last_good == dep.running_release == scene.release_b
    assert dep.previous_release == scene.release_a
    assert not dep.ungated
    assert scene.transport.docker_state()["pulls_during_up"] == 0  # pulled before the stop
    assert audit_lines(scene)[-1][5] == "ok"
    assert scene.transport.observed().lock_owner is None
    assert not plan(release_of(scene.b), dep).changes


def test_a_deploy_after_its_plan_reads_the_node_once_more_only_under_the_lock(
        scene: Scene) -> None:
    seen = planned(scene.b, scene.transport)
    assert scene.transport.labels == ["observe the node"]
    result = deploy(scene.b, scene.transport, seen=seen)
    assert result.status == "deployed", result.to_json()
    labels = [label.replace(scene.release_b, "B") for label in scene.transport.labels]
    # The plan's read stands in for the one before the lock: one read in all, then the
    # lock's own read (which decides what changes).
    assert tuple(labels) == UPDATE_STEPS[1:]
    # Nothing to do after a plan that found nothing: not one more command.
    seen = planned(scene.b, scene.transport)
    scene.transport.labels.clear()
    assert deploy(scene.b, scene.transport, seen=seen).status == "unchanged"
    assert scene.transport.labels == []


def test_a_deploy_told_something_changes_reads_the_node_only_under_the_lock(
        scene: Scene) -> None:
    """The Pulumi provider's update (called only on a diff): no read before the lock; with
    nothing to change after all, the lock is taken and given back, nothing else."""
    result = deploy(scene.b, scene.transport, read_first=False)
    assert result.status == "deployed", result.to_json()
    labels = [label.replace(scene.release_b, "B") for label in scene.transport.labels]
    assert tuple(labels) == UPDATE_STEPS[1:]
    assert deploy(scene.b, scene.transport, read_first=False).status == "unchanged"
    assert scene.transport.labels == ["take the node lock", "release the node lock"]


def test_a_failed_gate_runs_these_commands_to_restore(scene: Scene) -> None:
    result = deploy(scene.b, scene.transport, failing=frozenset({scene.release_b}))
    assert result.status == "rolled_back", result.to_json()
    labels = [label.replace(scene.release_b, "B").replace(scene.release_a, "A")
              for label in scene.transport.labels]
    assert tuple(labels) == RESTORE_STEPS


@pytest.mark.parametrize("kind", FAULT_KINDS)
@pytest.mark.parametrize(("path", "step", "label"), CASES,
                         ids=[f"{p}-{i:02d}-{s.replace(' ', '-')}" for p, i, s in CASES])
def test_every_step_every_failure_leaves_a_node_that_is_served_or_explained(
        scene: Scene, path: str, step: int, label: str, kind: FaultKind) -> None:
    transport = scene.transport
    transport.fault = Fault(step, kind)
    failing = frozenset({scene.release_b}) if path == "restore" else frozenset()
    try:
        result = deploy(scene.b, transport, failing=failing)
        error: BaseException | None = None
    except (Exception, KeyboardInterrupt) as raised:  # before the lock: nothing touched
        result, error = None, raised
    transport.fault = None
    transport.lost = False
    observed = transport.observed()
    dep = observed.deployments["main"]
    lock = observed.lock
    status = result.status if result is not None else "error"
    after_lock = step >= UPDATE_STEPS.index("take the node lock") + 1

    # No release lost; current and last-good name releases on the node.
    assert scene.release_a in dep.releases
    assert dep.current_release in (scene.release_a, scene.release_b)
    assert dep.last_good in (scene.release_a, scene.release_b)
    assert dep.current_release in dep.releases and dep.last_good in dep.releases

    # What serves: gated, or its being ungated is in the plan.
    notes = recovery_notes(lock, dep, "main")
    planned = plan(release_of(scene.b), dep)
    warned = result is not None and any("gate mark" in w or "may serve ungated" in w
                                        for d in result.deployments for w in d.warnings)
    audit_step = label in ("append the audit line", "append to the audit log")
    if dep.running and dep.ungated:
        assert status in ("interrupted", "error") or kind in ("lost", "timeout") or warned, \
            (status, result and result.to_json())
        assert any("ungated" in reason for reason in (*planned.reasons, *notes))
    if status == "deployed":
        assert dep.current_release == dep.running_release == scene.release_b
        # last-good moves with the gate mark (a failed mark is a warning).
        assert dep.last_good == scene.release_b or warned
    if status == "rolled_back":
        assert dep.running_release == scene.release_a and (not dep.ungated or warned)
        assert dep.current_release == scene.release_a
        assert result is not None and result.deployments[0].restore is not None
    if status == "failed":
        # Failed before the old engine stopped: it still serves, gated.
        assert dep.running_release == scene.release_a and not dep.ungated

    # The lock: released, or left marked so that the plan names it.
    if lock is not None:
        assert notes and notes[0].startswith("repair: ")
        if status == "interrupted":
            assert lock.abandoned and lock.phase is not None
            assert "gave up" in notes[0]
        else:
            assert kind in ("lost", "error", "timeout", "interrupt"), (status, lock)
    elif status == "interrupted":
        pytest.fail("an interrupted rollout must leave the lock, marked abandoned")

    # The audit log has the attempt's line whenever the node could still be written.
    if after_lock and kind != "lost" and status not in ("deployed", "error") and not (
            audit_step and kind in ("error", "interrupt")):
        last = audit_lines(scene)[-1]
        assert last[4] == scene.release_b and last[5] == status, last

    # The next deploy repairs: after `unlock LOCK_ID` if the lock had to stay.
    try:
        again = deploy(scene.b, transport)
    except LockHeld as held:
        assert lock is not None and lock.lock_id is not None
        assert lock.lock_id in str(held) and "servefleet unlock" in str(held)
        assert force_unlock(cast(SshTransport, transport), lock.lock_id) == "removed"
        again = deploy(scene.b, transport)
    assert again.status in ("deployed", "unchanged"), again.to_json()
    final = transport.observed()
    if final.lock is not None:
        # The node already ran B, gated: nothing to deploy, and a lock left by a rollout
        # that lost the node after its switch. The deploy names it; its id removes it.
        assert again.status == "unchanged"
        [warning] = again.deployments[0].warnings
        assert final.lock.lock_id is not None and final.lock.lock_id in warning
        assert force_unlock(cast(SshTransport, transport), final.lock.lock_id) == "removed"
        final = transport.observed()
    done = final.deployments["main"]
    assert final.lock_owner is None
    assert done.current_release == done.last_good == done.running_release == scene.release_b
    assert not done.ungated
    assert scene.release_a in done.releases
    assert error is None or after_lock is False or kind in ("lost", "interrupt", "error",
                                                           "timeout")


def test_a_failed_repair_restores_the_last_release_that_passed_its_gate(scene: Scene) -> None:
    assert deploy(scene.b, scene.transport).status == "deployed"
    edited = Path(scene.b.nodes[NODE].base_dir) / "main" / "releases" / scene.release_b
    compose = edited / "compose.yaml"
    compose.write_text(compose.read_text() + "# tuned by hand\n")
    result = deploy(scene.b, scene.transport, failing=frozenset({scene.release_b}))
    [dep_result] = result.deployments
    assert dep_result.plan is not None and dep_result.plan.repair
    assert dep_result.status == "rolled_back", dep_result.to_json()
    assert dep_result.restore is not None and dep_result.restore.release_id == scene.release_a
    dep = dep_of(scene)
    assert dep.running_release == dep.current_release == dep.last_good == scene.release_a
    assert not dep.ungated
    assert any(".edited-" in r for r in dep.releases)  # the hand-edited copy is kept aside
    assert audit_lines(scene)[-1][5] == "rolled_back"


def test_a_failed_gate_restores_and_gates_the_old_engine(scene: Scene) -> None:
    result = deploy(scene.b, scene.transport, failing=frozenset({scene.release_b}))
    [dep_result] = result.deployments
    assert dep_result.status == "rolled_back"
    assert dep_result.failure is not None and dep_result.failure.phase == "health"
    dep = dep_of(scene)
    assert dep.running_release == dep.current_release == scene.release_a
    assert not dep.ungated
    assert scene.transport.docker_state()["pulls_during_up"] == 0  # the restore never pulls


def test_a_prune_failure_after_the_switch_is_a_warning(scene: Scene) -> None:
    scene.transport.fault = Fault(UPDATE_STEPS.index("prune old releases"), "error")
    result = deploy(scene.b, scene.transport)
    [dep_result] = result.deployments
    assert dep_result.status == "deployed"
    assert dep_result.warnings and "prune old releases failed" in dep_result.warnings[0]
    dep = dep_of(scene)
    assert dep.running_release == dep.current_release == scene.release_b and not dep.ungated


def test_second_signal_during_the_boot_gate_is_planned_as_a_repair(scene: Scene) -> None:
    scene.transport.fault = Fault(UPDATE_STEPS.index("follow the boot log"), "sigterm-twice")
    result = deploy(scene.b, scene.transport)
    assert result.status == "interrupted"
    lock = scene.transport.observed().lock
    assert lock is not None and lock.phase == "boot" and lock.release == scene.release_b
    dep = dep_of(scene)
    [note] = recovery_notes(lock, dep, "main")
    assert note.startswith(f"repair: gave up during the boot gate at {lock.phase_at}")
    assert f"engine {scene.release_b} ungated" in note
    assert audit_lines(scene)[-1][5] == "interrupted"


def test_restore_candidate_never_picks_the_failed_release() -> None:
    dep = ObservedDeployment(name="main", current_release="b", last_good="b",
                             previous_release="a", releases=("a", "b"))
    assert restore_candidate(dep, "b") == "a"
    assert restore_candidate(dep, "c") == "b"
    gone = dep.model_copy(update={"releases": ("b",)})
    assert restore_candidate(gone, "b") is None
    assert restore_candidate(None, "b") is None


def test_a_signal_during_the_pull_leaves_the_old_engine_untouched(scene: Scene) -> None:
    """The signal arrives while the images are pulled: the abort is seen at the start of
    the stop, before anything stopped, so nothing is restored (re-gating an engine that
    never stopped would read a boot log long past, fail, and stop the healthy engine)."""
    before = scene.transport.docker_state()
    scene.transport.fault = Fault(UPDATE_STEPS.index("pull the images"), "sigterm")
    result = deploy(scene.b, scene.transport)
    [dep_result] = result.deployments
    assert dep_result.status == "failed", dep_result.to_json()
    assert dep_result.failure is not None
    assert dep_result.failure.failure_class == "interrupted"
    assert dep_result.restore is None
    assert_old_engine_untouched(scene)
    assert scene.transport.docker_state()["containers"] == before["containers"]


def test_a_failed_before_stop_hook_leaves_the_old_engine_serving(scene: Scene) -> None:
    said: list[str] = []

    def stage(call: HookCall) -> None:
        # What a hook sees: the release about to replace the one serving, while it serves.
        assert call.target.release_id == scene.release_b
        [running] = [c for c in call.runtime.containers("main") if c.running]
        assert running.release_id == scene.release_a
        call.say("3 of 4 files cached")
        said.append("ran")
        raise ConfigError("weights: shard 4 of 4 failed its sha256")

    result = deploy(scene.b, scene.transport,
                    hooks=RolloutHooks(before_stop=(Hook("stage-weights", stage),)))
    [dep_result] = result.deployments
    assert said == ["ran"]
    assert dep_result.status == "failed", dep_result.to_json()
    assert dep_result.failure is not None
    assert dep_result.failure.phase == "stage-weights"
    assert dep_result.failure.message == "weights: shard 4 of 4 failed its sha256"
    assert dep_result.restore is None
    assert_old_engine_untouched(scene)
    assert scene.transport.observed().lock_owner is None


def test_a_failed_after_gate_hook_restores_the_old_release(scene: Scene) -> None:
    seen: list[str | None] = []

    def join(call: HookCall) -> None:
        # After the gate, before the switch: the new engine serves, current is still A.
        assert call.report is not None and call.report.ok
        [running] = [c for c in call.runtime.containers("main") if c.running]
        seen.append(running.release_id)
        raise ConfigError("gateway: the new engine was not taken into the pool")

    result = deploy(scene.b, scene.transport,
                    hooks=RolloutHooks(after_gate=(Hook("gateway-join", join),)))
    [dep_result] = result.deployments
    assert seen == [scene.release_b]
    assert dep_result.status == "rolled_back", dep_result.to_json()
    assert dep_result.failure is not None and dep_result.failure.phase == "gateway-join"
    assert dep_result.restore is not None and dep_result.restore.ok
    labels = scene.transport.labels
    assert f"switch current to {scene.release_b}" not in labels
    dep = dep_of(scene)
    assert dep.running_release == dep.current_release == dep.last_good == scene.release_a


def test_after_restore_hooks_run_once_the_old_release_serves_again(scene: Scene) -> None:
    """A gateway re-admits the node only when the restore passed its gate; a rollout that
    failed before the stop gives back what its drain took at once."""
    calls: list[tuple[str, str]] = []

    def readmit(call: HookCall) -> None:
        [running] = [c for c in call.runtime.containers("main") if c.running]
        calls.append((call.node, running.release_id or ""))

    def refuse(call: HookCall) -> None:
        raise ConfigError("gateway: the new engine was not taken into the pool")

    result = deploy(scene.b, scene.transport, hooks=RolloutHooks(
        after_gate=(Hook("gateway-admit", refuse),),
        after_restore=(Hook("gateway-admit", readmit),)))
    [dep_result] = result.deployments
    assert dep_result.status == "rolled_back" and dep_result.restore is not None
    assert calls == [(scene.transport.node.name, scene.release_a)]

    def fail_before_stop(call: HookCall) -> None:
        raise ConfigError("gateway: last engine of its route")

    calls.clear()
    result = deploy(scene.b, scene.transport, hooks=RolloutHooks(
        before_stop=(Hook("gateway-drain", fail_before_stop),),
        after_restore=(Hook("gateway-admit", readmit),)))
    [dep_result] = result.deployments
    assert dep_result.status == "failed" and dep_result.restore is None
    assert calls == [(scene.transport.node.name, scene.release_a)]
    assert_old_engine_untouched(scene)

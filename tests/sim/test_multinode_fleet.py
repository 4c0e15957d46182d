"""One engine across sim-spark-1 (head) and sim-spark-2 (headless worker), the stand-in vLLM
on both (``Pulumi.sim-pair.yaml``): deployed and gated as one unit, a flag switched on both
ranks as one release, a fault on the worker restoring both, and a mismatched pair refused
by validation."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from servefleet.adapters.multinode import MultiNodeResult, MultiNodeRollout, deploy_multinode
from servefleet.adapters.rollout import Restore, observe_node
from servefleet.core.project import Project, load_project
from servefleet.core.rules import Severity, validate
from servefleet.sim.testbed import FleetHandle

pytestmark = [pytest.mark.fleet]

SECRETS = {"HF_TOKEN": "hf_multinode-fleet-secret-value"}
NODES = ("sim-spark-1", "sim-spark-2")
DEP = "pair"
PROFILE = "qwen36-fp8-tp2"


def wipe(fleet: FleetHandle, project: Project) -> None:
    """Remove the pair's containers and folders from both nodes."""
    fleet.remove_deployment(project, DEP, NODES)


@pytest.fixture(scope="module")
def base(sim_fleet: FleetHandle) -> Iterator[Project]:
    project = load_project(sim_fleet.project_dir, "sim-pair")
    wipe(sim_fleet, project)
    yield project
    (sim_fleet.node_files(NODES[1]).control_dir / "fault").unlink(missing_ok=True)
    wipe(sim_fleet, project)


def with_seqs(project: Project, seqs: int) -> Project:
    """The project with the pair's profile at ``max_num_seqs`` = ``seqs``."""
    profile = project.profiles[PROFILE]
    assert profile.vllm is not None
    changed = profile.model_copy(update={"vllm": profile.vllm.model_copy(
        update={"max_num_seqs": seqs})})
    return dataclasses.replace(project, profiles={**project.profiles, PROFILE: changed})


def current(project: Project, node: str) -> str | None:
    observed = observe_node(project, node, [DEP]).deployments.get(DEP)
    return observed.current_release if observed else None


def test_pair_deploys_switches_and_restores_as_one(base: Project,
                                                   sim_fleet: FleetHandle) -> None:
    first: MultiNodeResult = deploy_multinode(with_seqs(base, 8), DEP, SECRETS)
    assert first.status == "deployed", first.to_json()
    a = first.release_id
    assert [current(base, n) for n in NODES] == [a, a]
    assert first.ranks[0].health is not None and first.ranks[0].health.ok
    worker = first.ranks[1].health
    assert worker is not None and worker.ok, worker
    assert any(c.fact == "NCCL transport" and c.verdict == "pass" for c in worker.checks)

    # One flag: one new release on both ranks.
    second = deploy_multinode(with_seqs(base, 16), DEP, SECRETS)
    assert second.status == "deployed", second.to_json()
    b = second.release_id
    assert b != a and [current(base, n) for n in NODES] == [b, b]

    # The worker's node fails its next boot: both ranks come back on b.
    fault = sim_fleet.node_files(NODES[1]).control_dir / "fault"

    class FaultThenRestore(MultiNodeRollout):
        def _restore(self) -> Restore:
            fault.unlink(missing_ok=True)  # the restore boots a healthy worker
            return super()._restore()

    fault.write_text("crash_after_boot\n")
    try:
        third = deploy_multinode(with_seqs(base, 24), DEP, SECRETS, runner=FaultThenRestore)
    finally:
        fault.unlink(missing_ok=True)
    assert third.status == "rolled_back", third.to_json()
    assert third.failure is not None
    assert any(node in third.failure.message for node in NODES), third.failure
    assert third.restore is not None and third.restore.release_id == b
    assert [current(base, n) for n in NODES] == [b, b]


def test_a_mismatched_pair_is_refused_in_one_line_naming_both(base: Project) -> None:
    worker = base.nodes[NODES[1]]
    odd = dataclasses.replace(base, nodes={**base.nodes, NODES[1]: worker.model_copy(
        update={"driver_version": "575.57.08"})})
    errors = [str(f) for f in validate(odd) if f.severity is Severity.ERROR]
    assert any(NODES[0] in line and NODES[1] in line and "driver" in line
               for line in errors), errors

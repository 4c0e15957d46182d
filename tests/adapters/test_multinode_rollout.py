"""An engine spanning two nodes rolled out as one unit, against two fake nodes (real remote
scripts over throw-away folders, a stand-in docker): success, a worker or head failure
restoring both ranks, lock contention, and an interruption."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from fake_node import FakeGateRollout, FakeNodeTransport, Fault, fake_runtime
from loopback_sshd import free_port

from servefleet.adapters import remote
from servefleet.adapters.multinode import MultiNodeResult, MultiNodeRollout, Rank
from servefleet.adapters.observe import observe_command, parse_observed
from servefleet.adapters.rollout import Abort, StepFailed
from servefleet.core.project import Project
from servefleet.core.render.ranks import MultiNodeRelease, render_multinode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from multinode_pair import build

from servefleet.core.project import load_project

NODES = ("dgx-spark-1", "dgx-spark-2")


class FakeWorkers(MultiNodeRollout):
    """Workers 'join' when their container runs the target release, unless the release is
    in ``failing``."""

    failing: frozenset[str] = frozenset()

    def worker_joined(self, rank: Rank, since: str, deadline: float) -> tuple[str, ...]:
        transport = cast(FakeGateRollout, rank.rollout).transport
        deployment = rank.target.deployment
        argv, stdin = observe_command(transport.node, [deployment])
        text = transport.run(argv, stdin=stdin, what="follow the worker log").text()
        seen = parse_observed(rank.node, text, [deployment]).deployments[deployment]
        running = [c for c in seen.containers if c.running]
        release = running[0].release_id if running else None
        if release is None or release in self.failing:
            raise StepFailed("boot", f"{rank.node}: the worker never joined (injected)",
                             "worker_not_joined")
        return (f"INFO Launching vLLM (v0.32.0) headless multiproc executor, with head node "
                f"address 10.0.0.1:29501 for torch.distributed process group. ({release})",)


class ShowsBig:
    """What each fake node (``transports``) shows of the ``big`` deployment."""

    transports: dict[str, FakeNodeTransport]

    def running(self, node: str) -> str | None:
        dep = self.transports[node].observed("big").deployments.get("big")
        return dep.running_release if dep else None

    def current(self, node: str) -> str | None:
        dep = self.transports[node].observed("big").deployments.get("big")
        return dep.current_release if dep else None


@dataclasses.dataclass
class Pair(ShowsBig):
    root: Path
    ports: tuple[int, int]
    transports: dict[str, FakeNodeTransport]

    def project(self, port: int) -> Project:
        project = load_project(self.root / "project", "pair")
        nodes = {**project.nodes}
        for name in NODES:
            nodes[name] = nodes[name].model_copy(update={
                "base_dir": str(self.root / name / "srv"), "ports": list(self.ports)})
        dep = project.stack.multi_node[0].model_copy(update={"port": port})
        stack = project.stack.model_copy(update={"multi_node": [dep]})
        return dataclasses.replace(project, nodes=nodes, stack=stack)

    def release(self, port: int) -> tuple[Project, MultiNodeRelease]:
        project = self.project(port)
        return project, render_multinode(project, project.stack.multi_node[0], None,
                                         require_secrets=False)

    def deploy(self, port: int, *, failing_head: frozenset[str] = frozenset(),
               failing_workers: frozenset[str] = frozenset(),
               abort: Abort | None = None) -> MultiNodeResult:
        project, release = self.release(port)
        abort = abort or Abort()
        rollouts = {}
        for name in NODES:
            transport = self.transports[name]
            transport.node = project.nodes[name]
            transport.abort = abort
            rollout = FakeGateRollout(project, project.nodes[name],
                                      fake_runtime(transport), abort=abort)
            rollout.failing = failing_head
            rollouts[name] = rollout
        runner = FakeWorkers(release, rollouts)
        runner.failing = failing_workers
        return runner.deploy()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    build(tmp_path / "project")
    ports = (free_port(), free_port())
    probe = Pair(tmp_path, ports, {})
    project = probe.project(ports[0])
    transports = {name: FakeNodeTransport(project.nodes[name], tmp_path / name / "node")
                  for name in NODES}
    yield Pair(tmp_path, ports, transports)


def test_deploy_then_a_flag_switch_moves_both_ranks_as_one_release(pair: Pair) -> None:
    first = pair.deploy(pair.ports[0])
    assert first.status == "deployed", first.to_json()
    a = first.release_id
    assert [pair.current(n) for n in NODES] == [a, a]
    assert [pair.running(n) for n in NODES] == [a, a]
    again = pair.deploy(pair.ports[0])
    assert again.status == "unchanged"
    second = pair.deploy(pair.ports[1])
    assert second.status == "deployed", second.to_json()
    b = second.release_id
    assert b != a
    assert [pair.current(n) for n in NODES] == [b, b]
    # The worker was started before the head.
    labels = pair.transports["dgx-spark-2"].labels
    started = labels.index("start the engine")
    # …and its container read again once started (the worker's health rows).
    assert "observe the node" in labels[started:]
    for name in NODES:
        assert pair.transports[name].observed("big").lock_owner is None


@pytest.mark.parametrize("where", ["worker", "head"])
def test_a_failure_on_one_rank_restores_both(pair: Pair, where: str) -> None:
    a = pair.deploy(pair.ports[0]).release_id
    _, release_b = pair.release(pair.ports[1])
    failing = frozenset({release_b.release_id})
    result = pair.deploy(pair.ports[1], failing_workers=failing if where == "worker"
                         else frozenset(), failing_head=failing if where == "head"
                         else frozenset())
    assert result.status == "rolled_back", result.to_json()
    assert result.failure is not None
    failed_node = "dgx-spark-2" if where == "worker" else "dgx-spark-1"
    assert failed_node in result.failure.message
    assert result.restore is not None and result.restore.release_id == a
    assert [pair.current(n) for n in NODES] == [a, a]
    assert [pair.running(n) for n in NODES] == [a, a]
    assert [r.status for r in result.ranks] == ["rolled_back", "rolled_back"]


def test_first_deploy_that_fails_leaves_nothing_running(pair: Pair) -> None:
    _, release = pair.release(pair.ports[0])
    result = pair.deploy(pair.ports[0], failing_workers=frozenset({release.release_id}))
    assert result.status == "restore_failed"
    assert [pair.running(n) for n in NODES] == [None, None]


def test_a_lock_held_on_the_second_node_releases_the_first(pair: Pair) -> None:
    pair.deploy(pair.ports[0])
    other = pair.transports["dgx-spark-2"]
    other.sh(remote.acquire_lock(str(pair.root / "dgx-spark-2" / "srv"),
                                 "someone@else pid=1 since=now op=deploy id=other-lock"))
    result = pair.deploy(pair.ports[1])
    assert result.status == "failed"
    assert result.failure is not None and result.failure.failure_class == "lock_held"
    assert pair.transports["dgx-spark-1"].observed("big").lock_owner is None
    assert pair.current("dgx-spark-1") == pair.current("dgx-spark-2")
    assert "someone@else" in result.failure.message


def test_an_interruption_restores_both(pair: Pair) -> None:
    a = pair.deploy(pair.ports[0]).release_id
    transport = pair.transports["dgx-spark-2"]
    transport.labels.clear()
    # SIGTERM arrives while the worker's old engine is being stopped.
    transport.fault = Fault(step=7, kind="sigterm")
    result = pair.deploy(pair.ports[1])
    transport.fault = None
    assert transport.labels[7] == "record the rollout phase"  # the worker's stop phase
    assert result.status == "rolled_back", result.to_json()
    assert result.failure is not None and result.failure.failure_class == "interrupted"
    assert [pair.current(n) for n in NODES] == [a, a]
    assert [pair.running(n) for n in NODES] == [a, a]
    for name in NODES:
        assert pair.transports[name].observed("big").lock_owner is None


def test_deploy_multinode_names_an_unknown_deployment(pair: Pair) -> None:
    from servefleet.adapters.multinode import deploy_multinode
    from servefleet.core.errors import ConfigError

    with pytest.raises(ConfigError, match="servefleet:multiNode has no deployment 'nope' "
                       r"\(known: big\)"):
        deploy_multinode(pair.project(pair.ports[0]), "nope")

"""Planning an engine spanning two nodes: one item, a line per rank, read-only; and which
engines a command's NODES select."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_multinode_rollout import NODES, Pair, pair  # noqa: F401  (the fixture)

from servefleet.adapters.multinode import MultiNodePlan, plan_multinode, select_multinode
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.errors import ConfigError
from servefleet.core.models import Node
from servefleet.core.project import Project
from servefleet.core.secrets import SecretMask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from multinode_pair import load


def plan_of(fleet: Pair, port: int) -> tuple[Project, list[MultiNodePlan]]:
    project = fleet.project(port)

    def factory(node: Node, mask: SecretMask) -> SshTransport:
        transport = fleet.transports[node.name]
        transport.node = node
        return transport  # type: ignore[return-value]

    plans, errors = plan_multinode(project, project.stack.multi_node, None,
                                   transport_factory=factory)
    assert errors == []
    return project, plans


def test_plan_is_one_item_with_a_line_per_rank(pair: Pair) -> None:  # noqa: F811
    _, plans = plan_of(pair, pair.ports[0])
    [one] = plans
    assert one.action == "create" and one.changes
    lines = one.summary_lines()
    assert lines[0].startswith(f"big@{NODES[0]}+{NODES[1]}: create: release "
                               f"{one.release_id} on every rank")
    ranks = [line for line in lines if line.startswith("  rank ")]
    assert ranks == [f"  rank 0 head {NODES[0]}: create (none -> {one.release_id})",
                     f"  rank 1 worker {NODES[1]}: create (none -> {one.release_id})"]
    data = one.to_json()
    assert [(r["rank"], r["role"], r["node"], r["release_id"]) for r in data["ranks"]] == [
        (0, "head", NODES[0], one.release_id), (1, "worker", NODES[1], one.release_id)]
    # Read-only: nothing was uploaded or started.
    assert pair.running(NODES[0]) is None and pair.current(NODES[1]) is None


def test_plan_after_a_deploy_is_unchanged_and_a_change_moves_every_rank(pair: Pair) -> None:  # noqa: F811
    deployed = pair.deploy(pair.ports[0])
    assert deployed.status == "deployed", deployed.to_json()
    _, [same] = plan_of(pair, pair.ports[0])
    assert same.action == "unchanged" and not same.changes
    assert same.release_id == deployed.release_id
    _, [moved] = plan_of(pair, pair.ports[1])
    assert moved.action == "update"
    assert [i.action for i in moved.items] == ["update", "update"]
    lines = moved.summary_lines()
    ranks = [line for line in lines if line.startswith("  rank ")]
    assert ranks == [
        f"  rank 0 head {NODES[0]}: update ({deployed.release_id} -> {moved.release_id})",
        f"  rank 1 worker {NODES[1]}: update ({deployed.release_id} -> {moved.release_id})"]
    # Each rank says what changes in it: the API port both carry.
    assert sum(str(pair.ports[1]) in line for line in lines) >= 2


def test_nodes_select_every_engine_with_a_rank_on_them(tmp_path: Path) -> None:
    project = load(tmp_path, extra_config={"servefleet:profiles": {"rtx5090":
                                                                   "qwen36-q4-llamacpp"}})
    assert select_multinode(project, None) == (None, project.stack.multi_node)
    assert select_multinode(project, ["dgx-spark-2"]) == ([], project.stack.multi_node)
    assert select_multinode(project, ["rtx5090"]) == (["rtx5090"], [])
    with pytest.raises(ConfigError, match=r"nowhere: not in stack 'pair' \(its nodes: "
                       r"rtx5090, dgx-spark-1, dgx-spark-2\)"):
        select_multinode(project, ["nowhere"])
    only_pair = load(tmp_path / "only")
    assert select_multinode(only_pair, None) == ([], only_pair.stack.multi_node)

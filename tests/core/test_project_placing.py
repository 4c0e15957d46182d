"""``Project.placing``: what one deploy call puts on one node, whatever the stack file says."""

from __future__ import annotations

from servefleet.core.models import Deployment, MultiNodeDeployment
from servefleet.core.project import load_project
from tests.reference_project import REPO_ROOT


def test_placing_puts_exactly_the_given_deployments_on_the_node() -> None:
    project = load_project(REPO_ROOT, "reference")
    assert {d.node for d in project.deployments()} == {"dgx-spark-1", "dgx-spark-2", "rtx5090"}
    placed = project.placing("dgx-spark-2", [
        Deployment(node="elsewhere", name="main", profile="qwen36-fp8", port=8000),
        Deployment(node="dgx-spark-2", name="long", profile="qwen36-w8a16", port=8001)])
    assert [(d.node, d.name, d.profile, d.port) for d in placed.deployments()] == [
        ("dgx-spark-2", "main", "qwen36-fp8", 8000),
        ("dgx-spark-2", "long", "qwen36-w8a16", 8001)]
    # Everything else is the project as loaded: nodes, profiles, the stack's settings.
    assert placed.nodes == project.nodes and placed.profiles == project.profiles
    assert placed.stack.strategy == project.stack.strategy
    assert project.deployments() != placed.deployments()  # the original is unchanged


def test_placing_multinode_keeps_one_engine_spanning_nodes() -> None:
    project = load_project(REPO_ROOT, "reference")
    assert project.stack.multi_node == []
    big = MultiNodeDeployment(name="big", profile="qwen36-fp8-tp2",
                              nodes=["dgx-spark-1", "dgx-spark-2"])
    placed = project.placing_multinode(big)
    assert placed.stack.multi_node == [big]
    assert placed.deployments() == project.deployments()  # the per-node ones stay

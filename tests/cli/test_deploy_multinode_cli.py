"""``plan``, ``deploy`` and ``rollback`` of an engine spanning two nodes through click,
without a fleet: the shipped Sparks pin no host key, so nothing is ever sent to them (the
rollout itself runs in tests/adapters/test_multinode_rollout.py and the fleet test)."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from multinode_pair import build

Run = Callable[..., Result]
ENV = {"HF_TOKEN": "hf_x_pair_cli"}


@pytest.fixture
def run(run_cli: Callable[..., Result], tmp_path: Path) -> Run:
    root = build(tmp_path / "project", extra_config={
        "servefleet:profiles": {"rtx5090": "qwen36-q4-llamacpp"}})
    return functools.partial(run_cli, project=root, stack="pair")


def test_plan_json_names_the_ranks_it_cannot_read(run: Run) -> None:
    result = run("plan", "--json", env=ENV)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["multi_node"] == []  # no plan from half a picture
    assert {e["node"] for e in data["errors"]} == {"rtx5090", "dgx-spark-1", "dgx-spark-2"}
    assert all("no host key is pinned" in e["error"] for e in data["errors"])


def test_plan_of_a_rank_node_selects_only_that_engine(run: Run) -> None:
    result = run("plan", "dgx-spark-2", "--json", env=ENV)
    assert result.exit_code == 1
    assert {e["node"] for e in json.loads(result.output)["errors"]} == {"dgx-spark-1",
                                                                        "dgx-spark-2"}


def test_plan_of_an_unknown_node_lists_the_ranks_too(run: Run) -> None:
    result = run("plan", "nowhere", env=ENV)
    assert result.exit_code == 1
    assert "nowhere: not in stack 'pair' (its nodes: rtx5090, dgx-spark-1, dgx-spark-2)" \
        in result.output


def test_deploy_json_reports_each_engine_spanning_nodes(run: Run) -> None:
    result = run("deploy", "--yes", "--json", env=ENV)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["ok"] is False
    assert [n["node"] for n in data["nodes"]] == ["rtx5090"]
    [big] = data["multi_node"]
    assert big["deployment"] == "big@dgx-spark-1+dgx-spark-2"
    assert big["status"] == "failed" and big["ok"] is False


def test_deploy_of_a_rank_node_deploys_only_that_engine(run: Run) -> None:
    result = run("deploy", "dgx-spark-1", "--yes", "--json", env=ENV)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["nodes"] == []
    assert [m["deployment"] for m in data["multi_node"]] == ["big@dgx-spark-1+dgx-spark-2"]


def test_rollback_of_one_rank_is_refused_with_the_fix(run: Run) -> None:
    result = run("rollback", "dgx-spark-2", "-d", "big", env=ENV)
    assert result.exit_code == 1
    assert ("Pulumi.pair.yaml: servefleet:multiNode.big: dgx-spark-2 runs a rank of "
            "big@dgx-spark-1+dgx-spark-2; rolling back one rank is refused") in result.output
    assert "servefleet deploy dgx-spark-1" in result.output


def test_health_reports_the_engine_as_one_entry_with_its_ranks(run: Run) -> None:
    result = run("health", "dgx-spark-2", "--json", env=ENV)
    assert result.exit_code == 1
    [entry] = json.loads(result.output)["deployments"]
    assert (entry["node"], entry["deployment"]) == ("dgx-spark-1+dgx-spark-2", "big")
    assert [r["fact"] for r in entry["checks"] if r["fact"].startswith("rank")] == [
        "rank 0 head dgx-spark-1", "rank 1 worker dgx-spark-2"]


def test_drift_reports_the_engine_as_one_entry_with_its_ranks(run: Run) -> None:
    result = run("drift", "--json", "--no-probe", "--timeout", "5", env=ENV)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert set(data["nodes"]) == {"rtx5090", "big@dgx-spark-1+dgx-spark-2"}
    items = data["nodes"]["big@dgx-spark-1+dgx-spark-2"]["items"]
    assert [(i["node"], i["message"].split(":")[0]) for i in items] == [
        ("dgx-spark-1", "rank 0 head"), ("dgx-spark-2", "rank 1 worker")]

"""Rules on engines spanning nodes, and the stack file's ``servefleet:multiNode``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from multinode_pair import load

from servefleet.core.errors import ConfigError
from servefleet.core.rules.registry import validate


def _errors(project) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{f.rule}: {f}" for f in validate(project) if f.severity.value == "error"]


def test_tp2_across_two_sparks_is_valid(tmp_path: Path) -> None:
    project = load(tmp_path)
    assert _errors(project) == []
    dep = project.stack.multi_node[0]
    assert (dep.head, dep.workers, dep.key) == ("dgx-spark-1", ["dgx-spark-2"],
                                                "big@dgx-spark-1+dgx-spark-2")


def test_mismatched_pair_is_one_line_naming_both_nodes(tmp_path: Path) -> None:
    project = load(tmp_path, node_changes={"dgx-spark-2": {"driver_version": "580.95"}})
    errors = [e for e in _errors(project) if e.startswith("multinode-ranks-differ")]
    assert len(errors) == 1
    line = errors[0]
    assert "\n" not in line
    assert "dgx-spark-1 has driver 580.142 but dgx-spark-2 has driver 580.95" in line
    assert "Pulumi.pair.yaml: servefleet:multiNode.big.nodes" in line


def test_tp_times_pp_must_equal_the_gpus_spanned(tmp_path: Path) -> None:
    project = load(tmp_path, entry={"profile": "qwen36-fp8-tp2", "pipelineParallel": 2,
                                    "nodes": ["dgx-spark-1", "dgx-spark-2"]})
    errors = [e for e in _errors(project) if e.startswith("multinode-parallel-size")]
    assert len(errors) == 1
    assert "= 4 GPUs, but dgx-spark-1 + dgx-spark-2 have 2" in errors[0]


def test_missing_fast_link_names_the_node_file(tmp_path: Path) -> None:
    project = load(tmp_path)
    nodes = dict(project.nodes)
    nodes["dgx-spark-2"] = nodes["dgx-spark-2"].model_copy(update={"fast_link": None})
    bare = type(project)(**{**project.__dict__, "nodes": nodes})
    errors = [e for e in _errors(bare) if e.startswith("multinode-fast-link-missing")]
    assert len(errors) == 1 and "nodes/dgx-spark-2.yaml: fast_link:" in errors[0]


def test_driver_590_on_gb10_is_refused_unless_eager(tmp_path: Path) -> None:
    changes = {"dgx-spark-1": {"driver_version": "590.44"},
               "dgx-spark-2": {"driver_version": "590.44"}}
    errors = _errors(load(tmp_path / "a", node_changes=changes))
    assert sum(e.startswith("multinode-driver-deadlock") for e in errors) == 2
    eager = load(tmp_path / "b", node_changes=changes, profile={
        "extends": "qwen36-fp8", "vllm": {"tensor_parallel_size": 2, "enforce_eager": True}})
    assert not any(e.startswith("multinode-driver-deadlock") for e in _errors(eager))


def test_ports_clash_with_a_single_node_deployment(tmp_path: Path) -> None:
    project = load(tmp_path, extra_config={"servefleet:profiles": {
        "dgx-spark-1": {"other": {"profile": "qwen36-fp8", "port": 8000}}}})
    errors = [e for e in _errors(project) if e.startswith("multinode-ports")]
    assert any("port 8000 on dgx-spark-1 is also used by other" in e for e in errors)
    same = load(tmp_path / "b", entry={"profile": "qwen36-fp8-tp2", "masterPort": 8000,
                                       "nodes": ["dgx-spark-1", "dgx-spark-2"]})
    assert any("masterPort 8000 is also the API port" in e for e in _errors(same))


def test_memory_per_rank(tmp_path: Path) -> None:
    project = load(tmp_path, profile={"extends": "qwen36-fp8", "vllm": {
        "tensor_parallel_size": 2}, "model": {"weights_gib": 300}})
    errors = [e for e in _errors(project) if e.startswith("multinode-memory-per-rank")]
    assert errors and "150.0 GiB of weights (300 GiB / 2)" in errors[0]


def test_stack_file_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path / "a", entry={"profile": "qwen36-fp8-tp2", "nodes": ["dgx-spark-1"]})
    assert "Pulumi.pair.yaml: servefleet:multiNode.big.nodes" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        load(tmp_path / "b", entry={"profile": "qwen36-fp8-tp2", "nodes": [
            "dgx-spark-1", "dgx-spark-9"], "masterport": 1})
    assert "unknown setting masterport" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        load(tmp_path / "c", entry={"profile": "qwen36-fp8-tp2", "nodes": [
            "dgx-spark-1", "dgx-spark-9"]})
    assert "servefleet:multiNode.big.nodes: no node dgx-spark-9" in str(caught.value)


def test_single_node_tp2_rule_points_at_multinode(tmp_path: Path) -> None:
    project = load(tmp_path, extra_config={"servefleet:profiles": {
        "dgx-spark-2": {"solo": {"profile": "qwen36-fp8-tp2", "port": 8001}}}})
    errors = [e for e in _errors(project) if e.startswith("tensor-parallel-exceeds-gpus")]
    assert errors and "servefleet:multiNode" in errors[0]

"""What a node's boot does to the files an earlier run left on it (no fleet needed)."""

from __future__ import annotations

from pathlib import Path

from servefleet.core.baselines import BASELINE_FILE
from servefleet.sim import inventory
from servefleet.sim.fleet import reset_control_dir
from servefleet.sim.layout import NodeLayout


def node_left_by_a_run(tmp_path: Path, *, standin: bool) -> NodeLayout:
    node = NodeLayout(tmp_path / "nodes" / "spark-1", tmp_path / "run" / "spark-1")
    node.control_dir.mkdir(parents=True)
    node.base_dir.mkdir(parents=True)
    (node.control_dir / "fault").write_text("oom\n")
    if standin:
        (node.control_dir / inventory.STANDIN_FILE).write_text("vllm\n")
    (node.base_dir / BASELINE_FILE).write_text('{"baselines": {}}')
    return node


def test_a_run_cut_off_under_the_stand_in_leaves_no_stand_in_baselines(
        tmp_path: Path) -> None:
    """Baselines measured on the stand-in would fail the real engine's gate on the next
    boot: they go with the stand-in marker."""
    node = node_left_by_a_run(tmp_path, standin=True)
    reset_control_dir(node)
    assert not node.control_dir.exists()
    assert not (node.base_dir / BASELINE_FILE).exists()


def test_baselines_of_the_real_engine_outlive_a_reboot(tmp_path: Path) -> None:
    """Without the stand-in marker the baselines were measured on the engine that will run
    again: a reboot keeps them (the drift check compares against them)."""
    node = node_left_by_a_run(tmp_path, standin=False)
    reset_control_dir(node)
    assert not node.control_dir.exists()
    assert (node.base_dir / BASELINE_FILE).read_text() == '{"baselines": {}}'


def test_a_node_booted_for_the_first_time_has_nothing_to_reset(tmp_path: Path) -> None:
    node = NodeLayout(tmp_path / "nodes" / "spark-1", tmp_path / "run" / "spark-1")
    reset_control_dir(node)
    assert not node.root.exists()

"""``servefleet probe`` and ``servefleet keyscan`` against the simulated fleet's real sshd."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from servefleet.sim.testbed import FleetHandle


@pytest.fixture()
def gpu_json(sim_fleet: FleetHandle) -> Path:
    return sim_fleet.node_files("sim-5090").gpu_json


def test_keyscan_prints_the_pinned_key(run_cli: Callable[..., Result],
                                       sim_fleet: FleetHandle) -> None:
    result = run_cli("keyscan", "sim-5090", project=sim_fleet.project_dir, stack="sim")
    assert result.exit_code == 0, result.output
    pinned = yaml.safe_load((sim_fleet.project_dir / "nodes/sim/sim-5090.yaml").read_text())
    line = next(x for x in result.stdout.splitlines() if x.startswith("ssh-ed25519 "))
    assert line in pinned["ssh"]["host_keys"]
    assert "fingerprint SHA256:" in result.output


def test_probe_matches_then_reports_a_driver_upgrade(run_cli: Callable[..., Result],
                                                     sim_fleet: FleetHandle,
                                                     gpu_json: Path) -> None:
    args = ["probe", "sim-5090", "--json"]
    result = run_cli(*args, project=sim_fleet.project_dir, stack="sim")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["probe"]["driver_version"] == "580.142"
    assert report["probe"]["gpus"][0]["name"] == "NVIDIA GeForce RTX 5090"

    original = gpu_json.read_text()
    data = json.loads(original)
    data["driver_version"] = "590.10.01"
    gpu_json.write_text(json.dumps(data))
    try:
        result = run_cli(*args, project=sim_fleet.project_dir, stack="sim")
    finally:
        gpu_json.write_text(original)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    (mismatch,) = [m for m in report["mismatches"] if m["field"] == "driver_version"]
    assert (mismatch["expected"], mismatch["observed"]) == ("580.142", "590.10.01")


def test_probe_of_an_unknown_node_is_one_clear_line(run_cli: Callable[..., Result],
                                                    tmp_path: Path) -> None:
    (tmp_path / "nodes").mkdir()
    result = run_cli("probe", "nope", project=tmp_path, stack="sim")
    assert result.exit_code == 1
    assert "no node 'nope' in nodes/" in result.output

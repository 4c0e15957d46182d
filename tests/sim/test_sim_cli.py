"""``servefleet sim``: the commands on the session's fleet, and the root requirement."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

from servefleet.sim.testbed import FleetHandle


@pytest.mark.fleet
def test_up_on_a_running_fleet_and_status(run_cli: Callable[..., Result], sim_fleet: FleetHandle,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVEFLEET_SIM_DIR", str(sim_fleet.config.state_dir))
    monkeypatch.setenv("SERVEFLEET_SIM_STANDIN_DIR", str(sim_fleet.config.standin_dir))
    result = run_cli("sim", "up", project=sim_fleet.project_dir)
    assert result.exit_code == 0, result.output
    assert "sim-spark-1    10.77.1.2    sshd + dockerd" in result.output
    result = run_cli("sim", "status", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {n["name"]: n["address"] for n in report["nodes"]} == {
        "sim-spark-1": "10.77.1.2", "sim-spark-2": "10.77.2.2", "sim-5090": "10.77.3.2"}
    assert all(n["running"] for n in report["nodes"])
    result = run_cli("sim", "status")
    assert result.exit_code == 0
    assert "sim-5090       10.77.3.2    up" in result.output


def test_without_root_says_so(run_cli: Callable[..., Result],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the effective uid the check reads is changed: nothing starts either way.
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    for args in (["sim", "up"], ["sim", "down"]):
        result = run_cli(*args)
        assert result.exit_code == 1
        assert "needs root" in result.output
        assert "sudo servefleet sim" in result.output

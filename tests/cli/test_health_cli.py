"""``servefleet health`` without a fleet: a node nobody answers for, an unknown node. The
command against live engines is tested on the simulated fleet
(tests/adapters/test_health_fleet.py)."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from tests.reference_project import REPO_ROOT

# Any well-formed ed25519 public key: the connection is refused before a key is compared.
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDLNm5MKrm1eiSycIRgkU2xwJHw1VpN2JEZYmgk/hRgb"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """One node on a loopback port where nothing listens, placed with qwen36-fp8."""
    shutil.copytree(REPO_ROOT / "profiles", tmp_path / "profiles")
    (tmp_path / "nodes").mkdir()
    node = {"address": "127.0.0.1",
            "ssh": {"port": closed_port(), "host_keys": [HOST_KEY], "agent": True,
                    "connect_timeout_seconds": 2},
            "arch": "x86_64",
            "gpus": [{"name": "NVIDIA GB10", "memory_gib": 128, "unified_memory": True,
                      "compute_capability": "12.1"}]}
    (tmp_path / "nodes" / "gone.yaml").write_text(yaml.safe_dump(node))
    (tmp_path / "Pulumi.t.yaml").write_text(yaml.safe_dump(
        {"config": {"servefleet:profiles": {"gone": "qwen36-fp8"}}}))
    return tmp_path


@pytest.fixture
def invoke(run_cli: Callable[..., Result], project: Path) -> Callable[..., Result]:
    """``servefleet --project <project> --stack t health ARGS…``."""
    return lambda *args: run_cli("health", *args, project=project, stack="t")


def test_unreachable_node_is_reported_and_exits_1(invoke: Callable[..., Result]) -> None:
    result = invoke("--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.output)
    assert data["ok"] is False
    [entry] = data["deployments"]
    assert (entry["node"], entry["deployment"], entry["checks"]) == ("gone", "main", [])
    assert "gone: cannot reach 127.0.0.1" in entry["error"]
    text = invoke()
    assert text.exit_code == 1
    assert text.output.startswith("gone/main: unreachable: cannot reach 127.0.0.1:")
    assert "UNHEALTHY" not in text.output and "fact" not in text.output  # no empty table
    assert "0 of 1 deployment(s) healthy" in text.output


def test_unknown_node_is_a_config_error(invoke: Callable[..., Result]) -> None:
    result = invoke("elsewhere")
    assert result.exit_code == 1
    assert "elsewhere: not in stack 't'" in result.output
    result = invoke("gone", "-d", "nomtp")
    assert result.exit_code == 1 and "places no deployment named nomtp" in result.output


def test_a_boot_in_progress_exits_3_and_wait_takes_an_optional_limit(
        invoke: Callable[..., Result], monkeypatch: pytest.MonkeyPatch) -> None:
    from servefleet.adapters import node_health
    from servefleet.cli.health import EXIT_BOOTING
    from servefleet.core.health_table import CheckRow, DeploymentHealth

    seen: list[node_health.HealthOptions] = []

    def booting(*_: object, options: node_health.HealthOptions,
                **__: object) -> list[DeploymentHealth]:
        seen.append(options)
        row = CheckRow("boot outcome", "ready", "booting: profiling (40 s of the 900 s "
                       "deadline)", "info")
        return [DeploymentHealth("gone", "main", (row,), boot_phase="profiling")]

    monkeypatch.setattr(node_health, "check_fleet", booting)
    result = invoke()
    assert result.exit_code == EXIT_BOOTING == 3, result.output
    assert "gone/main: booting (profiling)" in result.output
    assert "0 of 1 deployment(s) healthy, 1 still booting" in result.output
    assert json.loads(invoke("--json").output)["deployments"][0]["state"] == "booting"
    invoke("gone", "--wait")
    invoke("--wait", "60")
    assert [(o.wait, o.wait_seconds) for o in seen[2:]] == [(True, None), (True, 60.0)]
    assert not seen[0].wait

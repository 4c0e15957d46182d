"""An operator's folder from ``servefleet init``: its only stack is the default (no
``--stack``), ``drift`` says nothing of a ``sim`` stack, the GB10 sample and the bench
scenarios are there, the next steps lead with ``servefleet deploy`` and say how to get the
Pulumi CLI; a failed deploy never prints ``done``."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

Run = Callable[..., Result]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHWrinkP5271G+hYsu19FVutAVLAaXGxtzVCSx8KdwfB"


@pytest.fixture()
def folder(run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SERVEFLEET_STACK", raising=False)
    monkeypatch.delenv("SERVEFLEET_PROJECT", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    result = run_cli("init", "fleet")
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(tmp_path / "fleet")
    return tmp_path / "fleet"


def _place_spark(folder: Path, port: int) -> None:
    sample = (folder / "nodes/gb10.yaml.sample").read_text()
    (folder / "nodes/spark-1.yaml").write_text(
        sample.replace("address: spark-1.lan", "address: 127.0.0.1")
        .replace("  port: 22\n", f"  port: {port}\n")
        .replace("host_keys: []", f'host_keys: ["{KEY}"]'))
    stack = folder / "Pulumi.home.yaml"
    stack.write_text(stack.read_text().replace("servefleet:profiles: {}",
                                               "servefleet:profiles:\n    spark-1: qwen36-fp8-mtp"))


@pytest.fixture()
def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_only_stack_is_the_default(run_cli: Run, folder: Path) -> None:
    result = run_cli("validate")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("stack home: 0 error(s)")


def test_drift_names_no_sim_stack(run_cli: Run, folder: Path, closed_port: int) -> None:
    _place_spark(folder, closed_port)
    result = run_cli("drift")
    assert result.exit_code == 1  # the node is down
    assert "sim" not in result.output
    assert "stack home: " in result.output


def test_two_stacks_still_need_the_flag(run_cli: Run, folder: Path) -> None:
    (folder / "Pulumi.lab.yaml").write_text((folder / "Pulumi.home.yaml").read_text())
    result = run_cli("validate")
    assert result.exit_code == 1
    assert "Pulumi.sim.yaml: no such stack file" in result.output
    assert run_cli("validate", "--stack", "lab").exit_code == 0


def test_a_failed_deploy_never_says_done(run_cli: Run, folder: Path, closed_port: int) -> None:
    _place_spark(folder, closed_port)
    result = run_cli("deploy", "--yes")
    assert result.exit_code == 1
    assert " done" not in result.output
    assert f"spark-1 failed: cannot reach 127.0.0.1:{closed_port} over SSH after 4 " \
        "attempts" in result.output


def test_gb10_sample_and_scenarios(run_cli: Run, folder: Path) -> None:
    sample = (folder / "nodes/gb10.yaml.sample").read_text()
    for line in ("name: NVIDIA GB10", "unified_memory: true", "cuda_memory_gib: 121.69",
                 "boot_free_gib: 102.2"):
        assert line in sample
    repo = Path(__file__).resolve().parents[2]
    assert (folder / "scenarios/seeds.yaml").read_bytes() == \
        (repo / "scenarios/seeds.yaml").read_bytes()
    _place_spark(folder, 22)
    tune = run_cli("tune", "qwen36-fp8-mtp", "--node", "spark-1", "--target-concurrency", "8")
    assert tune.exit_code == 0, tune.output
    assert "concurrency at 131,072 ≈ 8.2× at 0.45" in tune.output.splitlines()[0]


def test_next_steps_lead_with_deploy_and_say_how_to_get_pulumi(run_cli: Run,
                                                               tmp_path: Path) -> None:
    result = run_cli("init", str(tmp_path / "other"))
    steps = result.output.split("Next steps:\n")[1].splitlines()
    first = next(i for i, s in enumerate(steps) if "servefleet deploy" in s)
    pulumi = next(i for i, s in enumerate(steps) if "pulumi " in s)
    assert first < pulumi
    text = "\n".join(steps)
    assert "the Pulumi CLI is not in the servefleet package" in text
    assert "get.pulumi.com" in text and "scripts/ensure-pulumi" in text
    assert "the passphrase it asks for encrypts the stack's secrets" in text

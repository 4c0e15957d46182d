"""A node written as an operator reads the box: a GB10 with ``memory_gib: 128`` (no CUDA
figure, no ``unified_memory``) or an RTX 5090 with ``memory_gib: 32``. The known-GPU table
fills in what CUDA reports, ``validate`` warns that it did, and ``tune`` says what it says
for the repository's measured GB10 node (seed 001: ≈ 8.2–8.3× at 0.45 with MTP)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from servefleet.core.gpu.known import KNOWN_GPUS, TABLE_SOURCE_PREFIX
from servefleet.core.models import Node
from tests.reference_project import REPO_ROOT

Run = Callable[..., Result]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHWrinkP5271G+hYsu19FVutAVLAaXGxtzVCSx8KdwfB"


def box_node(gpu: str, memory: int, cc: str, arch: str = "aarch64") -> str:
    return (f"address: 192.0.2.10\nssh:\n  user: servefleet\n  agent: true\n"
            f"  host_keys: [\"{KEY}\"]\narch: {arch}\ngpus:\n  - name: {gpu}\n"
            f"    memory_gib: {memory}\n    compute_capability: \"{cc}\"\n"
            "base_dir: /srv/servefleet\nhf_cache: /srv/hf\nports: [8000]\n")


@pytest.fixture()
def folder(run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SERVEFLEET_STACK", raising=False)
    monkeypatch.delenv("SERVEFLEET_PROJECT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert run_cli("init", "fleet").exit_code == 0
    monkeypatch.chdir(tmp_path / "fleet")
    return tmp_path / "fleet"


def concurrency(output: str) -> float:
    found = re.search(r"^# qwen36-fp8-mtp on \S+: now .*≈ ([0-9.]+)× at 0\.45", output, re.M)
    assert found, output
    return float(found.group(1))


def test_a_gb10_written_with_the_box_figure_plans_like_the_measured_one(
        run_cli: Run, folder: Path) -> None:
    (folder / "nodes/box.yaml").write_text(box_node("NVIDIA GB10", 128, "12.1"))
    (folder / "nodes/measured.yaml").write_text(
        (REPO_ROOT / "nodes/dgx-spark-1.yaml").read_text().replace("host_keys: []",
                                                                   f'host_keys: ["{KEY}"]'))
    box = run_cli("tune", "qwen36-fp8-mtp", "--node", "box", "--target-concurrency", "8")
    measured = run_cli("tune", "qwen36-fp8-mtp", "--node", "measured",
                       "--target-concurrency", "8")
    assert box.exit_code == 0 and measured.exit_code == 0, box.output + measured.output
    assert 8.2 <= concurrency(box.output) <= 8.3, box.output
    assert concurrency(box.output) == concurrency(measured.output)
    assert "known-GPU table" in box.output and "121.69 GiB as CUDA reports it" in box.output


def test_validate_warns_that_the_box_figure_was_replaced(run_cli: Run, folder: Path) -> None:
    (folder / "nodes/box.yaml").write_text(box_node("NVIDIA GeForce RTX 5090", 32, "12.0",
                                                    "x86_64"))
    stack = folder / "Pulumi.home.yaml"
    stack.write_text(stack.read_text().replace(
        "servefleet:profiles: {}", "servefleet:profiles:\n    box: qwen36-q4-llamacpp"))
    result = run_cli("validate")
    assert "[gpu-memory-from-table]" in result.output, result.output
    assert "memory_gib 32 is the NVIDIA GeForce RTX 5090's figure on the box; CUDA " \
        "reports 31.37 GiB" in result.output
    assert "servefleet probe box" in result.output


@pytest.mark.parametrize("name", sorted(KNOWN_GPUS))
def test_a_known_gpu_gets_cuda_s_figure_only_where_the_file_gives_none(name: str) -> None:
    row = KNOWN_GPUS[name]
    gpu = {"name": name, "memory_gib": row.marketing_gib, "compute_capability": "9.0"}
    base = {"name": "n", "address": "192.0.2.1", "arch": "x86_64", "base_dir": "/srv",
            "hf_cache": "/srv/hf", "ports": [8000],
            "ssh": {"user": "u", "agent": True, "host_keys": [KEY]}}
    filled = Node.model_validate({**base, "gpus": [gpu]}).gpus[0]
    assert filled.cuda_memory_gib == row.cuda_memory_gib
    assert filled.unified_memory is row.unified_memory
    assert (filled.memory_source or "").startswith(TABLE_SOURCE_PREFIX)
    own = Node.model_validate({**base, "gpus": [{**gpu, "cuda_memory_gib": 30.0,
                                                 "memory_source": "probe"}]}).gpus[0]
    assert (own.cuda_memory_gib, own.memory_source) == (30.0, "probe")

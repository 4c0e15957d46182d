"""servefleet tune: a profile overlay reaching a KV or concurrency target on a node."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from servefleet.cli.main import build_cli

ROOT = Path(__file__).resolve().parents[2]


def _tune(*args: str):
    return CliRunner().invoke(build_cli(), ["--project", str(ROOT), "tune", *args])


def test_tune_prints_an_overlay_reaching_the_target():
    result = _tune("qwen36-fp8", "--node", "dgx-spark-1", "--target-kv-tokens", "600000")
    assert result.exit_code == 0, result.output
    body = yaml.safe_load("\n".join(line for line in result.output.splitlines()
                                    if not line.startswith("#")))
    assert body["extends"] == "qwen36-fp8"
    util = body["vllm"]["gpu_memory_utilization"]
    assert 0.05 <= util < 0.45
    assert "estimated (no measured run" in result.output and "unified memory" in result.output


def test_tune_refuses_unreachable_targets_and_profiles_without_a_config():
    far = _tune("qwen36-fp8", "--node", "rtx5090", "--target-kv-tokens", "100000000")
    assert far.exit_code == 1 and "no gpu_memory_utilization below 1.0" in far.output
    bare = _tune("qwen36-w8a16", "--node", "dgx-spark-1", "--target-concurrency", "2")
    assert bare.exit_code == 1 and "model.config is not set" in bare.output

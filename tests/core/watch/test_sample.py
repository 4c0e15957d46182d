"""The node read's JSON into samples, with real /metrics pages and nvidia-smi CSV."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefleet.core.watch.config import watch_from_config
from servefleet.core.watch.sample import parse_gpu_csv, parse_node_read

DATA = Path(__file__).parents[1] / "bootlog" / "data"


def read(metrics: str, **extra: object) -> str:
    deployment = {"status": "running", "restart_count": 1, "started_at": "2026-11-24T10:00:00Z",
                  "health": 200, "metrics": metrics, "canary": "ok", "canary_seconds": 0.4}
    deployment.update(extra)
    return json.dumps({"deployments": {"main": deployment},
                       "gpu_csv": "0, 22.15, 96, 110000, 11000\n",
                       "mem_available_bytes": 12 << 30})


def test_vllm_busy_page_real() -> None:
    page = (DATA / "vllm-cpu-real" / "busy.metrics.txt").read_text(encoding="utf-8")
    sample = parse_node_read(read(page), 5.0, {"main": "vllm"})["main"]
    assert (sample.requests_running, sample.requests_waiting) == (2, 14)
    assert sample.held == 16
    assert sample.generation_tokens is not None and sample.prompt_tokens is not None
    assert sample.health_ok and sample.canary == "ok" and sample.restart_count == 1
    assert sample.gpus[0].power_watts == pytest.approx(22.15)
    assert sample.gpus_idle(30) is True
    assert sample.mem_available_bytes == 12 << 30


def test_llamacpp_page_real() -> None:
    page = (DATA / "llamacpp-real-cpu" / "cpu-default.metrics.txt").read_text(encoding="utf-8")
    sample = parse_node_read(read(page), 0.0, {"main": "llama.cpp"})["main"]
    assert sample.generation_tokens is not None and sample.generation_tokens > 0
    assert sample.requests_running is not None


def test_garbage_metrics_is_an_error_line_not_a_crash() -> None:
    sample = parse_node_read(read("<html>oops"), 0.0, {"main": "vllm"})["main"]
    assert sample.generation_tokens is None
    assert sample.held is None


def test_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        parse_node_read("Traceback", 0.0, {})


def test_gpu_csv_without_power_and_na() -> None:
    gpus = parse_gpu_csv("0, 0, 1024, 130000\n1, [N/A], [N/A], [N/A], [N/A]\n")
    assert gpus[0].power_watts is None and gpus[0].memory_free_mib == 130000
    assert gpus[1].utilization_percent is None
    assert gpus[0].index == 0 and len(gpus) == 2


def test_watch_config_camel_case_and_defaults() -> None:
    config = watch_from_config({"intervalSeconds": 5, "recovery": {"maxRestarts": 3}})
    assert config.interval_seconds == 5 and config.recovery.max_restarts == 3
    assert watch_from_config(None).wedge_intervals == 4


def test_stack_file_watch_block_errors_name_the_field(tmp_path: Path) -> None:
    from servefleet.core.project import load_stack

    (tmp_path / "Pulumi.x.yaml").write_text(
        "config:\n  servefleet:profiles:\n    a: p\n  servefleet:watch:\n"
        "    intervalSeconds: 5\n    recovery: {maxRestarts: 99}\n")
    stack, _, problems = load_stack(tmp_path, "x")
    assert stack is None
    assert problems == ["Pulumi.x.yaml: servefleet:watch.recovery.maxRestarts: Input should be "
                        "less than or equal to 20 (got 99)"]
    (tmp_path / "Pulumi.x.yaml").write_text(
        "config:\n  servefleet:profiles:\n    a: p\n  servefleet:watch:\n    canary: false\n")
    stack, _, problems = load_stack(tmp_path, "x")
    assert stack is not None and not stack.watch.canary and not problems

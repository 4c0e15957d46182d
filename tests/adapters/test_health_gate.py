"""The health gate: boot facts from log lines written from vLLM's format strings, and HTTP
probes against a real HTTP server on this machine."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from servefleet.adapters.health_gate import (
    GateSpec,
    HealthReport,
    http_get,
    run_gate,
    send_through,
)
from servefleet.adapters.probes import EngineClient
from servefleet.core.bootlog import BootFacts, parse_text
from servefleet.core.project import load_nodes, load_profiles
from tests.reference_project import REPO_ROOT

PREFIX = "(EngineCore pid=96) INFO 11-21 10:00:0{n} [{src}:1] "


def vllm_log(kv_tokens: int = 360_448, mode: str = "FULL_AND_PIECEWISE",
             downgrade: bool = False) -> str:
    """A vLLM 0.21 boot that becomes ready, in the engine's own line formats."""
    lines = [
        "INFO 11-21 10:00:00 [api_server.py:1] vLLM API server version 0.21.0",
        PREFIX.format(n=1, src="core.py") + "Initializing a V1 LLM engine (v0.21.0) with "
        "config: model='Qwen/Qwen3.6-35B-A3B-FP8', compilation_config={'level': 3, "
        f"'cudagraph_mode': <CUDAGraphMode.{mode}: (2, 1)>}}",
        PREFIX.format(n=2, src="kv_cache_utils.py") + f"GPU KV cache size: {kv_tokens:,} tokens",
        PREFIX.format(n=2, src="kv_cache_utils.py") +
        "Maximum concurrency for 131,072 tokens per request: 2.75x",
    ]
    if downgrade:
        lines.append(
            "(EngineCore pid=96) WARNING 11-21 10:00:03 [compilation.py:1] "
            f"CUDAGraphMode.{mode} is not supported with spec-decode for attention backend "
            "FlashInferBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); "
            "setting cudagraph_mode=PIECEWISE")
    lines += ["INFO:     Started server process [1]", "INFO:     Application startup complete."]
    return "\n".join(lines) + "\n"


OOM_LOG = "\n".join([
    "INFO 11-21 10:00:00 [api_server.py:1] vLLM API server version 0.21.0",
    "(EngineCore pid=96) ERROR 11-21 10:00:05 [core.py:1] EngineCore failed to start.",
    "(EngineCore pid=96) ERROR 11-21 10:00:05 [core.py:1] Traceback (most recent call last):",
    '(EngineCore pid=96) ERROR 11-21 10:00:05 [core.py:1]   File "/x/kv_cache_utils.py", '
    "line 1, in check_enough_kv_cache_memory",
    "(EngineCore pid=96) ERROR 11-21 10:00:05 [core.py:1] ValueError: No available memory for "
    "the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
]) + "\n"


class Engine(BaseHTTPRequestHandler):
    """A tiny engine API: answers set per test on the server object."""

    def do_GET(self) -> None:
        server: Any = self.server
        answers = server.answers.get(self.path) or [(404, b"")]
        status, body = answers.pop(0) if len(answers) > 1 else answers[0]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    models = {"object": "list", "data": [{"id": "qwen36", "object": "model",
                                          "max_model_len": 131072}]}
    server.answers = {"/health": [(200, b"")], "/v1/models": [(200, json.dumps(models).encode())]}
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def spec_for(profile: str) -> GateSpec:
    profiles, _, _, problems = load_profiles(REPO_ROOT)
    nodes, _, node_problems = load_nodes(REPO_ROOT)
    assert not problems and not node_problems
    return GateSpec.for_profile(profiles[profile], nodes["dgx-spark-1"])


def gate(facts: BootFacts, url: str, spec: GateSpec, deadline: float = 5.0,
         client: EngineClient | None = None) -> HealthReport:
    now = [0.0]

    def clock() -> float:
        return now[0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    return run_gate(facts, url, spec, deadline=deadline, clock=clock, sleep=sleep,
                    client=client)


def rows(report: HealthReport) -> dict[str, tuple[str, str, str]]:
    return {c.fact: (c.expected, c.observed, c.verdict) for c in report.checks}


def test_healthy_vllm_boot_passes(engine: Any) -> None:
    report = gate(parse_text(vllm_log()), engine.url, spec_for("qwen36-fp8"))
    assert report.ok, report.summary()
    assert rows(report) == {
        "boot outcome": ("ready", "ready", "pass"),
        "KV cache tokens": (">= 300,000", "360,448", "pass"),
        "CUDA graph mode": ("FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE", "pass"),
        "GET /health": ("200", "200", "pass"),
        "served model name": ("qwen36", "qwen36", "pass"),
        "max_model_len": ("131,072", "131,072", "pass"),
    }
    assert report.facts["kv_cache_tokens"] == 360_448
    assert report.summary() == "healthy"
    kv = next(c for c in report.checks if c.fact == "KV cache tokens")
    assert kv.evidence[0].startswith("L3: ") and "360,448 tokens" in kv.evidence[0]


def test_mtp_expects_piecewise(engine: Any) -> None:
    spec = spec_for("qwen36-fp8-mtp")
    good = gate(parse_text(vllm_log(kv_tokens=323_584, downgrade=True)), engine.url, spec)
    assert good.ok, good.summary()
    assert rows(good)["CUDA graph mode"] == ("PIECEWISE", "PIECEWISE", "pass")
    bad = gate(parse_text(vllm_log(kv_tokens=323_584)), engine.url, spec)
    assert rows(bad)["CUDA graph mode"] == ("PIECEWISE", "FULL_AND_PIECEWISE", "fail")
    assert bad.summary().startswith("CUDA graph mode: expected PIECEWISE")


def test_small_kv_pool_fails_with_its_line(engine: Any) -> None:
    report = gate(parse_text(vllm_log(kv_tokens=174_000)), engine.url, spec_for("qwen36-fp8"))
    assert not report.ok
    failed = report.failures
    assert [c.fact for c in failed] == ["KV cache tokens"]
    assert "174,000 tokens" in failed[0].evidence[0]


def test_failed_boot_names_class_and_lines_and_skips_probes(engine: Any) -> None:
    engine.answers["/health"] = [(500, b"must not be asked")]
    report = gate(parse_text(OOM_LOG), engine.url, spec_for("qwen36-fp8"))
    assert not report.ok
    assert report.failure_class == "kv_cache_oom"
    outcome = report.checks[0]
    assert (outcome.fact, outcome.observed) == ("boot outcome", "failed: kv_cache_oom")
    assert any("No available memory for the cache blocks" in line for line in report.evidence())
    assert not any(c.fact.startswith("GET") for c in report.checks)


def test_health_is_polled_until_it_answers(engine: Any) -> None:
    engine.answers["/health"] = [(503, b"loading"), (503, b"loading"), (200, b"")]
    report = gate(parse_text(vllm_log()), engine.url, spec_for("qwen36-fp8"))
    assert report.ok


def test_health_that_never_answers_fails_at_the_deadline(engine: Any) -> None:
    engine.answers["/health"] = [(503, b'{"error": "EngineDeadError"}')]
    report = gate(parse_text(vllm_log()), engine.url, spec_for("qwen36-fp8"), deadline=2.0)
    assert rows(report)["GET /health"] == (
        "200", 'HTTP 503 {"error": "EngineDeadError"} (vLLM answers 503 once its engine core is '
        "dead)", "fail")
    assert "served model name" not in rows(report)


def test_wrong_served_name_fails(engine: Any) -> None:
    engine.answers["/v1/models"] = [(200, json.dumps(
        {"data": [{"id": "other", "max_model_len": 131072}]}).encode())]
    report = gate(parse_text(vllm_log()), engine.url, spec_for("qwen36-fp8"))
    assert rows(report)["served model name"] == ("qwen36", "other", "fail")


def test_nothing_listening_fails_the_probe() -> None:
    report = gate(parse_text(vllm_log()), "http://127.0.0.1:9", spec_for("qwen36-fp8"),
                  deadline=1.0)
    _, observed, verdict = rows(report)["GET /health"]
    assert verdict == "fail" and observed.startswith("no answer")


def test_gate_of_a_release_known_only_by_its_manifest() -> None:
    profiles, _, _, _ = load_profiles(REPO_ROOT)
    nodes, _, _ = load_nodes(REPO_ROOT)
    manifest = {"profile": "gone", "engine": "vllm", "engine_argv": [
        "m", "--served-model-name", "old", "--max-model-len", "4096"]}
    spec = GateSpec.for_manifest(manifest, profiles, nodes["dgx-spark-1"])
    assert (spec.served_name, spec.max_model_len, spec.expected) == ("old", 4096, None)


def test_a_callers_own_get_serves_the_probes(engine: Any) -> None:
    asked: list[str] = []

    def get(url: str, timeout: float) -> tuple[int, bytes]:
        asked.append(url)
        return http_get(url, timeout)

    client = EngineClient(engine.url, send=send_through(get))
    report = gate(parse_text(vllm_log()), engine.url, spec_for("qwen36-fp8"), client=client)
    assert report.ok, report.summary()
    assert asked == [f"{engine.url}/health", f"{engine.url}/v1/models"]


def test_a_manifest_gate_without_a_name_only_needs_a_model_list(engine: Any) -> None:
    spec = GateSpec(engine="vllm", served_name=None, max_model_len=None)
    report = gate(parse_text(vllm_log()), engine.url, spec)
    assert report.ok and "served model name" not in rows(report)
    engine.answers["/v1/models"] = [(200, b"<html>")]
    assert rows(gate(parse_text(vllm_log()), engine.url, spec))["GET /v1/models"] == (
        "a JSON model list", "not JSON", "fail")


def test_the_gate_and_health_judge_rows_by_one_rule() -> None:
    """Only ``fail`` fails: a gate's report and a health result of the same rows agree."""
    from servefleet.core.health_table import CheckRow, DeploymentHealth, failed_rows, rows_pass

    passed = (CheckRow("boot outcome", "ready", "ready", "pass"),
              CheckRow("KV cache usage", "-", "0.0%", "info"))
    warned = (*passed, CheckRow("KV baselines file", "readable", "not JSON", "warn"))
    failed = (*warned, CheckRow("GET /health", "200", "503", "fail"))
    for rows in (passed, warned, failed, ()):
        gate = HealthReport(url="http://n:8000", checks=rows)
        health = DeploymentHealth("n", "main", rows)
        assert gate.ok == health.ok == rows_pass(rows) == (rows is not failed)
        assert gate.failures == health.failures == failed_rows(rows)

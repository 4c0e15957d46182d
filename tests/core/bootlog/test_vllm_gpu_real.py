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


@pytest.mark.parametrize(("log", "vllm", "mode", "backend"), [
    ("h100-default.log", {}, "FULL_AND_PIECEWISE", "FLASH_ATTN"),
    ("h100-eager.log", {"enforce_eager": True}, "NONE", "FLASH_ATTN"),
    ("h100-spec-ngram.log", {"speculative": {"method": "ngram", "num_speculative_tokens": 2}},
     "FULL_AND_PIECEWISE", "FLASH_ATTN"),
    ("h200-kv-fp8.log", {"kv_cache_dtype": "fp8"}, "FULL_AND_PIECEWISE", "FLASH_ATTN"),
])
def test_the_expected_gpu_facts_are_what_the_real_gpu_printed(log: str, vllm: dict[str, object],
                                                              mode: str, backend: str) -> None:
    """What servefleet expects of a Hopper boot (graph mode, attention backend) — the facts
    a simulated node cannot show — against the real boot."""
    from servefleet.core.expectations import derive_expectations
    from servefleet.core.models import Node, Profile
    from servefleet.core.project import load_profiles

    shipped = load_profiles(Path(__file__).resolve().parents[3])[0]["qwen36-w8a16"]
    data = shipped.model_dump(exclude_none=True)
    data.update(engine_version="0.26.0",
                vllm={**data["vllm"], "kv_cache_dtype": "auto", **vllm})
    profile = Profile.model_validate(data)
    node = Node.model_validate({
        "name": "h100", "address": "h100.lan", "ssh": {"agent": True}, "arch": "x86_64",
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 80,
                  "compute_capability": "9.0"}]})
    expected = derive_expectations(profile, node)
    facts = parse_file(DATA / log)
    assert (expected.cudagraph_mode, expected.attention_backend) == (mode, backend)
    assert (facts.cudagraph_mode, facts.attention_backend) == (mode, backend)

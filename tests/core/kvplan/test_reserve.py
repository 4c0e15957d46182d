"""The cold planner: the reserve modelled from what drives it, against every real figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.kvplan.accuracy import (
    MTP_DELTA_TOLERANCE,
    ROWS,
    TOLERANCE,
    evaluate_cold,
    mtp_delta,
)
from servefleet.core.kvplan.pool import GIB
from servefleet.core.kvplan.reserve import (
    ReserveInputs,
    capture_sizes,
    estimate,
    graph_counts,
    graph_profiling,
)
from servefleet.core.project import load_profiles

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.source.split(":")[0][:60])
def test_every_row_is_within_tolerance_cold(qwen36, row):
    result = evaluate_cold(qwen36, row)
    if row.not_modelled:
        assert result.predicted_tokens is None and "not modelled" in result.note
        return
    assert row.cold is not None, "every modelled row carries its cold inputs"
    assert result.error is not None
    assert abs(result.error) <= TOLERANCE, (result.predicted_tokens, row.printed_tokens,
                                            result.note)


def test_the_gb10_mtp_change_is_within_three_points_of_the_seeds(qwen36):
    predicted, printed = mtp_delta(qwen36)
    assert printed == pytest.approx(-0.1015, abs=1e-3)
    assert abs(predicted - printed) <= MTP_DELTA_TOLERANCE


def test_capture_sizes_reproduce_the_counts_real_boots_printed():
    # seed 001, vLLM 0.19.1, 32 sequences: "11 piecewise + 7 full graphs"
    sizes, decode = capture_sizes(32, 0)
    assert (len(sizes), len(decode), sizes[-1]) == (11, 7, 64)
    # the 0.25.1 GB10 fixture, 32 sequences, MTP 3:
    # "Profiling CUDA graph memory: PIECEWISE=33 (largest=256), FULL=17 (largest=128)"
    sizes, decode = capture_sizes(32, 3)
    assert (len(sizes), sizes[-1], len(decode), decode[-1]) == (33, 256, 17, 128)


def _inputs(**changes: object) -> ReserveInputs:
    base = dict(unified_memory=False, version=(0, 21), max_num_batched_tokens=8192,
                max_num_seqs=64, num_spec=0, cudagraph_mode="FULL_AND_PIECEWISE",
                attention_backend="FLASHINFER", graph_profiling=True,
                activation_bytes_per_token=57344)
    return ReserveInputs(**{**base, **changes})  # type: ignore[arg-type]


def test_each_term_moves_with_what_drives_it():
    base = estimate(_inputs())
    assert estimate(_inputs(max_num_batched_tokens=16384)).activations == \
        pytest.approx(2 * base.activations)
    assert estimate(_inputs(cudagraph_mode="PIECEWISE")).graphs < base.graphs
    assert estimate(_inputs(cudagraph_mode="NONE")).graphs == 0
    assert estimate(_inputs(graph_profiling=False)).graphs == 0
    assert estimate(_inputs(attention_backend="TURBOQUANT")).workspace == 0
    assert estimate(_inputs(unified_memory=True)).base > 2 * base.base
    assert graph_counts(_inputs(cudagraph_mode="FULL_DECODE_ONLY")) == (0, 11)


def test_graph_memory_is_in_the_budget_from_0_20_or_when_the_env_asks():
    shipped = load_profiles(ROOT)[0]["qwen36-w8a16"]  # sets no profiler variable

    def at(version: str, **env: str) -> bool:
        return graph_profiling(shipped.model_copy(update={"engine_version": version,
                                                          "env": env}))

    assert at("0.20.0") and not at("0.19.1")
    assert at("0.19.1", VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS="1")
    assert not at("0.21.0", VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS="0")


def test_a_gb10_gets_the_small_batch_tier_from_0_13_as_its_real_boots_show():
    """vLLM sizes the default batch from NVML's total memory, which a GB10 does not report:
    the 0.13.0 GB10 boot of gpt-oss runs ``max_num_batched_tokens=2048``
    (``data/real-logs``), and so does every later release; an H200 gets the large tier."""
    from servefleet.core.kvplan.reserve import default_batch
    from servefleet.core.models import Node

    shipped = load_profiles(ROOT)[0]["qwen36-w8a16"]
    data = shipped.model_dump(exclude_none=True)
    data["vllm"].pop("max_num_batched_tokens", None)
    data["vllm"].pop("max_num_seqs", None)

    def batch(version: str, gpu: str, memory: int, cc: str) -> tuple[int, int]:
        profile = type(shipped).model_validate({**data, "engine_version": version})
        node = Node.model_validate({
            "name": "n", "address": "n.lan", "ssh": {"agent": True}, "arch": "aarch64",
            "gpus": [{"name": gpu, "memory_gib": memory, "compute_capability": cc}]})
        return default_batch(profile, node)

    log = (Path(__file__).parent / "data" / "real-logs" /
           "vllm-0.13.0-gb10-gpt-oss-20b.log").read_text(errors="replace")
    assert "max_num_batched_tokens=2048" in log
    for version in ("0.13.0", "0.19.1", "0.21.0", "0.25.1", "0.26.0"):
        assert batch(version, "NVIDIA GB10", 128, "12.1") == (2048, 256), version
        assert batch(version, "NVIDIA H200", 141, "9.0") == (8192, 1024), version


def test_the_v1_sampler_moves_with_sequences_and_vocabulary_and_not_on_v2():
    """vLLM's V1 profiling run samples ``min(max_num_seqs, max_num_batched_tokens)`` rows
    over the whole vocabulary (the H200 boots: Qwen3-30B-A3B's peak is 2.68 GiB at 1,024
    sequences, 0.87 at 64); the V2 runner's profiling sampler does not sort."""
    from servefleet.core.kvplan.reserve import SAMPLER_BYTES

    inputs = _inputs(max_num_seqs=1024, vocab_size=151936, graph_profiling=False)
    assert estimate(inputs).sampler * GIB == 1024 * 151936 * SAMPLER_BYTES
    assert estimate(_inputs(max_num_seqs=64, vocab_size=151936)).sampler == pytest.approx(
        estimate(inputs).sampler / 16)
    assert estimate(_inputs(max_num_seqs=4096, max_num_batched_tokens=2048,
                            vocab_size=1000)).sampler * GIB == 2048 * 1000 * SAMPLER_BYTES
    assert estimate(_inputs(vocab_size=151936, v2_runner=True)).sampler == 0
    assert estimate(_inputs(vocab_size=151936, native_sampler=False)).sampler == 0
    assert estimate(inputs).total == pytest.approx(
        estimate(_inputs(max_num_seqs=1024, graph_profiling=False)).total
        + estimate(inputs).sampler)


def test_the_sampler_peak_follows_flashinfer_by_version_and_env():
    from servefleet.core.kvplan.reserve import native_profiling_sampler

    assert native_profiling_sampler((0, 19, 1), {})
    assert not native_profiling_sampler((0, 20), {})
    assert not native_profiling_sampler((0, 21), {})
    assert native_profiling_sampler((0, 21), {"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    assert native_profiling_sampler((0, 25, 1), {})
    assert native_profiling_sampler((0, 26), {"VLLM_USE_FLASHINFER_SAMPLER": "1"})


def test_each_gpu_family_has_its_own_constants():
    from servefleet.core.kvplan.reserve import CONSUMER, DATACENTER, UNIFIED, gpu_family
    from servefleet.core.models import Node

    def node(name: str, cc: str, memory: int, unified: bool = False) -> Node:
        return Node.model_validate({
            "name": "n", "address": "n.lan", "ssh": {"agent": True}, "arch": "x86_64",
            "gpus": [{"name": name, "memory_gib": memory, "compute_capability": cc,
                      "unified_memory": unified}]})

    assert gpu_family(node("NVIDIA GB10", "12.1", 128, unified=True)) is UNIFIED
    assert gpu_family(node("NVIDIA GeForce RTX 5090", "12.0", 32)) is CONSUMER
    assert gpu_family(node("NVIDIA H200", "9.0", 141)) is DATACENTER
    assert gpu_family(node("NVIDIA A100-SXM4-80GB", "8.0", 80)) is DATACENTER
    assert gpu_family(node("NVIDIA L40S", "8.9", 48)) is DATACENTER  # by name: sm 8.9
    assert gpu_family(node("NVIDIA A10G", "8.6", 24)) is DATACENTER
    assert gpu_family(node("NVIDIA GeForce RTX 4090", "8.9", 24)) is CONSUMER
    described = estimate(_inputs(family=DATACENTER)).describe()
    assert described.startswith("0.50 GiB base (datacenter card; fitted on 10 vLLM 0.26.0 "
                                "H200 boots")

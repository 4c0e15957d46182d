"""/metrics pages of the CPU build of vLLM 0.32.0, recorded after real chat requests
(tests/core/bootlog/data/vllm-cpu-real/README.md says how)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.metrics import SpecDecodeCounters, parse_vllm_metrics

DATA = Path(__file__).parent / "bootlog" / "data" / "vllm-cpu-real"


def test_idle_page_after_three_chats() -> None:
    metrics = parse_vllm_metrics((DATA / "healthy.metrics.txt").read_text(encoding="utf-8"))
    assert metrics.kv_cache_usage == 0.0
    assert (metrics.requests_running, metrics.requests_waiting) == (0, 0)
    assert (metrics.prompt_tokens, metrics.generation_tokens) == (51, 144)
    # cache_config_info: 8192 blocks of 128 tokens = the boot log's 1,048,576 tokens.
    assert (metrics.num_gpu_blocks, metrics.block_size, metrics.cache_dtype) == (
        8192, 128, "auto")
    assert metrics.kv_capacity_tokens == 1_048_576
    assert metrics.spec_decode is None


def test_ngram_spec_decode_counters() -> None:
    metrics = parse_vllm_metrics(
        (DATA / "spec-ngram.metrics.txt").read_text(encoding="utf-8"))
    spec = metrics.spec_decode
    assert spec == SpecDecodeCounters(52, 92, 60, (40, 20))
    # The same totals as the boot log's two "SpecDecoding metrics" lines (60 of 92).
    assert spec.acceptance_rate == pytest.approx(60 / 92)
    assert spec.mean_acceptance_length == pytest.approx(1 + 60 / 52)
    assert spec.per_position_acceptance == pytest.approx((40 / 52, 20 / 52))
    assert metrics.kv_capacity_tokens == 1_048_576


def test_busy_page_two_running_fourteen_waiting() -> None:
    # 16 completions of 1,500 tokens against --max-num-seqs 2, scraped 2 s later.
    metrics = parse_vllm_metrics((DATA / "busy.metrics.txt").read_text(encoding="utf-8"))
    assert (metrics.requests_running, metrics.requests_waiting) == (2, 14)
    # 24 blocks of 128 tokens hold the two running sequences; vLLM counts usage over the
    # pool less its one reserved null block (8191).
    assert metrics.kv_cache_usage == pytest.approx(24 / 8191, rel=1e-9)
    assert metrics.generation_tokens == 2839
    assert metrics.spec_decode is None


def test_ngram_counters_in_the_node_image() -> None:
    text = (DATA / "bookworm-eager-ngram.metrics.txt").read_text(encoding="utf-8")
    spec = parse_vllm_metrics(text).spec_decode
    assert spec == SpecDecodeCounters(64, 112, 92, (56, 36))
    assert spec.describe() == "acceptance 82.1%, mean length 2.44 (64 drafts)"

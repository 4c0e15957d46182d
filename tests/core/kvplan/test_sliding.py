"""Sliding-window models (gpt-oss, Gemma 3) planned the way vLLM's hybrid KV-cache manager
sizes them, checked against the real boots in ``data/real-logs`` and against vLLM's source
arithmetic where no boot is at hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servefleet.core.kvplan import facts_from_config, figures, layout
from servefleet.core.kvplan.accuracy import GPT_OSS_20B_CONFIG, SLIDING_ROWS, evaluate_sliding
from servefleet.core.kvplan.pool import GIB, reported_tokens
from tests.core.kvplan.test_refusals import GEMMA3_27B, GPT_OSS_120B, SRC

LOGS = Path(__file__).parent / "data" / "real-logs"


def _printed(text: str) -> dict[str, float]:
    found = {
        "available": re.search(r"Available KV cache memory: ([\d.]+) GiB", text),
        "tokens": re.search(r"GPU KV cache size: ([\d,]+) tokens", text),
        "len": re.search(r"Maximum concurrency for ([\d,]+) tokens per request", text),
        "concurrency": re.search(r"per request: ([\d.]+)x", text),
        "batched": re.search(r"max_num_batched_tokens=(\d+)", text),
    }
    assert all(found.values()), found
    return {key: float(m.group(1).replace(",", "")) for key, m in found.items() if m}


@pytest.mark.parametrize("row", SLIDING_ROWS, ids=lambda row: row.log)
def test_each_real_sliding_boot_is_reproduced_from_its_printed_budget(row):
    printed = _printed((LOGS / row.log).read_text(encoding="utf-8", errors="replace"))
    assert (printed["available"], printed["tokens"], printed["concurrency"]) == (
        row.available_gib, row.printed_tokens, row.printed_concurrency)
    assert (printed["len"], printed["batched"]) == (row.max_model_len,
                                                    row.max_num_batched_tokens)
    result = evaluate_sliding(row)
    low, high = result.token_range
    assert low <= row.printed_tokens <= high, result
    assert abs(result.predicted_tokens - row.printed_tokens) / row.printed_tokens < 0.001
    lo_c, hi_c = result.concurrency_range
    assert round(lo_c, 2) <= row.printed_concurrency <= round(hi_c, 2), result


def test_gpt_oss_20b_on_the_gb10_blocks_and_groups():
    facts = facts_from_config(GPT_OSS_20B_CONFIG, SRC)
    assert (facts.full_attention_layers, facts.sliding_layers, facts.sliding_window) == \
        (12, 12, 128)
    lay = layout(facts, kv_dtype="auto", version=(0, 13), max_num_batched_tokens=2048)
    assert (lay.block_size, lay.page_bytes, lay.group_size, lay.num_groups) == (16, 32768, 12, 2)
    # 512 full blocks + cdiv(127 + 2048, 16) + 1 = 137 sliding blocks per 8K request
    assert lay.blocks_per_request(8192) == 512 + 137
    # 35,329 blocks is the one pool both printed figures allow: 282,624 tokens (0.13:
    # blocks // 2 groups × 16 → 35,328 or 35,329) and 54.44× (35,329 / 649; 35,328 gives 54.43)
    assert [n for n in range(35_300, 35_360)
            if reported_tokens(lay, n, 8192, (0, 13)) == 282_624
            and f"{n / lay.blocks_per_request(8192):.2f}" == "54.44"] == [35_329]
    # With the hybrid manager off every layer is full attention: the same tokens, but the
    # log's 54.44× could not have been printed (34.5×).
    dense = layout(facts, kv_dtype="auto", version=(0, 13), hybrid_manager=False,
                   hybrid_off_why="test")
    pool = figures(dense, 12.94 * GIB, 8192, (0, 13))
    assert dense.num_groups == 1 and dense.attention_layers == 24
    assert f"{pool.max_concurrency:.2f}" == "34.51" and "sized as full attention" in \
        dense.describe()


def test_gpt_oss_120b_layout_and_the_report_in_both_meanings():
    facts = facts_from_config(GPT_OSS_120B, SRC)
    assert (facts.full_attention_layers, facts.sliding_layers) == (18, 18)
    lay = layout(facts, kv_dtype="auto", version=(0, 21), max_num_batched_tokens=2048)
    assert (lay.group_size, lay.num_groups, lay.page_bytes) == (18, 2, 32768)
    pool = figures(lay, 20 * GIB, 131072, (0, 21))
    assert pool.num_blocks == 20 * GIB // 32768 // 18 == 36_408
    per = 8192 + 137
    assert lay.blocks_per_request(131072) == per
    assert pool.kv_cache_tokens == int(36_408 / per * 131072)  # from 0.21
    assert figures(lay, 20 * GIB, 131072, (0, 20)).kv_cache_tokens == 36_408 // 2 * 16


def test_the_in_flight_bound_from_0_26():
    facts = facts_from_config(GPT_OSS_120B, SRC)
    old = layout(facts, kv_dtype="auto", version=(0, 25, 1), max_num_batched_tokens=2048,
                 concurrent_batches=2)
    new = layout(facts, kv_dtype="auto", version=(0, 26), max_num_batched_tokens=2048,
                 concurrent_batches=2)
    assert old.sliding_blocks(131072) == 137  # cdiv(127 + 2048, 16) + 1
    assert new.sliding_blocks(131072) == 265  # cdiv(127 + 4096, 16) + 1
    sync = layout(facts, kv_dtype="auto", version=(0, 26), max_num_batched_tokens=2048,
                  concurrent_batches=1)
    assert sync.sliding_blocks(131072) == 137
    assert new.sliding_blocks(1024) == cdiv_plus(1024)  # never more than max_model_len


def cdiv_plus(tokens: int) -> int:
    return -(-tokens // 16) + 1


def test_gemma3_from_its_sliding_window_pattern_source_only():
    facts = facts_from_config(GEMMA3_27B, SRC)
    # 62 layers, every 6th global: 10 full + 52 sliding (window 1024)
    assert (facts.full_attention_layers, facts.sliding_layers, facts.sliding_window) == \
        (10, 52, 1024)
    lay = layout(facts, kv_dtype="auto", version=(0, 21), max_num_batched_tokens=8192)
    # 16 KV heads × 128 × 2 (K, V) × 2 B × 16 tokens; groups of 10: 1 full + 6 sliding, 8
    # padding layers
    assert (lay.page_bytes, lay.group_size, lay.num_groups, lay.padding_layers) == \
        (131072, 10, 7, 8)
    assert lay.sliding_blocks(131072) == -(-(1023 + 8192) // 16) + 1 == 577
    assert lay.blocks_per_request(131072) == 8192 + 6 * 577
    assert "Gemma 3 (0.26.0, H200)" in lay.describe()
    explicit = dict(GEMMA3_27B, text_config=dict(
        GEMMA3_27B["text_config"],
        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 10
        + ["sliding_attention"] * 2))
    assert facts_from_config(explicit, SRC).sliding_layers == 52

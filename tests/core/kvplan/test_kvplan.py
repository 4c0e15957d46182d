"""KV-pool planner: config parsing, vLLM's layout arithmetic, accuracy rows, solving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefleet.core.errors import ConfigError
from servefleet.core.kvplan import facts_from_config, figures, layout, load_pinned
from servefleet.core.kvplan.accuracy import ROWS, TOLERANCE, evaluate
from servefleet.core.kvplan.pool import GIB, bytes_for

ROOT = Path(__file__).resolve().parents[3]
CONFIG = "models/qwen3.6-35b-a3b.config.json"
SHA = "3ac357d5a0e00f3c87e4b008c4ac1d38d062f7c286558a9d7eba4cb1618b90db"


def test_pinned_config_gives_the_hybrid_layout(qwen36):
    assert (qwen36.full_attention_layers, qwen36.linear_layers) == (10, 30)
    assert (qwen36.num_kv_heads, qwen36.head_dim, qwen36.mtp_layers) == (2, 256, 1)
    assert qwen36.gdn is not None and qwen36.gdn.ssm_dtype_bytes == 4


def test_a_changed_pinned_config_is_refused(tmp_path):
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"profiles/c.json: sha256 is .*\(model.config.sha256\)"):
        load_pinned(tmp_path, "c.json", SHA)


def test_layer_types_that_disagree_with_the_layer_count_are_refused():
    with pytest.raises(ConfigError, match="layer_types has 2 entries"):
        facts_from_config({"num_hidden_layers": 3, "num_attention_heads": 4,
                           "layer_types": ["full_attention"] * 2}, "x.json")


@pytest.mark.parametrize(("kv", "spec", "mtp", "block", "page"), [
    ("auto", 0, False, 1056, 2_162_688),           # serving reference F.3
    ("fp8", 0, False, 2096, 2_146_304),            # F.3
    ("auto", 3, True, 1072, 2_195_456),            # 0.25.1 log: "block size to 1072 tokens"
    ("turboquant_4bit_nc", 0, False, 4096, 2_146_304),  # F.3
])
def test_block_and_page_sizes_match_vllm(qwen36, kv, spec, mtp, block, page):
    lay = layout(qwen36, kv_dtype=kv, num_spec=spec, mtp=mtp)
    assert (lay.block_size, lay.page_bytes) == (block, page)


def test_mtp_adds_an_attention_layer_and_three_padding_layers(qwen36):
    lay = layout(qwen36, kv_dtype="auto", num_spec=3, mtp=True)
    assert (lay.group_size, lay.num_groups, lay.padding_layers) == (11, 4, 3)


def test_reported_tokens_changed_meaning_at_0_21(qwen36):
    lay = layout(qwen36, kv_dtype="fp8", version=(0, 21))
    budget = 32.97 * GIB
    new = figures(lay, budget, 262144, (0, 21))
    old = figures(lay, budget, 262144, (0, 20))
    assert old.kv_cache_tokens == old.num_blocks // 4 * 2096
    assert new.kv_cache_tokens == int(new.max_concurrency * 262144)
    assert new.kv_cache_tokens > 3 * old.kv_cache_tokens


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.source.split(":")[0][:60])
def test_every_accuracy_row_is_within_tolerance_or_reported(qwen36, row):
    result = evaluate(qwen36, row)
    if row.not_modelled:
        assert result.predicted_tokens is None and "not modelled" in result.note
        return
    assert result.error is not None
    assert abs(result.error) <= TOLERANCE, (result.predicted_tokens, row.printed_tokens)
    if row.printed_concurrency is not None and row.available_gib is not None:
        assert result.predicted_concurrency == pytest.approx(row.printed_concurrency, rel=0.01)


@pytest.mark.parametrize("version", [(0, 20), (0, 21)])
def test_bytes_for_is_the_least_budget_reaching_the_target(qwen36, version):
    lay = layout(qwen36, kv_dtype="fp8", prefix_caching=True)
    need = bytes_for(lay, max_model_len=131072, version=version, tokens=1_000_000)
    assert figures(lay, need, 131072, version).kv_cache_tokens >= 1_000_000
    less = need - lay.bytes_per_block_row
    assert figures(lay, less, 131072, version).kv_cache_tokens < 1_000_000


def test_config_without_text_config_is_dense():
    facts = facts_from_config(json.loads('{"num_hidden_layers": 28, "num_attention_heads": 28,'
                                         '"num_key_value_heads": 4, "hidden_size": 3584}'), "q")
    lay = layout(facts, kv_dtype="auto")
    assert (lay.block_size, lay.num_groups, lay.page_bytes) == (16, 1, 16 * 4 * 2 * 128 * 2)

"""The planner on vLLM's CPU build (a simulated node's engine): every pool the real CPU build
printed for the tiny twin, at 0.75, 1 and 2 GiB of KV space, predicted exactly; and the KV
space ``servefleet tune`` asks for reaches its target with the least whole MiB."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.bootlog import parse_file
from servefleet.core.kvplan import facts_from_config
from servefleet.core.kvplan.accuracy import CPU_ROWS, CPU_VERSION, evaluate_cpu
from servefleet.core.kvplan.cpu import cpu_budget, cpu_pool, explicit_kv_bytes, solve_kv_bytes
from servefleet.core.kvplan.pool import GIB
from servefleet.core.kvplan.predict import with_settings
from servefleet.core.project import load_project
from servefleet.sim.engines.tiny_qwen3_moe import CONFIG

ROOT = Path(__file__).resolve().parents[3]
LOGS = ROOT / "tests" / "core" / "bootlog" / "data"
TWIN = facts_from_config(CONFIG, "tiny twin")


@pytest.mark.parametrize("row", CPU_ROWS, ids=lambda r: r.source.split(":")[0])
def test_every_cpu_row_is_predicted_exactly(row) -> None:  # type: ignore[no-untyped-def]
    result = evaluate_cpu(TWIN, row)
    assert result.predicted_tokens == row.printed_tokens
    assert result.predicted_concurrency == pytest.approx(row.printed_concurrency)


@pytest.mark.parametrize("row", CPU_ROWS, ids=lambda r: r.source.split(":")[0])
def test_each_row_is_what_its_log_prints(row) -> None:  # type: ignore[no-untyped-def]
    facts = parse_file(LOGS / row.source.split(":")[0], "vllm")
    assert facts.kv_cache_tokens == row.printed_tokens
    assert facts.max_concurrency == pytest.approx(row.printed_concurrency)


def test_tune_asks_for_the_least_kv_space_reaching_the_target() -> None:
    profile = load_project(ROOT, "reference").profiles["qwen36-fp8"]  # fp8 KV, 131072
    need = solve_kv_bytes(TWIN, profile, CPU_VERSION, tokens=3_000_000)
    assert need % (1024 * 1024) == 0
    assert cpu_pool(TWIN, profile, CPU_VERSION, need).kv_cache_tokens >= 3_000_000
    less = need - 1024 * 1024
    assert cpu_pool(TWIN, profile, CPU_VERSION, less).kv_cache_tokens < 3_000_000
    tuned = with_settings(profile, extra_args=[f"--kv-cache-memory-bytes={need}"])
    assert explicit_kv_bytes(tuned) == need
    # The node's VLLM_CPU_KVCACHE_SPACE wins over the flag, as in vLLM: the twin unsets it.
    assert cpu_budget(tuned, None)[0] == need
    assert cpu_budget(tuned, 1)[0] == GIB

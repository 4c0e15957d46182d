"""The planner's prediction as the health gate's expectation: a pool far below it fails
with both numbers; a simulated node's CPU build is not judged by it, and says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.bootlog import parse_file
from servefleet.core.bootlog.model import BootFacts
from servefleet.core.kvplan.gate import check_against_prediction, expectations_with_prediction
from servefleet.core.models.inventory import SimEngine, SimSettings
from servefleet.core.project import Project, load_project

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def shipped() -> Project:
    return load_project(ROOT, "reference")


REAL = parse_file(ROOT / "tests/core/bootlog/data/vllm-cpu-real/healthy.log", "vllm")


def boot(tokens: int) -> BootFacts:
    """A real boot's facts with the pool under test."""
    return REAL.model_copy(update={"kv_cache_tokens": tokens})


def test_a_pool_far_below_the_prediction_fails_with_both_numbers(shipped: Project) -> None:
    profile, node = shipped.profiles["qwen36-fp8"], shipped.nodes["dgx-spark-1"]
    expected = expectations_with_prediction(ROOT / "profiles", profile, node)
    predicted = expected.predicted_kv_cache_tokens
    assert predicted is not None and predicted > 1_000_000
    assert expected.kv_prediction_tolerance == 0.25
    low = int(predicted * 0.58)
    row = check_against_prediction(expected, boot(low))
    assert row is not None and row.verdict == "fail"
    assert row.observed == (f"KV pool {low:,} tokens is 42% below the predicted {predicted:,} "
                            "(estimated from config.json; tolerance 25%)")
    ok = check_against_prediction(expected, boot(int(predicted * 0.8)))
    assert ok is not None and ok.verdict == "pass"


def test_the_tolerance_is_the_profiles(shipped: Project) -> None:
    profile, node = shipped.profiles["qwen36-fp8"], shipped.nodes["dgx-spark-1"]
    strict = profile.model_copy(update={"health": profile.health.model_copy(
        update={"kv_prediction_tolerance": 0.1})})
    expected = expectations_with_prediction(ROOT / "profiles", strict, node)
    assert expected.predicted_kv_cache_tokens is not None
    row = check_against_prediction(expected, boot(int(expected.predicted_kv_cache_tokens * 0.85)))
    assert row is not None and row.verdict == "fail" and "tolerance 10%" in row.observed


def test_a_simulated_cpu_build_is_not_judged_by_it_and_says_why(shipped: Project) -> None:
    profile, node = shipped.profiles["qwen36-fp8"], shipped.nodes["dgx-spark-1"]
    twin = SimEngine(version="0.32.0", why="the real vllm 0.32.0 (CPU build) serves a twin")
    sim = node.model_copy(update={"sim": SimSettings(control_dir="/tmp/sim-control",
                                                     engines={"vllm": twin})})
    expected = expectations_with_prediction(ROOT / "profiles", profile, sim)
    assert expected.predicted_kv_cache_tokens is None
    assert check_against_prediction(expected, boot(1_048_576)) is None
    assert any("predicted_kv_cache_tokens not checked" in n for n in expected.notes)


def test_no_prediction_without_a_pinned_config_or_the_project(shipped: Project) -> None:
    node = shipped.nodes["dgx-spark-1"]
    unpinned = expectations_with_prediction(ROOT / "profiles", shipped.profiles["qwen36-w8a16"],
                                            node)
    assert unpinned.predicted_kv_cache_tokens is None
    unknown = expectations_with_prediction(None, shipped.profiles["qwen36-fp8"], node)
    assert unknown.predicted_kv_cache_tokens is None

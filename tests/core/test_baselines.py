"""KV-pool baselines: recorded once per profile and node, later boots compared with them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from servefleet.core.baselines import (
    BaselineBook,
    book_from_json,
    check_against_baseline,
    check_smaller_than,
    kv_pool,
    parse_book,
    record,
    record_image,
)
from servefleet.core.bootlog import BootFacts, parse_text
from servefleet.core.expectations import derive_expectations
from servefleet.core.models import Profile
from servefleet.core.project import Project, load_project, profile_identity
from tests.reference_project import REPO_ROOT

DAY1 = datetime(2026, 11, 21, 9, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def shipped() -> Project:
    return load_project(REPO_ROOT, "reference")


def vllm_boot(tokens: int) -> BootFacts:
    """A vLLM 0.21 boot that states a KV pool (the engine's own line formats)."""
    prefix = "(EngineCore pid=96) INFO 11-21 10:00:02 [kv_cache_utils.py:1] "
    return parse_text("\n".join([
        "INFO 11-21 10:00:00 [api_server.py:1] vLLM API server version 0.21.0",
        prefix + f"GPU KV cache size: {tokens:,} tokens",
        prefix + "Maximum concurrency for 131,072 tokens per request: 2.75x",
        "INFO:     Application startup complete.",
    ]) + "\n")


def llama_boot(mib: float) -> BootFacts:
    return parse_text(
        "main: build = 8680 (15f786e65)\n"
        f"llama_kv_cache: size = {mib:7.2f} MiB ( 65536 cells,  10 layers,  1/1 seqs), "
        f"K (q8_0): {mib / 2:7.2f} MiB, V (q8_0): {mib / 2:7.2f} MiB\n"
        "main: model loaded\n", "llama.cpp")


def changed(profile: Profile, **update: Any) -> Profile:
    data = profile.model_dump()
    data.update(update)
    return Profile.model_validate(data)


def recorded(profile: Profile, facts: BootFacts, book: BaselineBook | None = None,
             when: datetime = DAY1) -> BaselineBook:
    new = record(book or BaselineBook(), profile, profile_identity(profile), facts, now=when,
                 release_id="r1", deployment="main")
    assert new is not None
    return new


def test_first_boot_has_no_baseline_then_is_recorded(shipped: Project) -> None:
    profile = shipped.profiles["qwen36-fp8"]
    facts = vllm_boot(360_448)
    row = check_against_baseline(profile, profile_identity(profile), facts, BaselineBook())
    assert row is not None and row.verdict == "info"
    assert row.observed == "360,448 tokens (no baseline on this node yet)"
    book = recorded(profile, facts)
    entry = book.baselines["qwen36-fp8"]
    assert (entry.kv_pool, entry.unit, entry.recorded_at) == (360_448, "tokens",
                                                              "2026-11-21T09:30:00Z")
    assert entry.image == profile.image.pinned and entry.engine_version == "0.21.0"
    # A second healthy boot keeps the first baseline (slow drift stays measured against it).
    assert record(book, profile, profile_identity(profile), vllm_boot(361_000), now=DAY1,
                  release_id="r2", deployment="main") is None
    forced = record(book, profile, profile_identity(profile), vllm_boot(361_000), now=DAY1,
                    release_id="r2", deployment="main", force=True)
    assert forced is not None and forced.baselines["qwen36-fp8"].kv_pool == 361_000


def test_within_tolerance_passes_beyond_fails_with_both_numbers(shipped: Project) -> None:
    profile = shipped.profiles["qwen36-fp8"]
    identity = profile_identity(profile)
    book = recorded(profile, vllm_boot(360_448))
    ok = check_against_baseline(profile, identity, vllm_boot(350_000), book)
    assert ok is not None and ok.verdict == "pass"
    assert ok.expected == "360,448 tokens ±5% (baseline of 2026-11-21)"
    assert ok.observed == "350,000 tokens (-2.9%)"
    bad = check_against_baseline(profile, identity, vllm_boot(252_313), book)
    assert bad is not None and bad.verdict == "fail"
    assert bad.observed == ("KV pool 360,448 → 252,313 tokens (-30%) against the baseline of "
                            "2026-11-21")
    assert bad.evidence[0].startswith("L2: ") and "GPU KV cache size: 252,313 tokens" in \
        bad.evidence[0]
    assert "the profile is unchanged since" in bad.evidence[-1]


def test_an_image_update_that_moves_the_pool_is_flagged_naming_the_change(
        shipped: Project) -> None:
    """The operators' notes: 174k → 368k tokens after an image update."""
    old = shipped.profiles["qwen36-fp8"]
    book = recorded(old, vllm_boot(174_000))
    image = old.image.model_copy(update={"digest": "sha256:" + "1" * 64})
    new = changed(old, image=image.model_dump())
    row = check_against_baseline(new, profile_identity(new), vllm_boot(368_000), book)
    assert row is not None and row.verdict == "warn"
    assert row.observed.startswith("KV pool 174,000 → 368,000 tokens (+111%) against the "
                                   "baseline of 2026-11-21; image vllm/vllm-openai:v0.21.0@")
    # A healthy boot of the changed profile becomes the new baseline.
    again = record(book, new, profile_identity(new), vllm_boot(368_000), now=DAY1,
                   release_id="r2", deployment="main")
    assert again is not None and again.baselines["qwen36-fp8"].kv_pool == 368_000
    upgraded = changed(old, engine_version="0.33.0")
    row = check_against_baseline(upgraded, profile_identity(upgraded), vllm_boot(200_000), book)
    assert row is not None and row.verdict == "warn" and "engine 0.21.0 → 0.33.0" in row.observed


def test_custom_tolerance(shipped: Project) -> None:
    profile = shipped.profiles["qwen36-fp8"]
    loose = changed(profile, health={**profile.health.model_dump(), "kv_tolerance": 0.2})
    book = recorded(loose, vllm_boot(100_000))
    row = check_against_baseline(loose, profile_identity(loose), vllm_boot(85_000), book)
    assert row is not None and row.verdict == "pass" and "±20%" in row.expected


def test_mtp_pool_is_compared_with_the_profile_without_it(shipped: Project) -> None:
    """The notes: 360k → 323k tokens with MTP on GB10."""
    spark = shipped.nodes["dgx-spark-1"]
    plain, mtp = shipped.profiles["qwen36-fp8"], shipped.profiles["qwen36-fp8-mtp"]
    expected = derive_expectations(mtp, spark)
    assert expected.kv_smaller_than == profile_identity(plain)
    assert check_smaller_than(expected.kv_smaller_than, vllm_boot(323_456), BaselineBook()) \
        is None  # nothing to compare with yet
    book = recorded(plain, vllm_boot(360_448))
    row = check_smaller_than(expected.kv_smaller_than, vllm_boot(323_456), book)
    assert row is not None and row.verdict == "pass"
    assert row.expected == "< 360,448 tokens (qwen36-fp8 on this node, 2026-11-21)"
    assert row.observed == "323,456 tokens (-10.3%)"
    same = check_smaller_than(expected.kv_smaller_than, vllm_boot(360_448), book)
    assert same is not None and same.verdict == "fail"
    assert "drafter is not loaded" in same.evidence[-1]
    # The MTP profile's own baseline is kept apart: the expected shrink is no drift.
    both = recorded(mtp, vllm_boot(323_456), book)
    assert set(both.baselines) == {"qwen36-fp8", "qwen36-fp8-mtp"}
    own = check_against_baseline(mtp, profile_identity(mtp), vllm_boot(323_000), both)
    assert own is not None and own.verdict == "pass"


def test_llamacpp_pool_in_mib(shipped: Project) -> None:
    profile = shipped.profiles["qwen36-q4-llamacpp"]
    assert kv_pool(llama_boot(1088.0)) == (1088.0, "MiB")
    book = recorded(profile, llama_boot(1088.0))
    row = check_against_baseline(profile, profile_identity(profile), llama_boot(544.0), book)
    assert row is not None and row.verdict == "fail"
    assert row.observed.startswith("KV pool 1,088.00 → 544.00 MiB (-50%)")


def test_no_pool_stated_means_no_row(shipped: Project) -> None:
    profile = shipped.profiles["qwen36-fp8"]
    facts = parse_text("INFO:     Application startup complete.\n", "vllm")
    assert kv_pool(facts) is None
    assert check_against_baseline(profile, "x", facts, BaselineBook()) is None
    assert record(BaselineBook(), profile, "x", facts, now=DAY1, release_id=None,
                  deployment=None) is None


def test_book_round_trip_and_unreadable_files(shipped: Project) -> None:
    profile = shipped.profiles["qwen36-fp8"]
    book = recorded(profile, vllm_boot(360_448))
    again, problem = parse_book(book.to_text())
    assert again == book and problem is None
    assert parse_book("") == (BaselineBook(), None)
    empty, problem = parse_book("{not json")
    assert empty == BaselineBook() and problem is not None and "unreadable" in problem
    empty, problem = parse_book('{"baselines": {"x": {"profile": "x"}}}')
    assert empty == BaselineBook() and problem is not None


def test_the_image_of_each_deployment_follows_its_last_healthy_release(
        shipped: Project) -> None:
    profile = shipped.profiles["qwen36-fp8"]
    pools = recorded(profile, vllm_boot(360_448))
    first = record_image(pools, "main", "r1", "sha256:" + "1" * 64, now=DAY1)
    assert first is not None and first.baselines == pools.baselines
    assert first.images["main"].model_dump() == {
        "release_id": "r1", "image_id": "sha256:" + "1" * 64,
        "recorded_at": "2026-11-21T09:30:00Z"}
    # The same release and image again: nothing to write.
    assert record_image(first, "main", "r1", "sha256:" + "1" * 64, now=DAY1) is None
    # A later release (or a rebuilt image) replaces the record; other deployments keep theirs.
    later = record_image(first, "main", "r2", "sha256:" + "2" * 64, now=DAY1)
    both = record_image(later or first, "side", "r9", "sha256:" + "9" * 64, now=DAY1)
    assert both is not None
    assert {d: (i.release_id, i.image_id[-1]) for d, i in both.images.items()} == {
        "main": ("r2", "2"), "side": ("r9", "9")}
    assert parse_book(both.to_text()) == (both, None)
    # Decoded JSON (as the drift collector sends the file) reads the same way.
    assert book_from_json(None) == (BaselineBook(), None)
    assert book_from_json(both.model_dump(mode="json")) == (both, None)
    empty, problem = book_from_json({"images": {"main": {"release_id": "r1"}}})
    assert empty == BaselineBook() and "unreadable" in (problem or "")

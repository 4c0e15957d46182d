"""The history's parsing, merging and printing, on facts of real vLLM boot logs (the CPU
build's recorded logs in this repository) written through the gate record's formatter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from servefleet.core.baselines import BaselineBook, record
from servefleet.core.bootlog import BootFacts, parse_text
from servefleet.core.history import (
    AuditEntry,
    gate_record,
    history_rows,
    kv_chart_lines,
    parse_audit,
    parse_gate_record,
    table_lines,
)
from servefleet.core.observed import ReleaseInfo
from servefleet.core.project import load_project, profile_identity
from tests.reference_project import REPO_ROOT

CPU_LOGS = REPO_ROOT / "tests/core/bootlog/data/vllm-cpu-real"
HEADLINE = ("kv_cache_tokens", "max_concurrency", "cudagraph_mode", "kv_cache_mib")


def facts_of(name: str) -> BootFacts:
    return parse_text((CPU_LOGS / name).read_text(), engine="vllm")


def headline(facts: BootFacts) -> dict[str, Any]:
    return {key: getattr(facts, key) for key in HEADLINE if getattr(facts, key) is not None}


def entry(time: str, release: str, status: str, detail: str,
          operation: str = "deploy") -> AuditEntry:
    return AuditEntry(time, "ops@laptop", operation, "main", release, status, detail)


def story() -> list[AuditEntry]:
    """2 GiB of KV space, then 1 GiB (the pool halves), then a boot that failed."""
    big, small = headline(facts_of("kv-space-2g.log")), headline(facts_of("healthy.log"))
    failed = facts_of("max-model-len-exceeds-kv.log")
    assert failed.failure_class is not None
    return [
        entry("2026-11-20T09:00:00Z", "a1", "ok", "previous -; healthy" + gate_record(
            profile="qwen36-fp8", facts=big, boot_seconds=52.31)),
        entry("2026-11-21T10:00:00Z", "b2", "ok", "previous a1; healthy" + gate_record(
            profile="qwen36-fp8-mtp", facts=small, boot_seconds=61.0)),
        entry("2026-11-22T11:00:00Z", "c3", "rolled_back",
              "health: boot: expected ready, observed failed; restored b2: release b2 serves "
              "again" + gate_record(profile="qwen36-fp8", facts={}, boot_seconds=40.04,
                                    failure_class=failed.failure_class.value)),
        entry("2026-11-22T11:05:00Z", None, "ok", "", operation="stop"),  # type: ignore[arg-type]
    ]


def test_gate_record_round_trip() -> None:
    facts = headline(facts_of("healthy.log"))
    text = gate_record(profile="qwen36-fp8", facts=facts, boot_seconds=47.25)
    assert text == ("; gate: profile=qwen36-fp8 kv_tokens=1048576 max_concurrency=512.0 "
                    "cudagraph=NONE boot_s=47.2")
    assert parse_gate_record("previous -; healthy" + text) == {
        "profile": "qwen36-fp8", "kv_tokens": "1048576", "max_concurrency": "512.0",
        "cudagraph": "NONE", "boot_s": "47.2"}
    assert parse_gate_record("previous -; healthy") == {}
    # A value that is not one token is left out rather than breaking the record.
    assert gate_record(profile="two words", facts={}, boot_seconds=None) == ""


def test_parse_audit_skips_torn_lines() -> None:
    text = ("2026-11-20T09:00:00Z\tops@laptop\tdeploy\tmain\ta1\tok\tprevious -; healthy\n"
            "2026-11-20T09:0")
    [only] = parse_audit(text)
    assert (only.release_id, only.status, only.detail) == ("a1", "ok", "previous -; healthy")


def test_table_and_chart_exact() -> None:
    rows = history_rows(story(), BaselineBook(), [], "main")
    assert table_lines(rows) == [
        "time (UTC)           release  profile           KV pool  max conc.  CUDA graphs  "
        "boot s  gate",
        "2026-11-20 09:00:00  a1       qwen36-fp8      2,097,152    1024.00  NONE         "
        "  52.3  passed",
        "2026-11-21 10:00:00  b2       qwen36-fp8-mtp  1,048,576     512.00  NONE         "
        "  61.0  passed",
        "2026-11-22 11:00:00  c3       qwen36-fp8              -          -  -            "
        "  40.0  rolled back (max_model_len_exceeds_kv_cache)",
    ]
    assert kv_chart_lines(rows, width=20) == [
        "a1  ████████████████████ 2,097,152",
        "b2  ██████████ 1,048,576 (-50.0%)",
        "c3  no KV pool recorded",
    ]


def test_older_lines_fall_back_to_manifest_baseline_and_bracketed_class() -> None:
    project = load_project(REPO_ROOT, "reference")
    profile = project.profiles["qwen36-fp8"]
    book = record(BaselineBook(), profile, profile_identity(profile), facts_of("healthy.log"),
                  now=datetime(2026, 11, 20, tzinfo=UTC), release_id="a1", deployment="main")
    assert book is not None
    audit = [entry("2026-11-20T09:00:00Z", "a1", "ok", "previous -; healthy"),
             entry("2026-11-21T09:00:00Z", "b2", "rolled_back",
                   "health: KV pool: expected ≥ 100,000 tokens, observed 1,000 tokens "
                   "[kv_cache_oom]; restored a1: release a1 serves again"),
             AuditEntry("2026-11-21T09:00:00Z", "ops@laptop", "deploy", "other", "x9", "ok",
                        "previous -; healthy")]
    releases = [ReleaseInfo(release_id="b2", manifest={"profile": "qwen36-fp8-mtp"})]
    a1, b2 = history_rows(audit, book, releases, "main")
    assert (a1.profile, a1.kv_pool, a1.kv_unit, a1.on_node) == ("qwen36-fp8", 1048576.0,
                                                                "tokens", False)
    assert (b2.profile, b2.kv_pool, b2.verdict_text, b2.on_node) == (
        "qwen36-fp8-mtp", None, "rolled back (kv_cache_oom)", True)

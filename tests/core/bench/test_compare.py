"""Records, summaries over seeds, the noise band and the decision."""

from __future__ import annotations

import json
from typing import Any

from servefleet.core.bench.compare import NOISE_FLOOR, compare, decide
from servefleet.core.bench.record import BenchRecord, parse_records
from servefleet.core.bench.stability import answer_digests, stability
from servefleet.core.bench.summary import summarise
from servefleet.core.bench.table import by_release, chart, summary_row


def rec(scenario: str, seed: int, tok: float, ttft: float, *, run: str = "r1",
        release: str = "rel-a", **figures: Any) -> BenchRecord:
    return BenchRecord(
        at="2026-11-26T10:00:00+00:00", run_id=run, role="run", node="n", deployment="main",
        release=release, profile="p", profile_identity="x" * 64, engine="vllm",
        engine_version="0.32.0", image="img", image_id="sha256:1", scenario=scenario,
        scenario_identity=f"id-{scenario}", shape="512/512 ×1", seed=seed,
        figures={"output_throughput": tok, "mean_ttft_ms": ttft, "completed": 4,
                 "failed": 0, **figures})


def test_a_record_survives_its_line_and_torn_lines_are_counted() -> None:
    record = rec("A", 42, 100.0, 20.0, kv_peak=0.5)
    text = [record.to_line(), '{"schema": 1, "at"', "", json.dumps({"schema": 99})]
    records, skipped = parse_records(text)
    assert records == [record]
    assert skipped == 2


def test_summary_means_and_spread_over_seeds_from_the_newest_run_only() -> None:
    old = rec("A", 42, 10.0, 99.0, run="r0")
    [summary] = summarise([old, rec("A", 42, 100.0, 20.0), rec("A", 123, 110.0, 22.0)])
    assert summary.seeds == (42, 123)
    assert summary.means["output_throughput"] == 105.0
    assert abs(summary.spread["output_throughput"] - 10 / 105) < 1e-9


def test_acceptance_is_read_as_vllm_reports_it_in_percent() -> None:
    [summary] = summarise([rec("A", 42, 1, 1, spec_decode_acceptance_rate=62.5,
                               spec_decode_acceptance_length=2.25)])
    assert summary.acceptance_rate == 0.625
    assert summary.acceptance_length == 2.25
    assert summary_row(summary)[-1] == "62%/2.25"


def summaries(tok: float, ttft: float, spread: float = 0.0, release: str = "a") -> list:
    return summarise([rec("C", 42, tok * (1 - spread / 2), ttft, release=release),
                      rec("C", 123, tok * (1 + spread / 2), ttft, release=release)])


def test_the_control_widens_the_band() -> None:
    # The seeds' own example: +24% throughput and -56% TTFT on C.
    a, b = summaries(100, 100), summaries(124, 44)
    quiet = {c.figure.key: c for c in compare(a, b, summaries(101, 100))}
    assert quiet["output_throughput"].verdict == "better"
    assert quiet["mean_ttft_ms"].verdict == "better"
    assert decide(list(quiet.values())).keep == "B"
    # A control that moved 30% (an image pulled in between) swallows the +24%.
    loud = {c.figure.key: c for c in compare(a, b, summaries(130, 100))}
    assert abs(loud["output_throughput"].band - 0.30) < 1e-9
    assert loud["output_throughput"].verdict == "no change"
    assert loud["mean_ttft_ms"].verdict == "better"


def test_the_band_is_at_least_the_seeds_spread_and_the_floor() -> None:
    [change, _] = compare(summaries(100, 10, spread=0.2), summaries(115, 10))
    assert abs(change.band - 0.2) < 1e-9 and change.verdict == "no change"
    [small, _] = compare(summaries(100, 10), summaries(101.5, 10))
    assert small.band == NOISE_FLOOR and small.verdict == "no change"


def test_decisions() -> None:
    worse = compare(summaries(100, 10), summaries(80, 10))
    assert decide(worse).keep == "A" and "worse" in decide(worse).reason
    same = compare(summaries(100, 10), summaries(100.5, 10))
    assert "nothing measurable" in decide(same).reason
    mixed = compare(summaries(100, 10), summaries(130, 20))
    assert decide(mixed).keep == "A" and "mixed" in decide(mixed).reason
    assert decide([]).keep == "A"


def test_scenarios_with_another_load_are_never_compared() -> None:
    a = summaries(100, 10)
    b = [s.__class__(**{**s.__dict__, "identity": "changed"}) for s in summaries(200, 10)]
    assert compare(a, b) == []


def test_tables() -> None:
    rows = [rec("A", 42, 100, 20, release="r1"), rec("C", 42, 400, 20, release="r1"),
            rec("A", 42, 120, 20, release="r2", run="r2")]
    assert by_release(rows) == [("r1", "A 100 · C 400"), ("r2", "A 120")]
    bars = chart(summarise(rows[:2]), width=8)
    assert [(name, len(bar)) for name, bar, _ in bars] == [("A", 2), ("C", 8)]


def test_stability_compares_answers_prompt_by_prompt() -> None:
    same = answer_digests(["x", "y", "z"])
    runs = [rec("A", 42, 1, 1, answers=same), rec("A", 42, 1, 1, answers=same),
            rec("A", 42, 1, 1, answers=answer_digests(["x", "Y", "z"]))]
    result = stability(runs)
    assert (result.stable, result.prompts, result.unstable) == (2, 3, (1,))
    assert result.text() == "2/3 prompts stable over 3 runs"
    assert stability(runs[:2]).unstable == ()

"""The measured tune's bookkeeping, without a node: a candidate's score from its bench
records under the SLO, and the state file a stopped search resumes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servefleet.adapters.tune import StateFile, candidate_name, measured_trial
from servefleet.core.bench.record import BenchRecord
from servefleet.core.tune.search import Trial
from servefleet.core.tune.slo import parse_slo

POINT = (("max_num_seqs", 4), ("max_num_batched_tokens", 4096))


def record(seed: int, **figures: Any) -> BenchRecord:
    return BenchRecord(at="2026-11-29T12:00:00Z", run_id="r", role="tune", node="n",
                       deployment="d", release="r1", profile="p", profile_identity="i",
                       engine="vllm", engine_version="0.32.0", image="img", image_id="sha",
                       scenario="C", scenario_identity="c", shape="4x64/16", seed=seed,
                       figures=figures)


def test_a_candidate_meeting_the_slo_scores_its_mean_throughput() -> None:
    seeds = [record(42, output_throughput=100.0, p99_ttft_ms=900.0, failed=0),
             record(43, output_throughput=110.0, p99_ttft_ms=1100.0, failed=0)]
    trial = measured_trial(POINT, seeds, parse_slo("ttft_p99<=2s"))
    assert trial.score == 105.0 and trial.why == ""
    assert abs(trial.spread - 10 / 105) < 1e-9


def test_a_missed_bound_or_a_failed_request_leaves_no_score() -> None:
    slow = [record(42, output_throughput=100.0, p99_ttft_ms=2500.0, failed=0)]
    trial = measured_trial(POINT, slow, parse_slo("ttft_p99<=2s"))
    assert trial.score is None and trial.why == "ttft_p99 2500 ms > 2000 ms"
    lost = [record(42, output_throughput=100.0, p99_ttft_ms=100.0, failed=2)]
    trial = measured_trial(POINT, lost, parse_slo("ttft_p99<=2s"))
    assert trial.score is None and trial.why == "2 request(s) failed"


def test_the_state_file_resumes_only_the_same_search(tmp_path: Path) -> None:
    key = {"node": "n", "profile": "p", "knobs": [["max_num_seqs", [1, 4]]]}
    state = StateFile(tmp_path / "s.json", key)
    measured = Trial(POINT, "measured", score=1.0, deployed=True)
    cut = Trial((("max_num_seqs", 1),), "interrupted", deployed=True)
    state.save([measured, cut])
    # The interrupted candidate measured nothing: the resumed search tries it again.
    assert [t.point for t in state.load()] == [POINT]
    assert StateFile(tmp_path / "s.json", {**key, "profile": "other"}).load() == []
    assert not (tmp_path / "s.tmp").exists()


def test_candidate_names_are_profile_names() -> None:
    assert candidate_name("qwen36-fp8", (("max_num_seqs", 4),
                                         ("gpu_memory_utilization", 0.45))) == \
        "qwen36-fp8-tune-4-0p45"

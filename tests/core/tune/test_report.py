"""The measured tune's chart: one bar per benched candidate on one scale, the control's
throughput marked, each line saying whether the SLO held."""

from __future__ import annotations

from servefleet.core.tune.report import chart
from servefleet.core.tune.search import Trial

CONTROL = Trial((("max_num_seqs", 4),), "measured", score=100.0,
                figures={"output_throughput": 100.0}, role="control")


def test_bars_share_one_scale_and_the_control_is_marked() -> None:
    better = Trial((("max_num_seqs", 8),), "measured", score=200.0,
                   figures={"output_throughput": 200.0})
    slow = Trial((("max_num_seqs", 2),), "measured", score=None, why="ttft_p99 2500 ms > 2000 ms",
                 figures={"output_throughput": 50.0})
    lines = chart(CONTROL, [better, slow], width=20)
    control, best, missed = lines[1:]
    assert control.startswith("control: seqs=4") and "██████████|" + " " * 10 in control
    assert "█" * 20 in best and best.endswith("200.0  meets")
    # 50 tok/s: a quarter of the scale, then the control's mark at half.
    assert "█████     |" in missed and missed.endswith("misses: ttft_p99 2500 ms > 2000 ms")


def test_candidates_that_never_reached_a_bench_are_left_to_the_table() -> None:
    failed = Trial((("max_num_seqs", 16),), "failed", why="KV pool below the floor")
    assert len(chart(CONTROL, [failed])) == 2
    assert chart(Trial((), "interrupted"), []) == []

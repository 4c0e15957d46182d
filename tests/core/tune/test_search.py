"""The search's logic on landscapes given as tables (the algorithm, not an engine: what a
real engine's landscape looks like is measured on the simulated fleet, test_tune_fleet and
bench/bench_tune.py): it walks to the best point deploying only next to it, a refused point
costs no deploy, a failed gate costs one and is never the answer, the budget stops it, a
gain within the noise band does not move it, and a resumed search measures nothing twice."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servefleet.core.tune.report import table, verdict
from servefleet.core.tune.search import Budget, Trial, compass_search, grid
from servefleet.core.tune.slo import parse_slo
from servefleet.core.tune.space import Knob, Point, Space

SEQS = (4, 8, 16, 32, 64)
BATCHED = (1024, 4096, 16384)
SPACE = Space((Knob("max_num_seqs", SEQS), Knob("max_num_batched_tokens", BATCHED)),
              (("max_num_seqs", 16), ("max_num_batched_tokens", 4096)))


def rising(point: Point) -> float:
    """Throughput that grows with sequences up to 32 (the scenario's users), then flattens
    and dips, best at the middle batch size."""
    seqs, batched = dict(point)["max_num_seqs"], dict(point)["max_num_batched_tokens"]
    return min(seqs, 32) * 10.0 - (2.0 if seqs > 32 else 0.0) - abs(BATCHED.index(batched) - 1)


def evaluator(score: Callable[[Point], float | None], *, refused: set[Point] = frozenset(),
              failed: set[Point] = frozenset()) -> tuple[Callable[[Point], Trial], list[Point]]:
    deployed: list[Point] = []

    def evaluate(point: Point) -> Trial:
        if point in refused:
            return Trial(point, "refused", why="KV pool below the floor")
        deployed.append(point)
        if point in failed:
            return Trial(point, "failed", why="kv_cache_oom", deployed=True)
        value = score(point)
        return Trial(point, "measured", score=value, deployed=True,
                     figures={"output_throughput": value or 0.0})
    return evaluate, deployed


def control_of(score: Callable[[Point], float | None]) -> Trial:
    value = score(SPACE.origin)
    return Trial(SPACE.origin, "measured", score=value, role="control",
                 figures={"output_throughput": value or 0.0})


def point(seqs: int, batched: int) -> Point:
    return (("max_num_seqs", seqs), ("max_num_batched_tokens", batched))


def test_the_search_walks_to_the_best_point_in_a_third_of_the_grid() -> None:
    grid_trials, _ = grid(SPACE, control_of(rising), evaluator(rising)[0], Budget(20))
    assert len(grid_trials) == SPACE.size - 1 == 14
    grid_best = max(t.score or 0 for t in grid_trials)
    evaluate, deployed = evaluator(rising)
    third = len(grid_trials) // 3
    trials, why = compass_search(SPACE, control_of(rising), evaluate, Budget(third))
    best = max((t for t in trials if t.score is not None), key=lambda t: t.score or 0)
    assert best.point == point(32, 4096) and (best.score or 0) >= 0.95 * grid_best
    assert len(deployed) <= third, deployed
    # Given more, it polls around the best until none is better, then says so.
    evaluate, deployed = evaluator(rising)
    _, why = compass_search(SPACE, control_of(rising), evaluate, Budget(20))
    assert why.startswith("no point next to the best (seqs=32 batched=4096)")
    assert len(set(deployed)) == len(deployed) < len(grid_trials)


def test_a_refused_point_costs_no_deploy_and_a_failed_gate_one() -> None:
    refused = {point(32, 4096)}
    failed = {point(32, 1024)}
    evaluate, deployed = evaluator(rising, refused=refused, failed=failed)
    budget = Budget(20)
    trials, _ = compass_search(SPACE, control_of(rising), evaluate, budget)
    statuses = {t.point: t.status for t in trials}
    assert statuses.get(point(32, 4096)) == "refused" and point(32, 4096) not in deployed
    assert budget.spent == len(deployed)
    if point(32, 1024) in statuses:
        assert statuses[point(32, 1024)] == "failed" and point(32, 1024) in deployed
    best = verdict(control_of(rising), trials).best
    assert best is not None and best.status == "measured"
    assert best.point not in refused | failed


def test_the_budget_stops_the_search() -> None:
    evaluate, deployed = evaluator(rising)
    _, why = compass_search(SPACE, control_of(rising), evaluate, Budget(2))
    assert len(deployed) == 2 and why == "--max-deploys 2 spent"
    stopped = Budget(20, stop=lambda: "--max-minutes 1 passed")
    assert compass_search(SPACE, control_of(rising), evaluate, stopped)[1] == \
        "--max-minutes 1 passed"


def test_a_gain_within_the_noise_band_does_not_move_the_search() -> None:
    flat = {p: 100.0 + 1.0 * SEQS.index(dict(p)["max_num_seqs"]) for p in SPACE.points()}
    evaluate, _ = evaluator(flat.__getitem__)
    trials, _ = compass_search(SPACE, control_of(flat.__getitem__), evaluate, Budget(20))
    # +1% a step, under the 2% floor: only the points around the control were measured.
    around = {p for _, _, p in [*SPACE.neighbours(SPACE.origin),
                                *SPACE.diagonals(SPACE.origin)]}
    assert {t.point for t in trials} <= around
    result = verdict(control_of(flat.__getitem__), trials)
    assert result.winner is None and result.reason.startswith("none beats the profile")


def test_a_resumed_search_measures_nothing_twice() -> None:
    evaluate, first = evaluator(rising)
    trials, _ = compass_search(SPACE, control_of(rising), evaluate, Budget(2))
    recorded = [Trial.from_json(t.to_json()) for t in trials]
    evaluate, second = evaluator(rising)
    resumed, _ = compass_search(SPACE, control_of(rising), evaluate, Budget(20),
                                known=recorded)
    assert not set(first) & set(second)
    best = max((t for t in resumed if t.score is not None), key=lambda t: t.score or 0)
    assert best.point == point(32, 4096)


def test_the_table_names_every_candidate_and_why_it_lost() -> None:
    evaluate, _ = evaluator(rising, refused={point(32, 4096)}, failed={point(16, 16384)})
    control = control_of(rising)
    trials, _ = compass_search(SPACE, control, evaluate, Budget(20))
    result = verdict(control, trials)
    lines = table(control, trials, result.winner)
    assert lines[1].startswith("control: seqs=16 batched=4096")
    assert len(lines) == 2 + len(trials)
    text = "\n".join(lines)
    assert "refused by the planner: KV pool below the floor" in text
    if any(t.status == "failed" for t in trials):
        assert "failed its gate (the node was restored): kv_cache_oom" in text
    assert "best" in text and result.winner is not None


@pytest.mark.parametrize(("text", "key", "limit"), [
    ("ttft_p99<=2s", "p99_ttft_ms", 2000.0), ("tpot_mean<=80ms", "mean_tpot_ms", 80.0),
    ("itl_p50 <= 1.5s", "median_itl_ms", 1500.0), ("e2el_p99<=30s", "p99_e2el_ms", 30000.0)])
def test_slo_bounds_read_as_vllm_figures(text: str, key: str, limit: float) -> None:
    [bound] = parse_slo(text).bounds
    assert (bound.key, bound.limit_ms) == (key, limit)


def test_slo_misses_name_the_bound() -> None:
    slo = parse_slo("ttft_p99<=2s,tpot_mean<=80ms")
    assert slo.misses({"p99_ttft_ms": 1500.0, "mean_tpot_ms": 60.0}) == []
    assert slo.misses({"p99_ttft_ms": 3100.0, "mean_tpot_ms": 60.0}) == [
        "ttft_p99 3100 ms > 2000 ms"]
    assert slo.misses({"p99_ttft_ms": 1.0}) == ["tpot_mean<=80ms: not measured (mean_tpot_ms)"]
    with pytest.raises(ValueError, match="METRIC_STAT<=LIMIT"):
        parse_slo("ttft<2s")


def test_a_screened_point_costs_none_of_the_budget() -> None:
    """The rules refuse a point before the budget is asked: the search polls past the
    refused points and spends its one deploy on the next one the rules allow."""
    refused = {point(64, 4096), point(16, 4096)}

    def screen(p: Point) -> Trial | None:
        return Trial(p, "refused", why="rules") if p in refused else None

    evaluate, deployed = evaluator(rising)
    budget = Budget(1)
    control = Trial(point(32, 4096), "measured", score=rising(point(32, 4096)), role="control")
    space = Space(SPACE.knobs, point(32, 4096))
    trials, why = compass_search(space, control, evaluate, budget, screen=screen)
    assert {t.point for t in trials if t.status == "refused"} == refused
    assert deployed == [point(32, 16384)]
    assert budget.spent == 1 and why == "--max-deploys 1 spent"

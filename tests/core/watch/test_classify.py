"""The verdict over sample sequences: idle, long prefill, wedged (power, canary, no power),
crash loop, down, starting, unreachable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servefleet.core.models.watch import WatchConfig
from servefleet.core.watch.classify import classify, stalled_run
from servefleet.core.watch.sample import GpuSample, Sample, unreachable

CONFIG = WatchConfig()  # wedge_intervals 4, idle power 30 W, canary 2 failures
GB10_WEDGED = (GpuSample(0, power_watts=22.0, utilization_percent=96.0),)
GB10_PREFILL = (GpuSample(0, power_watts=46.0, utilization_percent=95.0),)

BASE = Sample(at=0.0, container_status="running", restart_count=0, started_at="t0",
              health_status=200, generation_tokens=100, prompt_tokens=50,
              requests_running=0, requests_waiting=0, kv_usage=0.0, canary="ok")


def series(*changes: dict[str, object], start: Sample = BASE) -> list[Sample]:
    """One sample per dict, each the previous one with those fields changed."""
    samples, current = [], start
    for index, change in enumerate(changes):
        current = replace(current, at=float(index * 15), **change)  # type: ignore[arg-type]
        samples.append(current)
    return samples


def flat(count: int, **fields: object) -> list[Sample]:
    return series(*[fields] * count)


def test_idle_engine_is_idle_forever() -> None:
    window = flat(40)
    assert classify(window, CONFIG).state == "idle"


def test_idle_engine_at_idle_power_is_not_wedged() -> None:
    # Idle power with nothing held is what every idle GPU does.
    assert classify(flat(40, gpus=GB10_WEDGED), CONFIG).state == "idle"


def test_generation_moving_is_healthy() -> None:
    window = series(*[{"requests_running": 2, "generation_tokens": 100 + 40 * i}
                      for i in range(6)])
    assert classify(window, CONFIG).state == "healthy"


def test_wedge_with_idle_power_fires_after_the_window_and_not_before() -> None:
    held = {"requests_running": 1, "requests_waiting": 3, "gpus": GB10_WEDGED}
    window = flat(CONFIG.wedge_intervals, **held)  # 3 flat intervals
    assert classify(window, CONFIG).state == "healthy"
    window = flat(CONFIG.wedge_intervals + 1, **held)  # 4 flat intervals
    verdict = classify(window, CONFIG)
    assert verdict.state == "wedged"
    assert "idle power" in verdict.reason


def test_long_prefill_at_working_power_never_fires() -> None:
    # vLLM counts prompt tokens only when a prefill completes (vllm/v1/metrics/stats.py):
    # during a long prefill with KV usage reported flat, nothing moves; the GPU draws power.
    window = flat(60, requests_running=1, gpus=GB10_PREFILL)
    verdict = classify(window, CONFIG)
    assert verdict.state == "healthy"
    assert "long prefill" in verdict.reason


def test_long_chunked_prefill_grows_kv_usage_and_is_progress() -> None:
    window = series(*[{"requests_running": 1, "kv_usage": 0.01 * i} for i in range(30)])
    assert stalled_run(window) == 0
    assert classify(window, CONFIG).state == "healthy"


def test_stall_without_power_reading_needs_twice_the_window() -> None:
    held = {"requests_waiting": 2}
    assert classify(flat(2 * CONFIG.wedge_intervals, **held), CONFIG).state == "healthy"
    assert classify(flat(2 * CONFIG.wedge_intervals + 1, **held), CONFIG).state == "wedged"


def test_canary_timeouts_with_health_ok_are_wedged() -> None:
    window = series({}, {}, {"canary": "timeout"})
    assert classify(window, CONFIG).state == "idle"
    window = series({}, {}, {"canary": "timeout"}, {})
    verdict = classify(window, CONFIG)
    assert verdict.state == "wedged"
    assert "canary" in verdict.reason


def test_one_canary_timeout_then_ok_is_not_wedged() -> None:
    window = series({}, {"canary": "timeout"}, {"canary": "ok"})
    assert classify(window, CONFIG).state == "idle"


def test_crash_loop_by_restart_count() -> None:
    window = series({}, {"restart_count": 1}, {"restart_count": 2})
    verdict = classify(window, CONFIG)
    assert verdict.state == "crash_looping"


def test_restarting_status_is_crash_looping() -> None:
    window = series({}, {"container_status": "restarting", "health_status": None})
    assert classify(window, CONFIG).state == "crash_looping"


def test_exited_container_is_down() -> None:
    window = series({}, {"container_status": "exited", "health_status": None})
    assert classify(window, CONFIG).state == "down"


def test_no_container_is_down() -> None:
    assert classify(flat(1, container_status=None), CONFIG).state == "down"


def test_health_failing_is_starting_then_down() -> None:
    failing = {"health_status": 503, "canary": "skipped"}
    assert classify(flat(3, **failing), CONFIG).state == "starting"
    assert classify(flat(4, **failing), CONFIG).state == "down"


def test_unreachable_node_is_unknown_not_down() -> None:
    window = [*flat(3), unreachable(60.0, "connection refused")]
    verdict = classify(window, CONFIG)
    assert verdict.state == "unknown"
    assert "connection refused" in verdict.reason


def test_new_engine_process_breaks_a_stall() -> None:
    held = {"requests_running": 1, "gpus": GB10_WEDGED}
    window = [*flat(5, **held)]
    window[-1] = replace(window[-1], started_at="t1")
    assert stalled_run(window) == 0


def test_counters_missing_never_count_as_stall() -> None:
    window = flat(20, requests_running=1, generation_tokens=None, prompt_tokens=None,
                  gpus=GB10_WEDGED)
    assert classify(window, CONFIG).state == "healthy"


def test_empty_window_is_an_error() -> None:
    with pytest.raises(ValueError):
        classify([], CONFIG)

"""The verdict on one deployment over a window of samples (``docs/watch.md``).

States, checked in this order:

- ``unknown``: the node did not answer the last read (nothing is decided about its engines);
- ``crash_looping``: Docker restarts the container (``restarting``), or its restart count
  rose by ``crash_restarts`` within the window;
- ``down``: no running container, or ``/health`` failed in every one of the last
  ``wedge_intervals`` samples;
- ``wedged``: ``/health`` answers 200 but the engine does not work: the canary timed out
  ``canary_failures`` times in a row, or requests are held while every progress counter
  stays flat for ``wedge_intervals`` intervals with the GPUs at idle power (twice as many
  when no power reading exists);
- ``idle``: nothing held and nothing generated;
- ``healthy``: otherwise (and ``starting`` while ``/health`` has not yet failed long).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from servefleet.core.models.watch import WatchConfig
from servefleet.core.watch.sample import Sample

State = Literal["healthy", "idle", "starting", "wedged", "crash_looping", "down", "unknown"]
STATES: tuple[State, ...] = ("healthy", "idle", "starting", "wedged", "crash_looping", "down",
                             "unknown")
TROUBLE: frozenset[State] = frozenset({"wedged", "crash_looping", "down"})
"""States the recovery policy acts on."""

RUNNING = frozenset({"running"})
KV_EPSILON = 1e-9


@dataclass(frozen=True)
class Verdict:
    """A deployment's state and the one line saying why."""

    state: State
    reason: str


def progressed(before: Sample, after: Sample) -> bool:
    """Any progress counter moved between two samples: tokens generated, prompt tokens (vLLM
    counts them when a prefill completes), or KV usage (it grows chunk by chunk during a
    long prefill). A counter that went down is a new engine process: progress too."""
    for a, b in ((before.generation_tokens, after.generation_tokens),
                 (before.prompt_tokens, after.prompt_tokens)):
        if a is not None and b is not None and a != b:
            return True
    ka, kb = before.kv_usage, after.kv_usage
    if ka is not None and kb is not None and abs(ka - kb) > KV_EPSILON:
        return True
    return before.started_at != after.started_at


def stalled_run(window: Sequence[Sample]) -> int:
    """Intervals, counted back from the newest sample, in which requests were held and no
    progress counter moved."""
    count = 0
    for older, newer in zip(reversed(window[:-1]), reversed(window[1:]), strict=True):
        if not (newer.reachable and older.reachable):
            break
        if not newer.held or not older.held or progressed(older, newer):
            break
        if newer.generation_tokens is None and newer.prompt_tokens is None:
            break  # no counters on the page: nothing to judge a stall by
        count += 1
    return count


def _trailing(window: Sequence[Sample], test: object) -> int:
    count = 0
    for sample in reversed(window):
        if not sample.reachable or not test(sample):  # type: ignore[operator]
            break
        count += 1
    return count


def classify(window: Sequence[Sample], config: WatchConfig) -> Verdict:
    """The state of a deployment given its samples, oldest first (at least one)."""
    if not window:
        raise ValueError("classify needs at least one sample")
    last = window[-1]
    if not last.reachable:
        return Verdict("unknown", "node did not answer: " + "; ".join(last.errors))
    reached = [s for s in window if s.reachable]
    recent = reached[-(config.wedge_intervals + 1):]
    if last.container_status == "restarting":
        return Verdict("crash_looping", f"container restarting (restart count "
                       f"{last.restart_count})")
    counts = [s.restart_count for s in recent if s.restart_count is not None]
    if len(counts) >= 2 and counts[-1] - min(counts) >= config.crash_restarts:
        return Verdict("crash_looping", f"container restarted {counts[-1] - min(counts)} "
                       f"times in {len(recent)} samples")
    if last.container_status not in RUNNING:
        status = last.container_status or "no container"
        return Verdict("down", f"engine {status} (restart count {last.restart_count or 0})")
    failing = _trailing(reached, lambda s: not s.health_ok)
    if failing >= config.wedge_intervals:
        return Verdict("down", f"/health failed {failing} times in a row "
                       f"(last: {last.health_status or 'no answer'})")
    if failing:
        return Verdict("starting", f"/health {last.health_status or 'no answer'} "
                       f"({failing}/{config.wedge_intervals})")
    timeouts = _trailing(reached, lambda s: s.canary == "timeout")
    if timeouts >= config.canary_failures:
        return Verdict("wedged", f"/health 200 but the canary timed out {timeouts} times in "
                       "a row")
    stall = stalled_run(reached)
    idle_power = last.gpus_idle(config.idle_power_watts)
    if stall >= config.wedge_intervals and idle_power:
        return Verdict("wedged", f"{last.held} requests held, no token for {stall} intervals, "
                       f"GPUs at idle power (<= {config.idle_power_watts:g} W)")
    if stall >= 2 * config.wedge_intervals and idle_power is None:
        return Verdict("wedged", f"{last.held} requests held, no token for {stall} intervals "
                       "(no power reading)")
    if stall:
        why = "GPUs busy: a long prefill" if idle_power is False else "watching"
        return Verdict("healthy", f"{last.held} held, counters flat for {stall} "
                       f"intervals ({why})")
    if not last.held and (len(reached) < 2 or not progressed(reached[-2], last)):
        return Verdict("idle", "no request held")
    return Verdict("healthy", f"{last.held or 0} held, tokens moving")

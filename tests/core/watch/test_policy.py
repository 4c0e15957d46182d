"""The recovery ladder: restarts with backoff, then the last-known-good release, then stop."""

from __future__ import annotations

from servefleet.core.models.watch import RecoveryPolicy
from servefleet.core.watch.classify import Verdict
from servefleet.core.watch.policy import LadderState, backoff, decide

POLICY = RecoveryPolicy(max_restarts=2, window_seconds=3600, backoff_seconds=60)
WEDGED = Verdict("wedged", "canary timed out")
HEALTHY = Verdict("healthy", "tokens moving")


def test_healthy_does_nothing() -> None:
    decision = decide(HEALTHY, LadderState(), 0.0, POLICY)
    assert decision.action == "none"
    assert decision.state == LadderState()


def test_full_ladder_with_backoff() -> None:
    state, actions, now = LadderState(), [], 0.0
    for now in (0.0, 30.0, 61.0, 100.0, 181.0, 300.0, 302.0, 500.0, 900.0):
        decision = decide(WEDGED, state, now, POLICY)
        actions.append((now, decision.action))
        state = decision.state
    assert actions == [
        (0.0, "restart"),          # first restart
        (30.0, "wait"),            # backoff 60 s
        (61.0, "restart"),         # second restart
        (100.0, "wait"),           # backoff doubled: 120 s after 61
        (181.0, "restore_last_good"),
        (300.0, "wait"),
        (302.0, "stop_and_alert"),
        (500.0, "wait"),           # stopped: nothing more until the operator deploys
        (900.0, "wait"),
    ]
    assert state.stopped and state.fell_back


def test_restarts_age_out_of_the_window() -> None:
    state = LadderState(restarts=(0.0, 10.0), last_action_at=10.0)
    decision = decide(WEDGED, state, 4000.0, POLICY)
    assert decision.action == "restart"
    assert decision.state.restarts == (4000.0,)


def test_healthy_after_recovery_resets_the_ladder_but_keeps_recent_restarts() -> None:
    state = LadderState(restarts=(0.0,), last_action_at=0.0, fell_back=True, stopped=True)
    decision = decide(HEALTHY, state, 100.0, POLICY)
    assert decision.state == LadderState(restarts=(0.0,), last_action_at=0.0)


def test_recovery_off_only_alerts() -> None:
    decision = decide(WEDGED, LadderState(), 0.0, RecoveryPolicy(enabled=False))
    assert decision.action == "alert"


def test_unified_memory_restart_waits_for_memory() -> None:
    decision = decide(Verdict("crash_looping", "x"), LadderState(), 0.0, POLICY,
                      unified_memory=True)
    assert decision.action == "restart"
    assert decision.wait_for_memory


def test_zero_restarts_goes_straight_to_last_good() -> None:
    decision = decide(WEDGED, LadderState(), 0.0, RecoveryPolicy(max_restarts=0))
    assert decision.action == "restore_last_good"


def test_backoff_doubles() -> None:
    assert [backoff(POLICY, n) for n in range(4)] == [60, 60, 120, 240]

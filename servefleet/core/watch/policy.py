"""The recovery decision for one deployment, as data (``docs/watch.md``).

The ladder, per deployment: restart the engine through the boot gate, at most
``max_restarts`` times within ``window_seconds`` and never sooner than the backoff after the
last action (doubled per restart in the window); then fall back to the last-known-good
release once; then stop the engine and alert, and do nothing more until an operator deploys
(a healthy engine seen again resets the ladder). On a unified-memory node a restart first
waits for the node's free memory to be back above what the profile needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from servefleet.core.models.watch import RecoveryPolicy
from servefleet.core.watch.classify import TROUBLE, Verdict

Action = Literal["none", "wait", "restart", "restore_last_good", "stop_and_alert", "alert"]
"""``none``: nothing wrong; ``wait``: trouble, but inside the backoff (or already stopped);
``alert``: trouble, and recovery is off."""


@dataclass(frozen=True)
class LadderState:
    """Where a deployment stands on the recovery ladder."""

    restarts: tuple[float, ...] = ()
    """Times (watcher clock) of the restarts made."""
    last_action_at: float | None = None
    fell_back: bool = False
    """The last-known-good release was restored since the ladder was last reset."""
    stopped: bool = False
    """The engine was stopped and the operator alerted: nothing more is tried."""

    def in_window(self, now: float, policy: RecoveryPolicy) -> tuple[float, ...]:
        """The restarts within the policy's window."""
        return tuple(t for t in self.restarts if now - t < policy.window_seconds)


@dataclass(frozen=True)
class Decision:
    """What to do now, why, and the ladder after doing it."""

    action: Action
    reason: str
    state: LadderState
    wait_for_memory: bool = False
    """Before starting the engine again, wait until the node's free memory is back above
    what the profile needs (unified-memory nodes)."""


def backoff(policy: RecoveryPolicy, restarts_in_window: int) -> float:
    """Seconds to wait after the last action: the base, doubled per restart in the window."""
    return policy.backoff_seconds * (2 ** max(restarts_in_window - 1, 0))


def decide(verdict: Verdict, state: LadderState, now: float, policy: RecoveryPolicy, *,
           unified_memory: bool = False) -> Decision:
    """The next step for a deployment in ``verdict``'s state."""
    if verdict.state not in TROUBLE:
        if verdict.state == "healthy" and state != LadderState():
            # Serving again (a restart took, or an operator deployed): a fresh ladder, but
            # restarts in the window still count against the next trouble.
            kept = LadderState(restarts=state.in_window(now, policy),
                               last_action_at=state.last_action_at)
            return Decision("none", "serving", kept)
        return Decision("none", verdict.reason, state)
    if not policy.enabled:
        return Decision("alert", f"{verdict.state}: {verdict.reason} (recovery is off)", state)
    if state.stopped:
        return Decision("wait", "stopped after the recovery ladder ran out; deploy to resume",
                        state)
    recent = state.in_window(now, policy)
    if state.last_action_at is not None:
        wait = backoff(policy, len(recent))
        left = state.last_action_at + wait - now
        if left > 0:
            return Decision("wait", f"{verdict.state}: backing off {left:.0f}s more", state)
    if len(recent) < policy.max_restarts:
        return Decision(
            "restart", f"{verdict.state}: {verdict.reason}; restart {len(recent) + 1} of "
            f"{policy.max_restarts} in {policy.window_seconds:g}s",
            replace(state, restarts=(*recent, now), last_action_at=now),
            wait_for_memory=unified_memory)
    if not state.fell_back:
        return Decision(
            "restore_last_good", f"{verdict.state}: {verdict.reason}; {len(recent)} restarts "
            "did not help: restoring the last-known-good release",
            replace(state, restarts=recent, last_action_at=now, fell_back=True),
            wait_for_memory=unified_memory)
    return Decision("stop_and_alert", f"{verdict.state}: {verdict.reason}; restarts and the "
                    "last-known-good release did not help: engine stopped",
                    replace(state, restarts=recent, last_action_at=now, stopped=True))

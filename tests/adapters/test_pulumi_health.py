"""The single-node provider's ``health`` output (no fleet): an engine that runs its release
but has not passed its gate is not ``healthy``, so a refresh shows drift and the next
``pulumi up`` puts it through the gate again."""

from __future__ import annotations

from servefleet.adapters.pulumi_provider import HEALTHY, _health
from servefleet.core.observed import BootSummary, ObservedContainer, ObservedDeployment

RELEASE = "0123456789ab"
STARTED = "2026-11-24T10:00:03.123456789Z"


def state(gated_release: str | None, gated_started_at: str | None) -> ObservedDeployment:
    container = ObservedContainer(id="c1", name="servefleet-main-engine-1", status="running",
                                  started_at=STARTED,
                                  labels={"io.servefleet.release": RELEASE})
    return ObservedDeployment(name="main", current_release=RELEASE, containers=(container,),
                              engine_container_id=container.id,
                              boot=BootSummary(outcome="ready"), gated_release=gated_release,
                              gated_started_at=gated_started_at, engine_version="0.21.0")


def test_an_engine_that_passed_its_gate_is_healthy() -> None:
    assert _health(state(RELEASE, STARTED)) == HEALTHY


def test_an_engine_started_again_since_its_gate_is_ungated() -> None:
    verdict = _health(state(RELEASE, "2026-11-24T09:00:00Z"))
    assert verdict == ("ungated: engine 0123456789ab ungated (started again since its gate "
                       "passed, 0 Docker restarts)")


def test_an_engine_without_a_passed_gate_is_ungated() -> None:
    assert _health(state(None, None)) == ("ungated: engine 0123456789ab ungated (no passed "
                                          "health gate recorded)")

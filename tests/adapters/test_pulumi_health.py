"""The single-node provider's ``health`` output (no fleet): an engine that runs its release
but has not passed its gate is not ``healthy``, so a refresh shows drift and the next
``pulumi up`` puts it through the gate again."""

from __future__ import annotations

from servefleet.adapters.pulumi_provider import HEALTHY, _health
from servefleet.core.drift import BootSummary, ObservedDeploymentState
from servefleet.core.observed import ObservedContainer

RELEASE = "0123456789ab"
STARTED = "2026-11-24T10:00:03.123456789Z"


def state(gated: dict[str, str] | None) -> ObservedDeploymentState:
    container = ObservedContainer(name="servefleet-main-engine-1", status="running",
                                  started_at=STARTED,
                                  labels={"io.servefleet.release": RELEASE})
    return ObservedDeploymentState(deployment="main", current_release=RELEASE,
                                   container=container, boot=BootSummary(outcome="ready"),
                                   gated=gated, engine_version="0.21.0")


def test_an_engine_that_passed_its_gate_is_healthy() -> None:
    assert _health(state({"release": RELEASE, "started": STARTED})) == HEALTHY


def test_an_engine_started_again_since_its_gate_is_ungated() -> None:
    verdict = _health(state({"release": RELEASE, "started": "2026-11-24T09:00:00Z"}))
    assert verdict.startswith("ungated: its container started again since its gate passed")


def test_an_engine_without_a_passed_gate_is_ungated() -> None:
    assert _health(state({})) == "ungated: no passed health gate is recorded for it"

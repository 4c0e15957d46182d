"""The one serving verdict (:mod:`servefleet.core.observed.serving`): each rule of its order
on one observation, and the words plan, drift and both Pulumi providers make of it, so
that the places that used to judge a deployment apart now agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servefleet.adapters.pulumi_multinode import _rank_health
from servefleet.adapters.pulumi_observe import _health
from servefleet.core.observed import BootSummary, ObservedContainer, ObservedDeployment
from servefleet.core.observed.serving import FULL, LINKS_ONLY, engine_container, serving
from servefleet.core.plan import _serving_problem

RELEASE = "0123456789ab"
OLD = "ba9876543210"
STARTED = "2026-11-24T10:00:03.123456789Z"


def container(release: str = RELEASE, **update: Any) -> ObservedContainer:
    facts: dict[str, Any] = {"id": "c1", "name": "servefleet-main-engine-1",
                             "status": "running", "started_at": STARTED,
                             "labels": {"io.servefleet.release": release}}
    return ObservedContainer(**{**facts, **update})


def deployment(*containers: ObservedContainer, **update: Any) -> ObservedDeployment:
    facts: dict[str, Any] = {
        "name": "main", "current_release": RELEASE, "containers": containers,
        "engine_container_id": containers[0].id if containers else None,
        "boot": BootSummary(outcome="ready"), "engine_version": "0.21.0",
        "gated_release": RELEASE, "gated_started_at": STARTED}
    return ObservedDeployment(**{**facts, **update})


CASES = [
    ("nothing", None, LINKS_ONLY, "absent", "nothing deployed"),
    ("no release, no container", deployment(current_release=None), LINKS_ONLY, "absent",
     "nothing deployed"),
    ("docker error", deployment(container(), docker_error="Cannot connect"), LINKS_ONLY,
     "unknown", "engine state unknown (docker: Cannot connect)"),
    ("a release, no container", deployment(), LINKS_ONLY, "down",
     "engine not running (no container)"),
    ("exited", deployment(container(status="exited", exit_code=137)), LINKS_ONLY, "down",
     "engine not running (exited (exit 137))"),
    ("another release runs", deployment(container(OLD), gated_release=OLD), LINKS_ONLY,
     "other-release", f"engine runs release {OLD}, not the current {RELEASE}"),
    ("docker says unhealthy", deployment(container(health="unhealthy")), LINKS_ONLY,
     "unhealthy", "engine is unhealthy (Docker healthcheck)"),
    ("boot failed, log read", deployment(container(), boot=BootSummary(outcome="kv_cache_oom")),
     FULL, "unhealthy", "boot kv_cache_oom"),
    ("boot failed, log not read", deployment(container(),
                                             boot=BootSummary(outcome="kv_cache_oom")),
     LINKS_ONLY, "healthy", ""),
    ("no boot log", deployment(container(), boot=None), FULL, "unhealthy", "no boot log"),
    ("API silent", deployment(container(), engine_version=None,
                              engine_version_error="GET …/version: refused"), FULL,
     "unhealthy", "HTTP API not answering (GET …/version: refused)"),
    ("no gate", deployment(container(), gated_release=None, gated_started_at=None),
     LINKS_ONLY, "ungated", f"engine {RELEASE} ungated (no passed health gate recorded)"),
    ("started again", deployment(container(), gated_started_at="2026-11-24T09:00:00Z"),
     LINKS_ONLY, "ungated",
     f"engine {RELEASE} ungated (started again since its gate passed, 0 Docker restarts)"),
    ("folder gone: mark unread", deployment(container(), present=False, gated_release=None,
                                            gated_started_at=None), LINKS_ONLY, "healthy", ""),
    ("gated", deployment(container()), FULL, "healthy", ""),
]


@pytest.mark.parametrize(("observed", "evidence", "state", "reason"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_rule_gives_its_verdict(observed: ObservedDeployment | None, evidence: Any,
                                     state: str, reason: str) -> None:
    verdict = serving(observed, evidence)
    assert (verdict.state, verdict.reason) == (state, reason)


def test_the_first_matching_rule_wins() -> None:
    # Down and ungated and unhealthy by Docker at once: down is what matters first.
    stopped = container(status="exited", exit_code=1, health="unhealthy")
    assert serving(deployment(stopped, gated_release=None)).state == "down"
    # Another release runs, ungated: the running release is named, not the gate.
    assert serving(deployment(container(OLD), gated_release=None)).state == "other-release"


def test_one_container_pick_for_every_reader() -> None:
    stopped = container(status="exited", exit_code=1)
    running = container(id="c2", name="servefleet-main-engine-2")
    # The reader named none: the running one serves, not the first seen.
    unnamed = deployment(stopped, running, engine_container_id=None)
    assert engine_container(unnamed) == running
    assert serving(unnamed).state == "healthy"
    # No container runs: the first seen is the stopped engine.
    assert engine_container(deployment(stopped, engine_container_id=None)) == stopped


@pytest.mark.parametrize(("observed", "evidence", "state", "reason"),
                         [case[1:] for case in CASES if case[1] is not None],
                         ids=[case[0] for case in CASES if case[1] is not None])
def test_plan_and_the_providers_word_the_same_verdict(observed: ObservedDeployment,
                                                      evidence: Any, state: str,
                                                      reason: str) -> None:
    links = serving(observed, LINKS_ONLY)
    # plan: the reason, except for another running release (its comparer's RunningDiff).
    expected_plan = None if links.state in ("healthy", "other-release") else links.reason
    assert _serving_problem(observed) == expected_plan
    # The single-node provider reads the boot log and the API; the multi-node one does not.
    assert _health(observed) == serving(observed, FULL).words()
    assert _rank_health(observed) == links.words()
    # Docker's unhealthy engine is a problem to every reader (plan said so; health and the
    # providers used to call it serving).
    if state == "unhealthy" and "Docker" in reason:
        assert _serving_problem(observed) == reason
        assert _health(observed).startswith("unhealthy: ")
        assert _rank_health(observed).startswith("unhealthy: ")


def test_health_rows_follow_the_verdict() -> None:
    """``health``'s engine-container row fails where the verdict says Docker's healthcheck
    fails (it used to pass it), and its running-release row where another release runs."""
    from servefleet.adapters.node_health.check import DeploymentCheck
    from servefleet.adapters.node_health.options import HealthOptions
    from servefleet.core.project import load_nodes

    nodes, _, _ = load_nodes(Path(__file__).resolve().parents[2])
    node = nodes["rtx5090"]
    check = DeploymentCheck(None, node, "main", None, HealthOptions())  # type: ignore[arg-type]

    def rows(observed: ObservedDeployment) -> dict[str, str]:
        verdict = serving(observed)
        assert verdict.container is not None
        found = check.container_rows(verdict.container, verdict, RELEASE, [], "vllm")
        return {row.fact: row.verdict for row in found}

    assert rows(deployment(container()))["engine container"] == "pass"
    assert rows(deployment(container(health="unhealthy")))["engine container"] == "fail"
    assert rows(deployment(container(OLD)))["running release"] == "fail"
    assert "running release" not in rows(deployment(container()))

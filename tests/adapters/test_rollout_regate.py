"""The re-gate path, without the fleet: an engine re-created by hand (so no gate mark names
its container) is restarted through the gate by the next deploy, and that gate must read
the boot log of the new run only.

``up -d`` of an unchanged compose project starts the same container again, whose log keeps
the run before; the `stop` just before wrote that run's shutdown lines. Read from a
``--since`` of whole seconds, the log began with them and the parser called the boot ready
before the new run's first line: "the boot log states no KV cache size". The fake node's
Docker keeps each container's log across runs and stamps it, ``date`` and ``StartedAt`` off
one clock (see :mod:`tests.adapters.fake_docker`); the engine's lines are a real vLLM
0.25.1 log (its boot, and its shutdown on SIGTERM).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from fake_node import (
    FakeNodeTransport,
    Fault,
    FollowGateRollout,
    fake_runtime,
    one_deployment_project,
    short_temp_dir,
)

from servefleet.adapters import compose_commands
from servefleet.adapters.node_health import HealthOptions, check_deployment
from servefleet.adapters.probes import HttpAnswer
from servefleet.adapters.rollout import Abort, NodeResult, render_for
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.health_table import HealthRow
from servefleet.core.project import Project
from tests.shared_data import BOOT_LOGS, shared_missing

FIXTURES = BOOT_LOGS
VLLM_LOG = FIXTURES / "vllm-0.25.1-gb10-qwen3.6-35b-a3b-nvfp4-mtp-17.log"
BOOT_LINES = "0:212"
"""Lines 1-212 of the log: the boot, up to ``Application startup complete.``"""
STOP_LINES = "406:418"
"""Lines 407-418: the shutdown after SIGTERM (what ``docker stop`` makes it write)."""
KV_TOKENS = 3_366_051
"""``GPU KV cache size: 3,366,051 tokens`` (line 83)."""
NODE = "dgx-spark-1"
PROFILE = "qwen36-fp8"
SECRETS = {"HF_TOKEN": "hf_regate_test_secret"}


@pytest.fixture
def vllm_log() -> Path:
    if not VLLM_LOG.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{VLLM_LOG} is missing (CI=true: the shared fixtures must be there)")
        shared_missing(f"shared boot-log fixture not found: {VLLM_LOG}")
    return VLLM_LOG


@pytest.fixture
def root() -> Iterator[Path]:
    yield from short_temp_dir("servefleet-regate-")


def project_at(base: Path) -> Project:
    return one_deployment_project(base, NODE, PROFILE)


def deploy(project: Project, transport: FakeNodeTransport) -> tuple[NodeResult,
                                                                     FollowGateRollout]:
    transport.abort = Abort()
    rollout = FollowGateRollout(project, transport.node, fake_runtime(transport),
                                secrets=SECRETS, abort=transport.abort)
    [rendered] = render_for(project, [NODE], SECRETS)
    return rollout.deploy([rendered], {"main": project.stack.deployments[0]}), rollout


def fake_node(project: Project, root: Path, vllm_log: Path,
              stop_lines: bool = True) -> FakeNodeTransport:
    """The fake node under ``root``, its engine printing the recorded boot (and, with
    ``stop_lines``, its shutdown)."""
    transport = FakeNodeTransport(project.nodes[NODE], root / "node", SECRETS)
    transport.env.update(FAKE_DOCKER_BOOT_LOG=str(vllm_log), FAKE_DOCKER_BOOT_LINES=BOOT_LINES)
    if stop_lines:
        transport.env.update(FAKE_DOCKER_STOP_LINES=STOP_LINES)
    return transport


def recreate_by_hand(transport: FakeNodeTransport, project: Project, release: str) -> None:
    """What an operator's ``docker compose up -d --force-recreate`` does: a new container,
    with no gate mark for it."""
    transport.sh(["sh", "-c", 'exec "$@" >/dev/null', "sh", *compose_commands.compose(
        ("docker", "compose"), project.nodes[NODE].base_dir, "main", release,
        ["compose.yaml"], "up", "-d", "--force-recreate")])


def test_an_engine_recreated_by_hand_is_gated_on_its_new_boot_log(
        root: Path, vllm_log: Path) -> None:
    project = project_at(root / "srv")
    transport = fake_node(project, root, vllm_log)
    first, _ = deploy(project, transport)
    assert first.status == "deployed", first.to_json()
    release = first.deployments[0].release_id
    assert release is not None

    # The operator re-creates the engine by hand: a new container, no gate mark for it.
    recreate_by_hand(transport, project, release)
    assert transport.observed().deployments["main"].ungated

    again, rollout = deploy(project, transport)
    result = again.deployments[0]
    assert result.plan is not None and result.plan.action == "update"
    assert any("ungated" in reason for reason in result.plan.reasons)
    # The same container started again: its log holds the hand-made run, its shutdown
    # and the new boot; the gate reads the new boot only.
    [booted] = rollout.booted
    assert booted.facts.outcome == "ready"
    assert booted.facts.kv_cache_tokens == KV_TOKENS, result.to_json()
    assert result.status == "deployed", result.to_json()
    assert not transport.observed().deployments["main"].ungated


def test_health_shows_an_ungated_engine_and_its_restart_count(
        root: Path, vllm_log: Path) -> None:
    project = project_at(root / "srv")
    transport = fake_node(project, root, vllm_log, stop_lines=False)
    first, _ = deploy(project, transport)
    release = first.deployments[0].release_id
    assert release is not None

    def no_engine(_request: object, _timeout: float) -> HttpAnswer:
        return HttpAnswer(0, error="connection refused (no engine on the fake node)")

    options = HealthOptions(secrets=SECRETS, http_send=no_engine, record_baselines=False)

    def rows() -> dict[str, HealthRow]:
        report = check_deployment(project, transport.node, "main",
                                  cast(SshTransport, transport), options)
        return {row.fact: row for row in report.rows}

    gated = rows()
    assert "health gate" not in gated
    assert gated["engine restarts"].observed == "0 (policy on-failure:3)"
    recreate_by_hand(transport, project, release)
    row = rows()["health gate"]
    assert (row.verdict, row.expected) == ("warn", "passed")
    assert "ungated" in row.observed and "servefleet deploy" in row.evidence[0]


def test_a_restore_after_a_stop_that_did_not_happen_boots_the_old_engine_afresh(
        root: Path, vllm_log: Path) -> None:
    """The old engine's stop was cut before it ran (the link dropped): the old engine still
    runs when the restore starts. An `up` of its unchanged project would leave it be and
    print no boot, so the gate would wait for one until its deadline and then stop the
    healthy engine; the restore clears the deployment's containers first and gates a fresh
    boot of the old release."""
    quick = project_at(root / "srv")
    profile = quick.profiles[PROFILE]
    health = profile.health.model_copy(update={"boot_deadline_seconds": 20})
    project = dataclasses.replace(quick, profiles={
        **quick.profiles, PROFILE: profile.model_copy(update={"health": health})})
    transport = fake_node(project, root, vllm_log)
    first, _ = deploy(project, transport)
    assert first.status == "deployed", first.to_json()
    old = first.deployments[0].release_id
    changed = dataclasses.replace(project, stack=project.stack.model_copy(update={
        "deployments": [project.stack.deployments[0].model_copy(update={"port": 8001})]}))
    steps = ("observe the node", "take the node lock", "preflight", "upload", "pull the images",
             "record the rollout phase")
    transport.labels.clear()
    transport.fault = Fault(len(steps), "error")  # the stop of the old engine
    again, rollout = deploy(changed, transport)
    transport.fault = None
    result = again.deployments[0]
    assert transport.labels[len(steps)] == "stop the old engine", transport.labels
    assert result.status == "rolled_back", result.to_json()
    assert result.restore is not None and result.restore.release_id == old
    assert rollout.booted[-1].facts.kv_cache_tokens == KV_TOKENS
    dep = transport.observed().deployments["main"]
    assert dep.running_release == dep.current_release == old and not dep.ungated

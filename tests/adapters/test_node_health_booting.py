"""A health check that meets an engine still inside its boot deadline: *booting*, with the
phase its log reached, not a failure; ``wait`` follows it until ready. Logs and container
states are fed as data: a real vLLM 0.20 boot log cut where the boot had got to, through a
stand-in transport (no node, no fleet)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence

import pytest

from servefleet.adapters.node_health import (
    DeploymentCheck,
    HealthOptions,
    NodeRead,
    parse_lines,
)
from servefleet.adapters.runtime import CommandResult
from servefleet.core.baselines import BaselineBook
from servefleet.core.models import Node
from servefleet.core.observed import ObservedContainer
from servefleet.core.project import Project, load_project
from servefleet.core.secrets import SecretMask
from tests.reference_project import REPO_ROOT
from tests.shared_data import BOOT_LOGS, shared_missing

FIXTURES = BOOT_LOGS
BOOT_LOG = "vllm-0.20.0-gb10-gemma-4-26b-a4b-it-04.log"
ROUTES_LISTED = 149
"""Line 118 starts the API server, then the route list; line 150 is the ready line."""
STARTED_AT = "2026-11-21T10:00:00.5Z"
STARTED_EPOCH = 1795255200.5
RUNNING = json.dumps({"schema": 1, "errors": [], "docker_error": None, "baselines": {},
                      "deployments": {"hc": {"present": True, "current": None, "containers": [
                          {"id": "c0ffee", "name": "servefleet-hc-engine-1",
                           "status": "running", "started_at": STARTED_AT,
                           "image_ref": "x", "labels": {}}]}}})
"""The node reader's answer: the deployment's engine runs."""


def boot_log() -> list[bytes]:
    path = FIXTURES / BOOT_LOG
    if not path.is_file():
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{path} is missing (CI=true: the shared fixtures must be there)")
        shared_missing(f"shared boot-log fixture {path} not found")
    return path.read_bytes().splitlines(keepends=True)


class Transport:
    """What the check and the boot follower ask of a node: the rest of the log as a stream,
    and the container's state."""

    def __init__(self, rest: Sequence[bytes], node: Node) -> None:
        self.node = node
        self.rest = list(rest)
        self.mask = SecretMask()
        self.streams = 0

    def stream_lines(self, argv: Sequence[str], *, timeout: float | None = None,
                     should_stop: Callable[[], bool] | None = None) -> Iterator[bytes]:
        self.streams += 1
        yield from self.rest

    def run(self, argv: Sequence[str], **_: object) -> CommandResult:
        return CommandResult(0, RUNNING.encode(), b"")


@pytest.fixture(scope="module")
def project() -> Project:
    return load_project(REPO_ROOT, "reference")


def check(project: Project, transport: Transport, **options: object) -> DeploymentCheck:
    now = [0.0]
    opts = HealthOptions(clock=lambda: now[0],
                         sleep=lambda s: now.__setitem__(0, now[0] + s),
                         **options)  # type: ignore[arg-type]
    return DeploymentCheck(project, project.nodes["dgx-spark-1"], "hc",
                           transport, opts)  # type: ignore[arg-type]


def outcome(project: Project, lines: list[bytes], seconds_since_start: float,
            transport: Transport | None = None, **options: object
            ) -> tuple[DeploymentCheck, bool]:
    checker = check(project, transport or Transport([], project.nodes["dgx-spark-1"]), **options)
    container = ObservedContainer(name="servefleet-hc-engine-1", status="running",
                                  started_at=STARTED_AT)
    read = NodeRead(now=STARTED_EPOCH + seconds_since_start, book=BaselineBook(),
                    book_problem=None, lines=tuple(lines), has_container=True)
    _, ready = checker.boot_outcome(project.profiles["qwen36-w8a16-1m"], container,
                                    parse_lines(lines, "vllm"), lines, read)
    return checker, ready


def test_a_boot_one_step_before_ready_is_booting_not_failed(project: Project) -> None:
    checker, ready = outcome(project, boot_log()[:ROUTES_LISTED], 1)
    [row] = checker.rows
    assert not ready
    assert row.verdict == "info"
    assert row.observed == "booting: starting the API server (1 s of the 900 s deadline)"
    assert any("Route: " in line for line in row.evidence)
    assert checker.boot_phase == "starting the API server"
    assert checker.failure_class is None


@pytest.mark.parametrize(("lines", "phase"), [(30, "loading weights"), (45, "profiling"),
                                               (60, "capturing CUDA graphs")])
def test_the_phase_is_read_from_the_log(project: Project, lines: int, phase: str) -> None:
    checker, _ = outcome(project, boot_log()[:lines], 120)
    assert checker.boot_phase == phase
    assert checker.rows[0].observed == f"booting: {phase} (120 s of the 900 s deadline)"


def test_past_the_deadline_it_fails(project: Project) -> None:
    checker, _ = outcome(project, boot_log()[:ROUTES_LISTED], 1000)
    [row] = checker.rows
    assert row.verdict == "fail" and checker.failure_class == "boot_deadline"
    assert checker.boot_phase is None


def test_wait_follows_the_boot_until_ready(project: Project) -> None:
    log = boot_log()
    # docker logs --since the start repeats the whole log
    transport = Transport(log, project.nodes["dgx-spark-1"])
    checker, ready = outcome(project, log[:ROUTES_LISTED], 1, transport, wait=True)
    assert ready and checker.rows[0].verdict == "pass"
    assert checker.boot_phase is None


def test_wait_with_a_limit_reports_a_boot_still_in_progress(project: Project) -> None:
    log = boot_log()
    # the boot does not get further while we wait
    transport = Transport(log[:60], project.nodes["dgx-spark-1"])
    checker, ready = outcome(project, log[:45], 1, transport, wait=True, wait_seconds=5)
    assert not ready
    assert checker.boot_phase == "capturing CUDA graphs"
    assert checker.rows[0].verdict == "info"
    assert checker.failure_class is None

"""A node without the fleet: servefleet's real remote scripts run by the local ``sh`` in a
throw-away base directory, with :mod:`fake_docker` as ``docker``, behind a transport that
records every command and can fail, time out, drop the connection, raise
KeyboardInterrupt or deliver a signal at any one of them.

The health gate is the only part replaced (:class:`FakeGateRollout`): it reads the fake
Docker's containers through the transport (so it is a step like any other) and fails for
the releases the test names; boot-log parsing and probes have their own tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from servefleet.adapters.boot_follow import BootResult, follow_boot
from servefleet.adapters.health_gate import HealthReport, check_kv_pool, check_outcome
from servefleet.adapters.observe import observe_command, parse_observed
from servefleet.adapters.rollout import (
    Abort,
    DeploymentResult,
    NodeRollout,
    Target,
)
from servefleet.adapters.runtime import CommandResult, NodeRuntime, Transport, runtime_for
from servefleet.adapters.runtime.ssh.compose import ComposeSshRuntime
from servefleet.core.errors import CommandTimedOut, ConnectionLost, RemoteError
from servefleet.core.health_table import CheckRow
from servefleet.core.models import Deployment, Node
from servefleet.core.observed import ObservedNode
from servefleet.core.project import Project, load_project
from servefleet.core.secrets import SecretMask
from tests.reference_project import REPO_ROOT

FAKE_DOCKER = Path(__file__).with_name("fake_docker.py")


def short_temp_dir(prefix: str) -> Iterator[Path]:
    """A fixture's body: a throw-away folder with a short path (unix socket paths and the
    fake Docker's files under it stay short), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def one_deployment_project(base: Path, node: str, profile: str) -> Project:
    """The reference stack with deployment ``main`` of ``profile`` on ``node`` (on its first
    port), the node's ``base_dir`` moved to ``base``."""
    project = load_project(REPO_ROOT, "reference")
    moved = project.nodes[node].model_copy(update={"base_dir": str(base)})
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=node, name="main", profile=profile, port=moved.ports[0])]})
    return dataclasses.replace(project, nodes={**project.nodes, node: moved}, stack=stack)

FaultKind = Literal["error", "timeout", "lost", "interrupt", "sigterm", "sigterm-twice"]
FAULT_KINDS: tuple[FaultKind, ...] = ("error", "timeout", "lost", "interrupt", "sigterm",
                                      "sigterm-twice")
"""``error``: the command exits 1 without running; ``timeout``: it runs, then the transport
reports a timeout; ``lost``: the connection is gone from here on (a controller that died);
``interrupt``: KeyboardInterrupt instead of the command; ``sigterm``: SIGTERM arrives, the
command runs; ``sigterm-twice``: two signals arrive, the command runs."""


@dataclass
class Fault:
    """What to do at which command."""

    step: int
    """Index of the command (0: the first ``run`` of the rollout)."""
    kind: FaultKind
    """See :data:`FAULT_KINDS`."""


@dataclass
class FakeNodeTransport:
    """:class:`~servefleet.adapters.runtime.base.Transport`'s interface over the local ``sh``."""

    node: Node
    root: Path
    secrets: dict[str, str] = field(default_factory=dict)
    fault: Fault | None = None
    abort: Abort | None = None
    labels: list[str] = field(default_factory=list)
    lost: bool = False

    def __post_init__(self) -> None:
        self.mask = SecretMask.from_mapping(self.secrets)
        bindir = self.root / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        docker = bindir / "docker"
        if not docker.exists():
            docker.write_text(f"#!/bin/sh\nexec {sys.executable} -S -E {FAKE_DOCKER} \"$@\"\n")
            docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
        # The node's clock is the fake Docker's, so that `up`'s `since=` and the log's
        # timestamps are read off one clock, as on a node.
        clock = bindir / "date"
        if not clock.exists():
            clock.write_text(f"#!/bin/sh\nexec {sys.executable} -S -E {FAKE_DOCKER} __date "
                             "\"$@\"\n")
            clock.chmod(clock.stat().st_mode | stat.S_IXUSR)
        self.env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
                    "FAKE_DOCKER_STATE": str(self.root / "docker.json")}

    def __enter__(self) -> FakeNodeTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to close."""

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
            timeout: float | None = 120, check: bool = True, idempotent: bool = True,
            what: str | None = None) -> CommandResult:
        """Run ``argv`` locally, unless the fault for this step says otherwise."""
        label = what or str(argv[0])
        step = len(self.labels)
        self.labels.append(label)
        if self.lost:
            raise ConnectionLost(self.node.name, f"{label}: connection lost")
        fault = self.fault if self.fault is not None and self.fault.step == step else None
        kind = fault.kind if fault is not None else None
        if kind == "interrupt":
            raise KeyboardInterrupt
        if kind == "lost":
            self.lost = True
            raise ConnectionLost(self.node.name, f"{label}: connection lost")
        if kind in ("sigterm", "sigterm-twice"):
            assert self.abort is not None
            self.abort.trip("SIGTERM")
            if kind == "sigterm-twice":
                self.abort.trip("SIGTERM")
        if kind == "error":
            result = CommandResult(1, b"", b"injected failure")
        else:
            done = subprocess.run(list(argv), input=stdin or b"", capture_output=True,
                                  env=self.env, timeout=60, check=False)
            result = CommandResult(done.returncode, done.stdout, done.stderr)
        if kind == "timeout":
            raise CommandTimedOut(self.node.name, f"{label}: no exit after {timeout} s")
        if check and not result.ok:
            tail = self.mask(result.stderr.decode("utf-8", "replace")[-500:])
            raise RemoteError(self.node.name, label, result.exit_status, tail)
        return result

    def stream_lines(self, argv: Sequence[str], *, timeout: float | None = None,
                     should_stop: Any = None) -> Generator[bytes, None, None]:
        """``argv``'s output lines (stdout and stderr merged), as the SSH transport streams
        them; the fake Docker's ``logs --follow`` ends with the log written so far."""
        self.labels.append("stream " + " ".join(argv[-3:]))
        if self.lost:
            raise ConnectionLost(self.node.name, "stream: connection lost")
        done = subprocess.run(list(argv), capture_output=True, env=self.env, timeout=60,
                              check=False)
        yield from (done.stdout + done.stderr).splitlines(keepends=True)

    # -- what the test reads, without going through the fault ---------------------------
    def sh(self, argv: Sequence[str], stdin: bytes | None = None) -> str:
        """Run ``argv`` locally, no fault, not recorded."""
        done = subprocess.run(list(argv), input=stdin or b"", capture_output=True,
                              env=self.env, timeout=60, check=True)
        return done.stdout.decode()

    def observed(self, deployment: str = "main", *, key: str = "") -> ObservedNode:
        """The node as servefleet reads it (no fault, not recorded)."""
        argv, stdin = observe_command(self.node, [deployment], key=key)
        return parse_observed(self.node.name, self.sh(argv, stdin), [deployment], key=key)

    def docker_state(self) -> dict[str, Any]:
        """The fake Docker's state file."""
        path = self.root / "docker.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}


def fake_runtime(transport: FakeNodeTransport) -> NodeRuntime:
    """The rollout's real runtime (the one the factory picks for the node: Compose) over
    the fake node."""
    return runtime_for(cast(Transport, transport))


class FakeNodeRollout(NodeRollout):
    """A rollout over a fake node, whose tests reach past the runtime to its transport."""

    @property
    def transport(self) -> Transport:
        """The fake node's transport (behind the runtime)."""
        return cast(ComposeSshRuntime, self.runtime).transport


class FakeGateRollout(FakeNodeRollout):
    """A rollout whose gate passes when the target release's container runs, unless the
    release is in ``failing``."""

    failing: frozenset[str] = frozenset()

    def gate(self, result: DeploymentResult, target: Target, since: str,
             deadline: float) -> HealthReport:
        with self.phase(result, "boot"):
            argv, stdin = observe_command(self.node, [target.deployment])
            text = self.transport.run(argv, stdin=stdin, what="follow the boot log").text()
            seen = parse_observed(self.node.name, text, [target.deployment])
            running = [c for c in seen.deployments[target.deployment].containers
                       if c.running]
        with self.phase(result, "health"):
            self.check_abort("health")
            serves = bool(running) and running[0].release_id == target.release_id
            ok = serves and target.release_id not in self.failing
            verdict: Literal["pass", "fail"] = "pass" if ok else "fail"
            row = CheckRow("/health", "200", "200" if ok else "503", verdict,
                           () if ok else ("engine answered 503 (injected)",))
            return HealthReport(f"http://{self.node.address}:{target.port}", (row,),
                                None if ok else "engine_unhealthy")


class FollowGateRollout(FakeNodeRollout):
    """A rollout whose gate follows the engine's boot log for real (``up``'s ``since=``,
    ``docker logs --follow --since``, :func:`~servefleet.adapters.boot_follow.follow_boot`
    and the boot-log parser) and holds it to the gate's boot checks (outcome, KV pool);
    the HTTP probes are left out: no engine answers on the fake node."""

    booted: list[BootResult]

    def gate(self, result: DeploymentResult, target: Target, since: str,
             deadline: float) -> HealthReport:
        with self.phase(result, "boot"):
            booted = follow_boot(self.transport, target.deployment, since,
                                 engine=target.engine, deadline=deadline,
                                 clock=self.deadline_clock(), sleep=lambda _s: None)
        self.booted = [*getattr(self, "booted", []), booted]
        with self.phase(result, "health"):
            rows = [check_outcome(booted.facts, target.gate)]
            kv = check_kv_pool(booted.facts, target.gate)
            rows += [kv] if kv is not None else []
            failed = any(r.verdict == "fail" for r in rows)
            return HealthReport(f"http://{self.node.address}:{target.port}", tuple(rows),
                                "gate_failed" if failed else None)

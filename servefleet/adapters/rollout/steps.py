"""The frame every rollout step runs in: phases (timed, reported, recorded in the lock,
errors turned into :class:`StepFailed`), interruptions, the audit line, hooks, and the boot
followed through the health gate.

:class:`RolloutBase` acts on the node only through its
:class:`~servefleet.adapters.runtime.node.NodeRuntime`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from servefleet.adapters.health_gate import HealthReport, HttpGet, http_get, run_gate, send_through
from servefleet.adapters.lock import whoami
from servefleet.adapters.node_health import HealthOptions, api_key_for
from servefleet.adapters.probes import EngineClient
from servefleet.adapters.rollout.control import Abort, Clock
from servefleet.adapters.rollout.results import (
    DeploymentResult,
    GaveUp,
    Progress,
    ProgressEvent,
    StepFailed,
)
from servefleet.adapters.rollout.target import Target
from servefleet.adapters.runtime.node import NodeRuntime, RuntimeLock
from servefleet.core.bootlog.lines import clean_line
from servefleet.core.errors import RemoteError, ServefleetError
from servefleet.core.gpu import free_memory_check
from servefleet.core.models import Node
from servefleet.core.project import Project

RECORDED_PHASES = frozenset({"stop", "up", "boot", "switch", "restore"})
"""Phases recorded in the lock's state line before they start: from ``stop`` on, what serves
changes, so a controller that dies there leaves a node the next plan must explain."""
RECORD_TIMEOUT_SECONDS = 30
"""Best-effort bookkeeping (lock state, audit line) on the way out of an interruption."""


@dataclass(frozen=True)
class HookCall:
    """What a hook is given."""

    runtime: NodeRuntime
    """The node."""
    target: Target
    """The release being made current."""
    say: Callable[[str], None]
    """Report a line of progress under the hook's phase."""
    report: HealthReport | None = None
    """The passed gate's report (``after_gate`` hooks only)."""
    node: str = ""
    """The node's name."""


@dataclass(frozen=True)
class Hook:
    """A step another feature adds to every rollout, run as a phase of its own."""

    phase: str
    """The phase's name in progress lines and results (``stage-weights``…)."""
    run: Callable[[HookCall], None]
    """The step; raising fails the phase like any other."""


@dataclass(frozen=True)
class RolloutHooks:
    """Steps run around the commit: ``before_stop`` while the old engine still serves (a
    failure leaves it serving), ``after_gate`` once the new engine passed its gate and
    before ``current`` switches (a failure restores the old release), ``after_restore``
    once a failed rollout's engine serves again: its restore passed the gate, or the
    rollout failed before the old engine was stopped (a failure there is a warning)."""

    before_stop: tuple[Hook, ...] = ()
    after_gate: tuple[Hook, ...] = ()
    after_restore: tuple[Hook, ...] = ()


def _epoch(text: str) -> float | None:
    """The node time ``start`` returned (epoch seconds), if it is one."""
    try:
        return float(text)
    except ValueError:
        return None


class RolloutBase:
    """A rollout's frame on one node (see the module docstring)."""

    def __init__(self, project: Project, node: Node, runtime: NodeRuntime, *,
                 clock: Clock | None = None, progress: Progress | None = None,
                 http: HttpGet = http_get, unlock_id: str | None = None,
                 keep_releases: int | None = None,
                 secrets: Mapping[str, str] | None = None, abort: Abort | None = None,
                 hooks: RolloutHooks | None = None) -> None:
        self.project = project
        self.node = node
        self.runtime = runtime
        self.clock = clock or Clock()
        self.progress = progress
        # The default sends every probe through urllib with the profile's API key; a
        # caller's own GET carries no headers.
        self.send = None if http is http_get else send_through(http)
        self.secrets = dict(secrets or {})
        self.unlock_id = unlock_id
        self.keep = keep_releases or project.stack.keep_releases
        self.started = self.clock.monotonic()
        self.abort = abort or Abort()
        self.hooks = hooks or RolloutHooks()
        self.lock: RuntimeLock | None = None
        """The lock while a rollout holds it (its state line records the phase)."""
        self.restoring = False
        """A restore runs: a first signal no longer cuts it short, only a second one."""

    def emit(self, phase: str, deployment: str | None = None, message: str = "") -> None:
        """Report a phase to the progress callback."""
        if self.progress is not None:
            self.progress(ProgressEvent(self.node.name, deployment, phase,
                                        self.clock.monotonic() - self.started, message))

    @contextlib.contextmanager
    def phase(self, result: DeploymentResult, name: str) -> Iterator[None]:
        """Time a phase, report it, record it in the lock when it changes what serves, and
        turn remote errors into :class:`StepFailed`; a pending abort stops before it."""
        self.check_abort(name)
        if name in RECORDED_PHASES:
            self.record(name, result.deployment, result.release_id)
        self.emit(name, result.deployment)
        start = self.clock.monotonic()
        try:
            yield
        except (StepFailed, GaveUp):
            raise
        except KeyboardInterrupt:
            # Without our handlers (a caller's own loop), Ctrl-C arrives as an exception.
            self.abort.trip("SIGINT")
            self.check_abort(name)
            raise StepFailed(name, f"{self.node.name}: {name}: interrupted (SIGINT)",
                             "interrupted") from None
        except ServefleetError as error:
            raise StepFailed(name, str(error)) from error
        except Exception as error:
            # A dropped stream or anything unforeseen must still lead to the restore path.
            text = self.runtime.mask(str(error) or type(error).__name__)
            raise StepFailed(name, f"{self.node.name}: {name}: {text}") from error
        finally:
            result.phases.append((name, self.clock.monotonic() - start))

    def run_hooks(self, result: DeploymentResult, hooks: tuple[Hook, ...], target: Target,
                  report: HealthReport | None = None) -> None:
        """Each hook as a phase of its own."""
        for hook in hooks:
            with self.phase(result, hook.phase):
                hook.run(HookCall(self.runtime, target, self._sayer(hook.phase, target),
                                  report, self.node.name))

    def _sayer(self, phase: str, target: Target) -> Callable[[str], None]:
        def say(line: str) -> None:
            self.emit(phase, target.deployment, line)
        return say

    def check_abort(self, phase: str) -> None:
        """Raise :class:`GaveUp` after a second signal, and :class:`StepFailed` (class
        ``interrupted``) after a first one unless a restore is running."""
        if self.abort.give_up:
            raise GaveUp(f"{self.node.name}: gave up {phase} on a second signal")
        if self.abort.requested and not self.restoring:
            raise StepFailed(phase, f"{self.node.name}: interrupted by {self.abort.signal_name}"
                             f" before {phase}", "interrupted")

    def record(self, phase: str, deployment: str, release: str | None,
               abandoned: str | None = None) -> None:
        """Write the lock's state line (best effort: a controller that cannot write it
        has lost the node, and the lock still names the previous phase)."""
        if self.lock is None:
            return
        line = f"phase={phase} deployment={deployment} release={release or '-'} at={self.now()}"
        if abandoned is not None:
            self.lock.abandon(f"{line} abandoned={'-'.join(abandoned.split())}")
        else:
            self.lock.record(line)

    def now(self) -> str:
        """The wall-clock time as the node's records write it."""
        return self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")

    def deadline_clock(self) -> Callable[[], float]:
        """The monotonic clock, except that it jumps past every deadline once the rollout
        must stop waiting: a first signal ends a boot being followed (not a restore's),
        a second ends everything. Following the boot log and polling the gate both stop
        at their deadline, so this is how a signal reaches them."""
        def now() -> float:
            if self.abort.give_up or (self.abort.requested and not self.restoring):
                return float("inf")
            return self.clock.monotonic()
        return now

    def audit_line(self, operation: str, deployment: str, release: str | None, status: str,
                   detail: str = "") -> str:
        """``time  who  operation  release  status  detail`` (tab-separated, one line)."""
        text = " ".join(self.runtime.mask(detail).split())
        return "\t".join([self.now(), whoami(), operation, deployment, release or "-", status,
                          text])

    def mark_gated(self, deployment: str, release_id: str) -> None:
        """Record that the running engine of ``release_id`` passed its gate."""
        self.runtime.mark_gated(deployment, release_id, self.now())

    def gpu_check(self, target: Target) -> None:
        """Enough free GPU memory for the engine's utilization, when the node can tell.

        Optional: a node without python3 or without a readable GPU (the simulated fleet)
        skips it; only a reading that proves the memory is short fails the rollout.
        """
        if target.utilization is None:
            return
        try:
            reading = self.runtime.gpu_reading()
        except RemoteError as error:
            self.emit("gpu", target.deployment, f"GPU probe unavailable: {error}")
            return
        if reading.source == "none" or not reading.gpus:
            self.emit("gpu", target.deployment, "no GPU readable: memory check skipped")
            return
        problem = free_memory_check(reading, target.utilization, self.node.unified_memory)
        if problem is not None:
            raise StepFailed("gpu", f"{self.node.name}: {problem}")

    def boot(self, result: DeploymentResult, target: Target) -> HealthReport:
        """Start the engine, follow the boot log, run the health gate and, when it passed,
        the rest of the health checks; return the report of both."""
        deadline = self.clock.monotonic() + target.gate.boot_deadline_seconds
        with self.phase(result, "up"):
            since = self.runtime.start(target)
        return self.gate(result, target, since, deadline)

    def gate(self, result: DeploymentResult, target: Target, since: str,
             deadline: float) -> HealthReport:
        """Follow the boot log from ``since`` and run the health gate and the rest of the
        health checks before ``deadline`` (phases ``boot`` and ``health``)."""
        clock = self.deadline_clock()
        with self.phase(result, "boot"):
            booted = self.runtime.follow_boot(
                target, since, deadline=deadline, clock=clock,
                on_line=lambda line: self.emit("boot", target.deployment,
                                               clean_line(line, 0).msg[:160]))
        with self.phase(result, "health"):
            url = f"http://{self.node.address}:{target.port}"
            api_key = api_key_for(target.profile, self.secrets) if target.profile else None
            client = EngineClient(url, api_key=api_key)
            if self.send is not None:
                client.send = self.send
            report = run_gate(booted.facts, url, target.gate, deadline=deadline,
                              client=client, clock=clock,
                              sleep=self.clock.sleep, failure_class=booted.failure_class,
                              log_tail=booted.tail)
            self.check_abort("health")
            if not report.ok or target.profile is None:
                return report
            rows, failure_class = self.runtime.health_checks(
                self.project, target, facts=booted.facts, base_url=url, since=_epoch(since),
                options=HealthOptions(
                    secrets=self.secrets, now=self.clock.now, clock=self.clock.monotonic,
                    sleep=self.clock.sleep, http_send=self.send))
            return dataclasses.replace(report, checks=(*report.checks, *rows),
                                       failure_class=report.failure_class or failure_class)

"""The rollout executor: carry out plans on nodes over SSH, safely.

Per node, over one connection:

1. **observe** (one read-only command) and **plan**; when every deployment is unchanged the
   node is left alone: no lock, no audit line, no write of any kind;
2. **lock** the node (and re-observe in the same round trip), then per changed deployment:
3. **preflight** (docker and compose present, disk space, port free), **upload** the
   release (tar on stdin into ``staging/``, checked, renamed into ``releases/``), **build**
   the overlay image if any; a current release whose files were edited on the node is
   uploaded again, its edited folder moved aside to ``releases/<id>.edited-<UTC time>``;
4. **stop** the old engine: one deployment is one compose project on one port, so the old
   and new engines can never run side by side (and a GPU rarely holds two);
5. check **GPU memory** through the NVML probe when the node has one, **up -d**, **follow
   the boot log** as it streams, run the **health gate** before the profile's deadline
   (boot-log checks, ``/health`` and ``/v1/models``), then the rest of the **health
   checks** (:func:`servefleet.adapters.node_health.gate_checks`: ``/version``, a chat
   completion, ``/metrics``, the TurboQuant long prompt, determinism when the profile asks
   for it, the KV pool against the node's baseline, which a healthy boot records);
6. **mark** the engine as gated (``gated``, ``last-good``), **switch** ``current`` (the
   commit point), then **prune** old releases and append the **audit** line; a failure
   after the switch is a warning and never undoes a healthy switch.

Images are **pulled** (and overlays built) before the old engine stops, outside the boot
deadline. Any failure once the old engine was stopped restores the release that served
before (else ``last-good``, else ``previous``: ``up -d`` of its folder, boot followed,
health gated again) and reports both the failure, with the log lines that prove it, and the
restore. ``current`` moves only after a passed gate, so it always names a release that
served.

**Interruptions.** SIGINT, SIGTERM and SIGHUP become a controlled abort (:class:`Abort`):
the phase in progress ends early, the restore runs, the audit log gets its line and the
lock is released. A second signal gives up: the audit line is written and the lock is left
in place marked ``abandoned`` with the phase, so the next ``plan`` shows what was left and
the next deploy takes the lock over and repairs it. A controller that dies without a word
leaves the lock with its last recorded phase (written before every phase that changes what
serves); the plan shows it and ``servefleet unlock NODE LOCK_ID`` removes it.

The remote layout is described in :mod:`servefleet.adapters.remote`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from secrets import token_hex
from typing import Any, Literal

from servefleet.adapters import releases as release_store
from servefleet.adapters import remote
from servefleet.adapters.boot_follow import follow_boot
from servefleet.adapters.gpu_probe import run_probe
from servefleet.adapters.health_gate import (
    GateSpec,
    HealthReport,
    HttpGet,
    http_get,
    run_gate,
    send_through,
    unchanged_profile,
)
from servefleet.adapters.lock import NodeLock, whoami
from servefleet.adapters.lock import force_unlock as remove_lock
from servefleet.adapters.node_health import HealthOptions, api_key_for, gate_checks
from servefleet.adapters.probes import EngineClient
from servefleet.adapters.ssh import SshTransport
from servefleet.core.bootlog.lines import clean_line
from servefleet.core.errors import ConfigError, RemoteError, ServefleetError, ValidationFailed
from servefleet.core.gpu import free_memory_check
from servefleet.core.history import gate_record
from servefleet.core.models import Deployment, Node, Profile
from servefleet.core.observed import (
    ObservedDeployment,
    ObservedNode,
    PreflightFacts,
    ReleaseInfo,
    parse_observation,
    parse_preflight,
)
from servefleet.core.plan import PlanItem, plan, recovery_notes
from servefleet.core.project import Project
from servefleet.core.render import RenderedRelease, manifest_for, render_deployments
from servefleet.core.rules import Finding, Severity, validate
from servefleet.core.rules.facts import gpu_memory_utilization
from servefleet.core.secrets import SecretMask

MIN_FREE_DISK_BYTES = 1 << 30
"""Refuse to deploy onto a node with less free space than this under its base directory."""
BUILD_TIMEOUT_SECONDS = 1800
UP_TIMEOUT_SECONDS = 600
FAILED_STOP_GRACE_SECONDS = 5
"""A failed (crash-looping or hung) engine has nothing to finish: stop it quickly."""

Strategy = Literal["parallel", "rolling"]
DeploymentStatus = Literal["unchanged", "deployed", "failed", "rolled_back", "restore_failed",
                           "interrupted", "skipped"]
RECORDED_PHASES = frozenset({"stop", "up", "boot", "switch", "restore"})
"""Phases recorded in the lock's state line before they start: from ``stop`` on, what serves
changes, so a controller that dies there leaves a node the next plan must explain."""
RECORD_TIMEOUT_SECONDS = 30
"""Best-effort bookkeeping (lock state, audit line) on the way out of an interruption."""
SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


# -- progress and results --------------------------------------------------------------------
@dataclass(frozen=True)
class ProgressEvent:
    """A node entered a phase (sent from the node's worker thread)."""

    node: str
    """Node name."""
    deployment: str | None
    """Deployment, for per-deployment phases."""
    phase: str
    """``observe``, ``lock``, ``preflight``, ``upload``, ``build``, ``stop``, ``gpu``,
    ``up``, ``boot``, ``health``, ``switch``, ``restore``, ``done``…"""
    elapsed: float
    """Seconds since this node's rollout started."""
    message: str = ""
    """Detail for humans (a boot-log line, the outcome)."""


Progress = Callable[[ProgressEvent], None]


@dataclass(frozen=True)
class Clock:
    """Time, passed in so tests can control it."""

    monotonic: Callable[[], float] = time.monotonic
    """Seconds for measuring durations and deadlines."""
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    """Wall-clock time for manifests, locks and audit lines."""
    sleep: Callable[[float], None] = time.sleep
    """Wait between polls."""


class GaveUp(Exception):
    """A second signal: stop at once, record the node's state, keep the lock."""


class Abort:
    """Signals turned into a controlled abort, shared by every node's worker.

    The first signal asks each rollout to stop at its next phase boundary (a boot being
    followed ends at once) and restore; the second gives up: record and leave. A signal
    handler only sets flags here: it never raises into the middle of a remote command.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.signal_name: str | None = None
        """The first signal received (``SIGINT``…)."""
        self.give_up = False
        """A second signal arrived."""

    def trip(self, name: str) -> None:
        """A signal (or a KeyboardInterrupt) arrived."""
        with self._lock:
            if self.signal_name is None:
                self.signal_name = name
            else:
                self.give_up = True

    @property
    def requested(self) -> bool:
        """A first signal arrived."""
        return self.signal_name is not None

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[Abort]:
        """Route SIGINT, SIGTERM and SIGHUP here while the block runs (main thread only;
        elsewhere, e.g. inside a Pulumi provider's worker, the lock's recorded phase is
        what survives)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous: dict[int, Any] = {}
        for name in SIGNALS:
            number = getattr(signal, name, None)
            if number is None:
                continue
            previous[number] = signal.signal(number, lambda num, _frame:
                                             self.trip(signal.Signals(num).name))
        try:
            yield self
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


@dataclass
class Failure:
    """Why a deployment did not deploy."""

    phase: str
    """Phase that failed."""
    message: str
    """One line for the operator."""
    failure_class: str | None = None
    """Boot-log failure class (``kv_cache_oom``…), ``boot_deadline`` or ``engine_exited``."""
    evidence: tuple[str, ...] = ()
    """Log lines that prove it."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"phase": self.phase, "message": self.message,
                "failure_class": self.failure_class, "evidence": list(self.evidence)}


@dataclass
class Restore:
    """The previous release brought back after a failure."""

    release_id: str
    """Release restored."""
    ok: bool
    """It booted and passed its health gate again."""
    message: str
    """One line for the operator."""
    health: HealthReport | None = None
    """Its health report."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"release_id": self.release_id, "ok": self.ok, "message": self.message,
                "health": self.health.to_json() if self.health else None}


@dataclass
class DeploymentResult:
    """What happened to one deployment."""

    node: str
    """Node name."""
    deployment: str
    """Deployment name."""
    status: DeploymentStatus
    """``unchanged``, ``deployed``, ``failed`` (failed before the old engine stopped, or
    nothing to restore: the failed engine is stopped), ``rolled_back`` (failed, the release
    that served before restored and gated), ``restore_failed`` (no engine serves),
    ``interrupted`` (a second signal: the node's state is recorded in the lock and the
    audit log, for the next deploy to repair), ``skipped``."""
    release_id: str | None = None
    """Release that was to run."""
    previous_release: str | None = None
    """Release that was current before."""
    plan: PlanItem | None = None
    """The plan executed."""
    health: HealthReport | None = None
    """Health report of the new release."""
    failure: Failure | None = None
    """Why it failed."""
    restore: Restore | None = None
    """The restore after a failure."""
    phases: list[tuple[str, float]] = field(default_factory=list)
    """Phases run and their seconds."""
    warnings: list[str] = field(default_factory=list)
    """Problems after the commit point (prune, audit, gate mark): the switch stands."""

    @property
    def ok(self) -> bool:
        """Deployed or already right."""
        return self.status in ("unchanged", "deployed")

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "node": self.node, "deployment": self.deployment, "status": self.status,
            "release_id": self.release_id, "previous_release": self.previous_release,
            "plan": self.plan.to_json() if self.plan else None,
            "health": self.health.to_json() if self.health else None,
            "failure": self.failure.to_json() if self.failure else None,
            "restore": self.restore.to_json() if self.restore else None,
            "phases": [{"phase": p, "seconds": round(s, 3)} for p, s in self.phases],
            "warnings": list(self.warnings),
        }


@dataclass
class NodeResult:
    """What happened on one node."""

    node: str
    """Node name."""
    deployments: list[DeploymentResult] = field(default_factory=list)
    """Per deployment."""
    error: str | None = None
    """A node-level failure (unreachable, host key refused, locked)."""
    error_kind: str | None = None
    """Its exception class name (``HostKeyMismatch``, ``LockHeld``…)."""
    elapsed: float = 0.0
    """Seconds the node took."""

    @property
    def ok(self) -> bool:
        """Every deployment deployed or was already right, and no node-level error."""
        return self.error is None and all(d.ok for d in self.deployments)

    @property
    def status(self) -> str:
        """The node's headline: ``error``, the worst deployment status, or ``unchanged``."""
        if self.error is not None:
            return "skipped" if self.error_kind == "skipped" else "error"
        order = ("interrupted", "restore_failed", "failed", "rolled_back", "skipped",
                 "deployed", "unchanged")
        statuses = {d.status for d in self.deployments}
        return next((s for s in order if s in statuses), "unchanged")

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"node": self.node, "status": self.status, "ok": self.ok,
                "error": self.error, "error_kind": self.error_kind,
                "elapsed": round(self.elapsed, 3),
                "deployments": [d.to_json() for d in self.deployments]}


class StepFailed(Exception):
    """A rollout phase failed (internal: turned into a :class:`Failure`)."""

    def __init__(self, phase: str, message: str, failure_class: str | None = None,
                 evidence: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.failure = Failure(phase, message, failure_class, tuple(evidence))


@dataclass(frozen=True)
class Target:
    """A release to make current: freshly rendered, or one already on the node."""

    deployment: str
    """Deployment name."""
    release_id: str
    """Release id."""
    port: int
    """Port the engine listens on."""
    engine: str
    """``vllm`` or ``llama.cpp``."""
    compose_files: tuple[str, ...]
    """Compose files in ``-f`` order, relative to the release folder."""
    builds_image: bool
    """Whether the release builds an overlay image."""
    gate: GateSpec
    """What its health gate checks."""
    profile: Profile | None = None
    """Its profile, for the health checks beyond the gate's own; ``None`` for a release
    whose profile the project no longer has unchanged (only the gate's checks run)."""
    utilization: float | None = None
    """``--gpu-memory-utilization`` for the GPU memory check (vLLM only)."""
    rendered: RenderedRelease | None = None
    """The rendered files, when they may need uploading."""
    deployment_model: Deployment | None = None
    """The stack's deployment, for the manifest."""


def _epoch(text: str) -> float | None:
    """The node time ``up`` printed (epoch seconds), if it is one."""
    try:
        return float(text)
    except ValueError:
        return None


def _utilization(profile: Profile) -> float | None:
    """The share of GPU memory a vLLM engine takes (None: llama.cpp, not checked)."""
    if profile.vllm is None:
        return None
    return gpu_memory_utilization(profile)


# -- the per-node executor -------------------------------------------------------------------
class NodeRollout:
    """Rollouts on one node over one connection."""

    def __init__(self, project: Project, node: Node, transport: SshTransport, *,
                 clock: Clock | None = None, progress: Progress | None = None,
                 http: HttpGet = http_get, unlock_id: str | None = None,
                 keep_releases: int | None = None,
                 secrets: Mapping[str, str] | None = None, abort: Abort | None = None) -> None:
        self.project = project
        self.node = node
        self.transport = transport
        self.clock = clock or Clock()
        self.progress = progress
        # The default sends every probe through urllib with the profile's API key; a
        # caller's own GET carries no headers.
        self.send = None if http is http_get else send_through(http)
        self.secrets = dict(secrets or {})
        self.unlock_id = unlock_id
        self.keep = keep_releases or project.stack.keep_releases
        self.started = self.clock.monotonic()
        self.compose_cmd: tuple[str, ...] = ("docker", "compose")
        self.abort = abort or Abort()
        self.lock: NodeLock | None = None
        """The lock while a rollout holds it (its state line records the phase)."""
        self.restoring = False
        """A restore runs: a first signal no longer cuts it short, only a second one."""
        self.observe_key = ""
        """The random key of the last observation's secret digests (see
        :func:`servefleet.core.plan.rotated_secrets`): kept in memory only."""

    # -- helpers --------------------------------------------------------------------------
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
            text = self.transport.mask(str(error) or type(error).__name__)
            raise StepFailed(name, f"{self.node.name}: {name}: {text}") from error
        finally:
            result.phases.append((name, self.clock.monotonic() - start))

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
        at = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        line = f"phase={phase} deployment={deployment} release={release or '-'} at={at}"
        if abandoned is not None:
            self.lock.abandon(f"{line} abandoned={'-'.join(abandoned.split())}")
        else:
            self.lock.record(line)

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

    def observe(self, deployments: Sequence[str]) -> ObservedNode:
        """One read-only command: the lock and the deployments' facts."""
        # Read-only: retried once after a dropped connection.
        self.observe_key = token_hex(32)
        result = self.transport.run(remote.observe(self.node.base_dir, deployments,
                                                   key=self.observe_key),
                                    idempotent=True, what="observe the node")
        return self._parse_observation(result.text())

    def _parse_observation(self, text: str) -> ObservedNode:
        try:
            return parse_observation(text)
        except ValueError as error:
            raise RemoteError(self.node.name, f"observe: {error}") from None

    def audit_line(self, operation: str, deployment: str, release: str | None, status: str,
                   detail: str = "") -> str:
        """``time  who  operation  release  status  detail`` (tab-separated, one line)."""
        when = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        text = " ".join(self.transport.mask(detail).split())
        return "\t".join([when, whoami(), operation, deployment, release or "-", status, text])

    # -- deploy ---------------------------------------------------------------------------
    def plan(self, releases: Sequence[RenderedRelease]) -> tuple[ObservedNode, list[PlanItem]]:
        """Observe and plan (read-only)."""
        self.emit("observe")
        observed = self.observe([r.deployment for r in releases])
        items = []
        for rendered in releases:
            dep = observed.deployments.get(rendered.deployment)
            items.append(dataclasses.replace(plan(
                rendered, dep, secret_key=self.observe_key.encode()), recovery=recovery_notes(
                observed.lock, dep, rendered.deployment),
                node_baselines=observed.baselines_text))
        return observed, items

    def deploy(self, releases: Sequence[RenderedRelease],
               deployments: Mapping[str, Deployment]) -> NodeResult:
        """Bring every deployment of ``releases`` to its release (see the module docstring)."""
        result = NodeResult(self.node.name)
        observed, items = self.plan(releases)
        if not any(item.changes for item in items):
            result.deployments = [self._unchanged(item) for item in items]
            self.emit("done", message="unchanged")
            return result
        self.emit("lock")
        lock = NodeLock(self.transport, "deploy", self.clock.now(), unlock_id=self.unlock_id)
        # Re-observe under the lock in the same round trip: another rollout may have
        # finished between the first look and the lock.
        self.observe_key = token_hex(32)
        text = lock.acquire(remote.observe(self.node.base_dir, [r.deployment for r in releases],
                                           key=self.observe_key))
        self.lock = lock
        try:
            if lock.taken_over is not None:
                how = (f"of process {lock.taken_over.pid} on this machine, which is gone,"
                       if lock.holder_gone else "abandoned")
                self.emit("lock", message=f"took over the lock {how} "
                          f"{lock.taken_over.where()}: repairing")
            observed = self._parse_observation(text)
            for rendered in releases:
                dep = observed.deployments.get(rendered.deployment)
                item = plan(rendered, dep, secret_key=self.observe_key.encode())
                if not item.changes:
                    result.deployments.append(self._unchanged(item))
                    continue
                if self.abort.requested:
                    result.deployments.append(DeploymentResult(
                        self.node.name, item.deployment, "skipped", item.release_id,
                        item.current_release, plan=item, failure=Failure(
                            "lock", f"not started: interrupted by {self.abort.signal_name}",
                            "interrupted")))
                    continue
                target = self.target_for(rendered, deployments[rendered.deployment])
                deployed = self.activate(target, dep, "deploy", item)
                result.deployments.append(deployed)
                if deployed.status == "interrupted":
                    break
        finally:
            self.lock = None
            lock.release()  # a no-op once abandoned: the lock then stays for the next run
        self.emit("done", message=result.status)
        return result

    def _unchanged(self, item: PlanItem) -> DeploymentResult:
        # Nothing to deploy, but a lock left by a rollout that died is still worth a word:
        # only `servefleet unlock NODE LOCK_ID` removes it.
        return DeploymentResult(self.node.name, item.deployment, "unchanged", item.release_id,
                                item.current_release, plan=item,
                                warnings=list(item.recovery))

    def target_for(self, rendered: RenderedRelease, deployment: Deployment) -> Target:
        """The target of a freshly rendered release."""
        profile = self.project.profiles[rendered.profile]
        return Target(
            deployment=rendered.deployment, release_id=rendered.release_id,
            port=rendered.port, engine=rendered.engine,
            compose_files=tuple(rendered.compose_files), builds_image=rendered.builds_image,
            gate=GateSpec.for_profile(profile, self.node), profile=profile,
            utilization=_utilization(profile), rendered=rendered, deployment_model=deployment)

    def target_from_manifest(self, deployment: str, release_id: str,
                             manifest: Mapping[str, Any]) -> Target:
        """The target of a release already on the node, described by its manifest."""
        gate = GateSpec.for_manifest(manifest, self.project.profiles, self.node)
        files = manifest.get("compose_files")
        profile = self.project.profiles.get(str(manifest.get("profile")))
        return Target(
            deployment=deployment, release_id=release_id,
            port=int(manifest.get("port") or self.node.ports[0]),
            engine=str(manifest.get("engine") or gate.engine),
            compose_files=tuple(files) if isinstance(files, list) else ("compose.yaml",),
            builds_image=bool(manifest.get("builds_image")), gate=gate,
            profile=unchanged_profile(manifest, self.project.profiles),
            utilization=_utilization(profile) if profile is not None else None)

    # -- one deployment -------------------------------------------------------------------
    def activate(self, target: Target, observed: ObservedDeployment | None, operation: str,
                 item: PlanItem | None = None) -> DeploymentResult:
        """Make ``target`` the running, current release (under the node lock)."""
        previous = observed.current_release if observed else None
        result = DeploymentResult(self.node.name, target.deployment, "failed",
                                  target.release_id, previous, plan=item)
        touched = started = False
        try:
            try:
                with self.phase(result, "preflight"):
                    self.preflight(target, observed)
                if target.rendered is not None and (item is None or item.upload):
                    with self.phase(result, "upload"):
                        self.upload(target, repair=item is not None and item.repair)
                if target.builds_image:
                    with self.phase(result, "build"):
                        self.transport.run(remote.build(self.compose_cmd, self.node.base_dir,
                                                        target.deployment, target.release_id,
                                                        target.compose_files),
                                           timeout=BUILD_TIMEOUT_SECONDS, idempotent=False,
                                           what="build the image overlay")
                else:
                    with self.phase(result, "pull"):
                        self.pull(target)
                with self.phase(result, "stop"):
                    # Set inside the phase: an abort caught at its start has touched
                    # nothing, and "restoring" a release that never stopped would re-gate
                    # an engine whose boot log is long past (and stop it when that fails).
                    touched = True
                    if observed is not None and observed.containers:
                        self.transport.run(remote.stop(target.deployment), timeout=300,
                                           what="stop the old engine")
                with self.phase(result, "gpu"):
                    self.gpu_check(target)
                started = True
                report = self.boot(result, target)
                result.health = report
                if not report.ok:
                    raise StepFailed("health", report.summary(), report.failure_class,
                                     report.evidence())
                self.check_abort("switch")
                self.commit(result, target, operation, previous, report)
            except StepFailed as failed:
                result.failure = failed.failure
                self.recover(result, target, operation, touched, started, observed)
        except GaveUp as gave_up:
            self.give_up(result, target, operation, str(gave_up), started)
        except KeyboardInterrupt:
            # Outside any phase: bookkeeping after the switch, or stopping the failed
            # engine before a restore. After the switch the release stands; before it, the
            # node's state is recorded instead of restored.
            self.abort.trip("SIGINT")
            if result.status == "deployed":
                result.warnings.append("interrupted after the switch: the prune or the "
                                       "audit line may be missing")
            else:
                self.give_up(result, target, operation, "interrupted (SIGINT) while "
                             "recovering", started)
        return result

    def commit(self, result: DeploymentResult, target: Target, operation: str,
               previous: str | None, report: HealthReport) -> None:
        """The gate passed: mark the engine gated, switch ``current`` (the commit point),
        then prune and audit. Nothing after the switch undoes it: a failure there is a
        warning on a deployment that did deploy."""
        try:
            self.mark_gated(target.deployment, target.release_id)
        except ServefleetError as error:
            result.warnings.append(f"gate mark not written (health and drift will call the "
                                   f"engine ungated until the next deploy): {error}")
        with self.phase(result, "switch"):
            self.transport.run(remote.switch_current(self.node.base_dir, target.deployment,
                                                     target.release_id),
                               idempotent=True, what=f"switch current to {target.release_id}")
        result.status = "deployed"
        self.finish(result, target.deployment, [target.release_id, previous],
                    self.audit_line(operation, target.deployment, target.release_id, "ok",
                                    f"previous {previous or '-'}; {report.summary()}"
                                    + self.gate_record(result, target, report)))

    @staticmethod
    def gate_record(result: DeploymentResult, target: Target, report: HealthReport | None,
                    failure_class: str | None = None) -> str:
        """The audit line's gate record (``servefleet history`` reads it): profile, KV
        pool, concurrency, CUDA-graph mode, boot seconds (``up`` to ready), failure class."""
        timed = [seconds for phase, seconds in result.phases if phase in ("up", "boot")]
        return gate_record(
            profile=target.profile.name if target.profile is not None else None,
            facts=report.facts if report is not None else {},
            boot_seconds=sum(timed) if timed else None,
            failure_class=failure_class or (report.failure_class if report else None))

    def finish(self, result: DeploymentResult, deployment: str, protect: Sequence[str | None],
               audit_line: str) -> None:
        """After the switch: prune, then audit; each failure is a warning."""
        kept = [r for r in protect if r]
        steps = (("prune old releases", remote.prune_releases(
                      self.node.base_dir, deployment, self.keep, kept)),
                 ("append the audit line", remote.append_audit(
                      self.node.base_dir, deployment, audit_line)))
        for what, argv in steps:
            try:
                self.transport.run(argv, idempotent=False, timeout=RECORD_TIMEOUT_SECONDS * 4,
                                   what=what)
            except ServefleetError as error:
                result.warnings.append(f"{what} failed after the switch (the new release "
                                       f"stays current): {error}")

    def mark_gated(self, deployment: str, release_id: str) -> None:
        """Record that the running engine of ``release_id`` passed its gate."""
        at = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        self.transport.run(remote.mark_gated(self.node.base_dir, deployment, release_id, at),
                           idempotent=True, timeout=RECORD_TIMEOUT_SECONDS * 2,
                           what="mark the engine gated")

    def pull(self, target: Target) -> None:
        """Pull the release's missing images while the old engine still serves."""
        done = self.transport.run(
            remote.pull(self.compose_cmd, self.node.base_dir, target.deployment,
                        target.release_id, target.compose_files),
            timeout=BUILD_TIMEOUT_SECONDS, idempotent=True, what="pull the images")
        for line in done.text().splitlines():
            self.emit("pull", target.deployment, line)

    def give_up(self, result: DeploymentResult, target: Target, operation: str, why: str,
                started: bool) -> None:
        """A second signal: write the audit line and leave the lock, marked abandoned with
        the phase, so that the next plan shows what was left and the next deploy repairs
        it. No waiting: each record is one short command, best effort."""
        phase = result.phases[-1][0] if result.phases else "lock"
        result.status = "interrupted"
        engine = (f"engine {target.release_id} may run ungated" if started
                  else "no new engine started")
        result.failure = result.failure or Failure(phase, f"{why}; {engine}", "interrupted")
        with contextlib.suppress(ServefleetError):
            self.transport.run(remote.append_audit(
                self.node.base_dir, target.deployment, self.audit_line(
                    operation, target.deployment, target.release_id, "interrupted",
                    f"{phase}: {why}; {engine}")),
                idempotent=False, timeout=RECORD_TIMEOUT_SECONDS, what="append the audit line")
        self.record(phase, target.deployment, target.release_id,
                    abandoned=f"second signal during {phase}")

    def preflight(self, target: Target, observed: ObservedDeployment | None) -> PreflightFacts:
        """Docker, compose, disk, port; raise :class:`StepFailed` naming what is missing."""
        facts = parse_preflight(self.transport.run(
            remote.preflight(self.node.base_dir, target.port), idempotent=True,
            what="preflight").text())
        problems = []
        if facts.docker_version is None:
            problems.append(f"docker is not usable ({facts.docker_error or 'not found'})")
        if facts.compose is None:
            problems.append("neither `docker compose` nor `docker-compose` is installed")
        else:
            self.compose_cmd = facts.compose
        if facts.disk_free_bytes is not None and facts.disk_free_bytes < MIN_FREE_DISK_BYTES:
            problems.append(f"only {facts.disk_free_bytes / 2**30:.2f} GiB free under "
                            f"{self.node.base_dir} (need {MIN_FREE_DISK_BYTES / 2**30:.0f} GiB)")
        own_port = observed is not None and observed.running and \
            int((observed.manifest or {}).get("port") or -1) == target.port
        if facts.port_in_use and not own_port:
            problems.append(f"port {target.port} is already in use by another process")
        if problems:
            raise StepFailed("preflight", f"{self.node.name}: " + "; ".join(problems))
        return facts

    def upload(self, target: Target, *, repair: bool = False) -> None:
        """Send the release with its manifest (one command). ``repair``: the release folder
        on the node was edited there; it is moved aside to ``<id>.edited-<UTC time>`` (kept
        for forensics, pruned like an old release) and the rendered files take its place."""
        assert target.rendered is not None and target.deployment_model is not None
        now = self.clock.now()
        manifest = manifest_for(target.rendered, target.deployment_model,
                                created_at=now, created_by=whoami())
        manifest["boot_deadline_seconds"] = target.gate.boot_deadline_seconds
        aside = f"edited-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}" if repair else None
        release_store.upload(self.transport, target.rendered, manifest, aside)

    def gpu_check(self, target: Target) -> None:
        """Enough free GPU memory for the engine's utilization, when the node can tell.

        Optional: a node without python3 or without a readable GPU (the simulated fleet)
        skips it; only a reading that proves the memory is short fails the rollout.
        """
        if target.utilization is None:
            return

        def run_remote(argv: list[str], stdin: bytes) -> tuple[int, bytes, bytes]:
            done = self.transport.run(argv, stdin=stdin, check=False, what="GPU probe")
            return done.exit_status, done.stdout, done.stderr

        try:
            reading = run_probe(run_remote, node=self.node.name)
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
        """``up -d``, follow the boot log, run the health gate and, when it passed, the rest
        of the health checks; return the report of both."""
        deadline = self.clock.monotonic() + target.gate.boot_deadline_seconds
        with self.phase(result, "up"):
            done = self.transport.run(
                remote.up(self.compose_cmd, self.node.base_dir, target.deployment,
                          target.release_id, target.compose_files),
                timeout=UP_TIMEOUT_SECONDS, idempotent=False, what="start the engine")
            since = remote.parse_since(done.text())
        return self.gate(result, target, since, deadline)

    def gate(self, result: DeploymentResult, target: Target, since: str,
             deadline: float) -> HealthReport:
        """Follow the boot log from ``since`` and run the health gate and the rest of the
        health checks before ``deadline`` (phases ``boot`` and ``health``)."""
        clock = self.deadline_clock()
        with self.phase(result, "boot"):
            booted = follow_boot(
                self.transport, target.deployment, since, engine=target.engine,
                deadline=deadline, clock=clock,
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
            rows, failure_class = gate_checks(
                self.transport, self.node, target.profile, target.deployment,
                release_id=target.release_id, facts=booted.facts, base_url=url,
                since=_epoch(since), project=self.project, options=HealthOptions(
                    secrets=self.secrets, now=self.clock.now, clock=self.clock.monotonic,
                    sleep=self.clock.sleep, http_send=self.send))
            return dataclasses.replace(report, checks=(*report.checks, *rows),
                                       failure_class=report.failure_class or failure_class)

    def recover(self, result: DeploymentResult, target: Target, operation: str, touched: bool,
                started: bool, observed: ObservedDeployment | None) -> None:
        """After a failure: stop the failed engine, restore what served before once the old
        engine was stopped (else ``last-good``, else ``previous``), and write the audit line
        (best effort: the node may be gone). A second signal here raises :class:`GaveUp`."""
        failure = result.failure
        assert failure is not None
        chosen = restore_candidate(observed, target.release_id) if touched else None
        try:
            if started:
                # A failed engine must not keep serving or restarting; when it cannot be
                # stopped, the restore's `up` still replaces it (one project, one engine).
                try:
                    self.transport.run(remote.stop(target.deployment,
                                                   grace_seconds=FAILED_STOP_GRACE_SECONDS),
                                       timeout=300, what="stop the failed engine")
                except ServefleetError as error:
                    result.warnings.append(f"the failed engine {target.release_id} could not "
                                           f"be stopped ({error}): unless the restore "
                                           "replaced it, it may serve ungated")
            if chosen is not None:
                result.restore = self.restore(result, chosen)
                result.status = "rolled_back" if result.restore.ok else "restore_failed"
            elif touched and observed is not None and observed.running:
                result.restore = Restore("-", False, "no earlier release on the node to "
                                         "restore: no engine serves")
                result.status = "restore_failed"
        except ServefleetError as error:
            if result.restore is None and chosen is not None:
                result.restore = Restore(chosen, False, f"not restored: {error}")
                result.status = "restore_failed"
        detail = f"{failure.phase}: {failure.message}"
        if result.restore is not None:
            detail += f"; restored {result.restore.release_id}: {result.restore.message}"
        detail += self.gate_record(result, target, result.health, failure.failure_class)
        with contextlib.suppress(ServefleetError):
            release_store.audit(self.transport, target.deployment, self.audit_line(
                operation, target.deployment, target.release_id, result.status, detail))

    def restore(self, result: DeploymentResult, release_id: str) -> Restore:
        """Start ``release_id`` again, gate it, and make it ``current`` when it passes."""
        deployment = result.deployment
        self.emit("restore", deployment, f"restoring {release_id}")
        self.restoring = True
        try:
            with self.phase(result, "restore"):
                manifest = self.manifest_of(deployment, release_id)
                # A clean slate: an interrupted step may have left the old engine half
                # stopped (a cut `docker stop`) or a container a cut `up` created or
                # renamed; an `up` beside them may start nothing new, and the gate would
                # then read a boot log long past.
                self.transport.run(remote.clear(deployment,
                                                grace_seconds=FAILED_STOP_GRACE_SECONDS),
                                   timeout=300, what="clear the deployment's containers")
            target = self.target_from_manifest(deployment, release_id, manifest)
            scratch = DeploymentResult(self.node.name, deployment, "failed", release_id)
            try:
                report = self.boot(scratch, target)
            except StepFailed as failed:
                report = None
                message = failed.failure.message
            finally:
                result.phases += [(f"restore {p}", t) for p, t in scratch.phases]
            if report is None or not report.ok:
                with contextlib.suppress(ServefleetError):
                    self.transport.run(remote.stop(deployment,
                                                   grace_seconds=FAILED_STOP_GRACE_SECONDS),
                                       what="stop the failed restore")
                return Restore(release_id, False,
                               report.summary() if report is not None else message, report)
            warnings: list[str] = []
            try:
                self.mark_gated(deployment, release_id)
                # What serves is what current names: the restored release passed its gate.
                self.transport.run(remote.switch_current(self.node.base_dir, deployment,
                                                         release_id),
                                   idempotent=True, what=f"switch current to {release_id}")
            except ServefleetError as error:
                warnings.append(f" (bookkeeping failed: {error})")
                result.warnings.append(f"restored {release_id}, but its gate mark or the "
                                       f"switch of current was not written: {error}")
            return Restore(release_id, True,
                           f"release {release_id} serves again{''.join(warnings)}", report)
        except StepFailed as failed:
            return Restore(release_id, False, failed.failure.message)
        finally:
            self.restoring = False

    def manifest_of(self, deployment: str, release_id: str) -> Mapping[str, Any]:
        """A release's manifest, read from the node."""
        infos = release_store.list_releases(self.transport, deployment)
        found = next((i for i in infos if i.release_id == release_id), None)
        if found is None or found.manifest is None:
            raise StepFailed("restore", f"{self.node.name}/{deployment}: release {release_id} "
                             "has no readable manifest")
        return found.manifest

    # -- rollback -------------------------------------------------------------------------
    def rollback(self, deployment: str, to: str | None = None) -> DeploymentResult:
        """Make an earlier release current again (default: the one before ``current``)."""
        self.emit("lock", deployment)
        lock = NodeLock(self.transport, "rollback", self.clock.now(), unlock_id=self.unlock_id)
        text = lock.acquire(remote.observe(self.node.base_dir, [deployment]))
        self.lock = lock
        try:
            observed = self._parse_observation(text).deployments.get(deployment)
            if observed is None:
                raise ConfigError(f"{self.node.name}: deployment {deployment!r} has never been "
                                  "deployed here")
            infos = release_store.list_releases(self.transport, deployment)
            chosen = choose_rollback(infos, observed.current_release, to,
                                     f"{self.node.name}/{deployment}")
            if chosen.manifest is None:
                raise ConfigError(f"{self.node.name}/{deployment}: release "
                                  f"{chosen.release_id} has no readable manifest")
            target = self.target_from_manifest(deployment, chosen.release_id, chosen.manifest)
            return self.activate(target, observed, "rollback")
        finally:
            self.lock = None
            lock.release()


def restore_candidate(observed: ObservedDeployment | None, failed: str) -> str | None:
    """The release a failure restores: what was current (it served), else ``last-good``
    (the last release that passed its gate here: a failed repair of the current release
    lands here or on ``previous``), else ``previous``; never the release that just failed,
    and only one whose folder is on the node."""
    if observed is None:
        return None
    for release in (observed.current_release, observed.last_good, observed.previous_release):
        if release and release != failed and release in observed.releases:
            return release
    return None


EDITED_MARK = ".edited-"
"""Infix of a release folder moved aside by a repair (``<id>.edited-<UTC time>``)."""


def choose_rollback(infos: Sequence[ReleaseInfo], current: str | None, to: str | None,
                    where: str) -> ReleaseInfo:
    """The release a rollback goes to: ``to``; else the one ``previous`` names (what was
    current before); else the newest one made before ``current``. A hand-edited copy kept
    aside by a repair (``<id>.edited-<time>``) is never chosen by default: only by name."""
    known = {info.release_id: info for info in infos}
    if to is not None:
        if to not in known:
            raise ConfigError(f"{where}: no release {to!r} on the node (there: "
                              f"{', '.join(known) or 'none'})")
        return known[to]
    candidates = [i for i in infos if i.release_id != current and EDITED_MARK not in i.release_id]
    previous = next((i for i in candidates if i.previous), None)
    if previous is not None:
        return previous
    current_info = known.get(current or "")
    older = [i for i in candidates
             if current_info is None or i.created_at < current_info.created_at]
    if not older:
        raise ConfigError(f"{where}: no release older than the current {current or '-'} to "
                          "roll back to (see `servefleet releases`; --to RELEASE picks one)")
    return older[0]  # infos are newest first


# -- fleet-level entry points ----------------------------------------------------------------
TransportFactory = Callable[[Node, SecretMask], SshTransport]


def _default_transport(node: Node, mask: SecretMask) -> SshTransport:
    return SshTransport(node, mask=mask)


def _node_error(name: str, error: Exception, started: float, clock: Clock) -> NodeResult:
    kind = type(error).__name__
    return NodeResult(name, error=str(error), error_kind=kind,
                      elapsed=clock.monotonic() - started)


def _group(releases: Sequence[RenderedRelease]) -> dict[str, list[RenderedRelease]]:
    grouped: dict[str, list[RenderedRelease]] = {}
    for rendered in releases:
        grouped.setdefault(rendered.node, []).append(rendered)
    return grouped


def check_rules(project: Project) -> list[Finding]:
    """Run every validation rule (what ``servefleet validate`` runs): raise
    :class:`ValidationFailed` with one line per error, before any node is touched; return
    the warnings and notices for the caller to show."""
    findings = validate(project)
    errors = [f for f in findings if f.severity is Severity.ERROR]
    if errors:
        raise ValidationFailed([str(f) for f in errors])
    return findings


def render_for(project: Project, nodes: Sequence[str] | None,
               secrets: Mapping[str, str] | None, *,
               require_secrets: bool = True) -> list[RenderedRelease]:
    """Validate the project (errors stop here), then render the stack's deployments on
    ``nodes`` (all when empty); one error for all."""
    check_rules(project)
    deployments = project.deployments(list(nodes) if nodes else None)
    if not deployments:
        raise ConfigError(f"stack {project.stack.stack!r} places nothing on "
                          f"{', '.join(nodes or []) or 'any node'}")
    return render_deployments(project, deployments, secrets, require_secrets=require_secrets)


def plan_fleet(project: Project, nodes: Sequence[str] | None = None,
               secrets: Mapping[str, str] | None = None, *,
               transport_factory: TransportFactory = _default_transport,
               ) -> tuple[list[PlanItem], list[NodeResult]]:
    """Observe every node (in parallel, read-only) and plan. Returns the plan items and
    node-level errors (unreachable nodes, refused host keys)."""
    releases = render_for(project, nodes, secrets, require_secrets=False)
    mask = SecretMask.from_mapping(secrets)
    clock = Clock()
    grouped = _group(releases)

    def one(name: str) -> list[PlanItem] | NodeResult:
        started = clock.monotonic()
        try:
            with transport_factory(project.nodes[name], mask) as transport:
                return NodeRollout(project, project.nodes[name], transport).plan(
                    grouped[name])[1]
        except ServefleetError as error:
            return _node_error(name, error, started, clock)

    items: list[PlanItem] = []
    errors: list[NodeResult] = []
    with ThreadPoolExecutor(max_workers=max(1, len(grouped))) as pool:
        for outcome in pool.map(one, list(grouped)):
            if isinstance(outcome, NodeResult):
                errors.append(outcome)
            else:
                items.extend(outcome)
    return items, errors


def deploy(project: Project, nodes: Sequence[str] | None = None,
           strategy: Strategy | None = None, secrets: Mapping[str, str] | None = None, *,
           progress: Progress | None = None, unlock_id: str | None = None,
           clock: Clock | None = None, http: HttpGet = http_get,
           transport_factory: TransportFactory = _default_transport,
           abort: Abort | None = None) -> list[NodeResult]:
    """Deploy the stack to ``nodes`` (default: every node of the stack).

    ``parallel`` (the stack's default) rolls out all nodes at once, one connection each;
    ``rolling`` goes one node at a time and stops at the first failure (the rest are
    ``skipped``). Secrets fill the nodes' env files and are masked in everything printed.
    Everything is validated and rendered first, so a rule's error or a render error stops
    the deploy before any node is touched. SIGINT, SIGTERM and SIGHUP become a controlled
    abort while it runs (see the module docstring); ``unlock_id`` removes a lock with that id
    first (``--force-unlock LOCK_ID``).
    """
    abort = abort or Abort()
    with abort.handling_signals():
        return _deploy(project, nodes, strategy, secrets, progress=progress,
                       unlock_id=unlock_id, clock=clock, http=http,
                       transport_factory=transport_factory, abort=abort)


def _deploy(project: Project, nodes: Sequence[str] | None, strategy: Strategy | None,
            secrets: Mapping[str, str] | None, *, progress: Progress | None,
            unlock_id: str | None, clock: Clock | None, http: HttpGet,
            transport_factory: TransportFactory, abort: Abort) -> list[NodeResult]:
    strategy = strategy or project.stack.strategy
    clock = clock or Clock()
    releases = render_for(project, nodes, secrets)
    mask = SecretMask.from_mapping(secrets)
    grouped = _group(releases)
    deployments = {d.key: d for d in project.deployments(list(nodes) if nodes else None)}

    def one(name: str) -> NodeResult:
        node = project.nodes[name]
        started = clock.monotonic()
        try:
            with transport_factory(node, mask) as transport:
                rollout = NodeRollout(project, node, transport, clock=clock, progress=progress,
                                      http=http, unlock_id=unlock_id, secrets=secrets,
                                      abort=abort)
                result = rollout.deploy(grouped[name], {
                    r.deployment: deployments[r.key] for r in grouped[name]})
        except ServefleetError as error:
            result = _node_error(name, error, started, clock)
            if progress is not None:
                progress(ProgressEvent(name, None, "done", result.elapsed, result.error or ""))
        result.elapsed = clock.monotonic() - started
        return result

    names = list(grouped)
    if strategy == "parallel":
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            return list(pool.map(one, names))
    results: list[NodeResult] = []
    for name in names:
        if (results and not results[-1].ok) or abort.requested:
            why = (f"interrupted by {abort.signal_name}" if abort.requested
                   else "an earlier node failed (rolling strategy)")
            results.append(NodeResult(name, error=f"not attempted: {why}",
                                      error_kind="skipped"))
            continue
        results.append(one(name))
    return results


def _node(project: Project, name: str) -> Node:
    if name not in project.nodes:
        raise ConfigError(f"no node {name!r} in the inventory")
    return project.nodes[name]


def rollback(project: Project, node: str, deployment: str = "main", to: str | None = None, *,
             secrets: Mapping[str, str] | None = None,
             progress: Progress | None = None, unlock_id: str | None = None,
             clock: Clock | None = None, http: HttpGet = http_get,
             transport_factory: TransportFactory = _default_transport,
             abort: Abort | None = None) -> DeploymentResult:
    """Roll ``node``'s ``deployment`` back to release ``to`` (default: the previous one).
    ``secrets`` are those the profiles need for their probes (an API key): the gate of the
    release rolled back to, and of a restore, probe with them."""
    check_rules(project)
    abort = abort or Abort()
    with abort.handling_signals(), \
            transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        return NodeRollout(project, transport.node, transport, clock=clock,
                           progress=progress, http=http, unlock_id=unlock_id,
                           secrets=secrets, abort=abort).rollback(deployment, to)


def unlock(project: Project, node: str, lock_id: str, *,
           transport_factory: TransportFactory = _default_transport) -> str:
    """Remove ``node``'s lock if its id is ``lock_id`` (``servefleet unlock NODE LOCK_ID``):
    ``removed`` or ``not locked``; :class:`LockHeld` when the lock has another id."""
    with transport_factory(_node(project, node), SecretMask()) as transport:
        return remove_lock(transport, lock_id)


def observe_node(project: Project, node: str, deployments: Sequence[str] = ("main",), *,
                 secrets: Mapping[str, str] | None = None,
                 transport_factory: TransportFactory = _default_transport) -> ObservedNode:
    """What runs on ``node`` (read-only, one command): current releases, their manifests,
    containers, and the lock holder."""
    with transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        return NodeRollout(project, transport.node, transport).observe(deployments)


def list_releases(project: Project, node: str, deployment: str = "main", *,
                  secrets: Mapping[str, str] | None = None,
                  transport_factory: TransportFactory = _default_transport,
                  ) -> list[ReleaseInfo]:
    """The releases of ``node``'s ``deployment``, newest first."""
    with transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        return release_store.list_releases(transport, deployment)


def stream_logs(project: Project, node: str, deployment: str = "main", *, follow: bool = False,
                tail: int | None = 200, should_stop: Callable[[], bool] | None = None,
                secrets: Mapping[str, str] | None = None,
                transport_factory: TransportFactory = _default_transport) -> Iterator[str]:
    """The engine's log lines (``--follow`` keeps streaming until ``should_stop``); the
    values of ``secrets`` are masked in every line."""
    with transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        argv = remote.logs(deployment, follow=follow, tail=tail)
        # stdout and stderr arrive merged, in the order the engine wrote them.
        for raw in transport.stream_lines(argv, should_stop=should_stop):
            yield transport.mask(raw.decode("utf-8", "replace").rstrip("\r\n"))


def stop_deployment(project: Project, node: str, deployment: str = "main", *,
                    secrets: Mapping[str, str] | None = None,
                    transport_factory: TransportFactory = _default_transport) -> None:
    """Stop a deployment's engine (its releases stay on the node)."""
    with transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        rollout = NodeRollout(project, transport.node, transport)
        transport.run(remote.stop(deployment), timeout=300, what="stop the engine")
        # No audit log when the deployment never got a folder on this node.
        with contextlib.suppress(ServefleetError):
            release_store.audit(transport, deployment,
                                rollout.audit_line("stop", deployment, None, "ok"))

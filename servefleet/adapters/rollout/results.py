"""What a rollout reports: progress events and the results of deployments and nodes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from servefleet.adapters.health_gate import HealthReport
from servefleet.core.plan import PlanItem

Strategy = Literal["parallel", "rolling"]
FAILED_PHASE = "failed"
"""The last progress event of a node that did not deploy (never ``done``)."""
DeploymentStatus = Literal["unchanged", "deployed", "failed", "rolled_back", "restore_failed",
                           "interrupted", "skipped"]


@dataclass(frozen=True)
class ProgressEvent:
    """A node entered a phase (sent from the node's worker thread)."""

    node: str
    """Node name."""
    deployment: str | None
    """Deployment, for per-deployment phases."""
    phase: str
    """``observe``, ``lock``, ``preflight``, ``upload``, ``build``, ``stop``, ``gpu``,
    ``up``, ``boot``, ``health``, ``switch``, ``restore``, then ``done`` (every deployment
    right) or :data:`FAILED_PHASE` (the node was not deployed)…"""
    elapsed: float
    """Seconds since this node's rollout started."""
    message: str = ""
    """Detail for humans (a boot-log line, the outcome)."""


Progress = Callable[[ProgressEvent], None]


class GaveUp(Exception):
    """A second signal: stop at once, record the node's state, keep the lock."""

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


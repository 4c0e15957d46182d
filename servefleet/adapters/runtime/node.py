"""The runtime under a rollout: what the rollout's state machine asks of a node.

:class:`~servefleet.adapters.rollout.node.NodeRollout` knows only this protocol: observe,
lock, preflight, stage a release, prepare its image, stop, clear, start, follow the boot
log, run the node-side health checks, mark a release gated, switch ``current``, prune,
audit, list releases, read the engine's log and containers. Compose over SSH
(:class:`~servefleet.adapters.runtime.ssh.compose.ComposeSshRuntime`) is its one
implementation; another target (Kubernetes) is another class, with the same state machine
above it, picked by :func:`servefleet.adapters.runtime.runtime_for`.

Every method may raise :class:`~servefleet.core.errors.ServefleetError` (a command failed,
timed out, or the node was lost); the rollout turns that into a failed phase and restores.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from servefleet.adapters.boot_follow import BootResult
    from servefleet.adapters.node_health import HealthOptions
    from servefleet.adapters.rollout.target import Target
    from servefleet.core.bootlog import BootFacts
    from servefleet.core.gpu import GpuProbeResult
    from servefleet.core.health_table import CheckRow
    from servefleet.core.lockinfo import LockInfo
    from servefleet.core.models import Node
    from servefleet.core.observed import (
        ObservedContainer,
        ObservedDeployment,
        ObservedNode,
        ReleaseInfo,
    )
    from servefleet.core.project import Project


AUDIT_TIMEOUT_SECONDS = 120.0
"""How long appending one audit line may take before the node counts as lost."""


class RuntimeLock(Protocol):
    """A node's lock while a rollout holds it."""

    taken_over: LockInfo | None
    """The abandoned lock this one replaced, if any (its phase says what to repair)."""
    holder_gone: bool
    """The replaced lock's holder was a process of this machine that is gone."""

    def record(self, line: str) -> bool:
        """Rewrite the lock's state line (best effort)."""

    def abandon(self, line: str) -> None:
        """Give up without releasing: the lock stays, its state line says why."""

    def release(self) -> None:
        """Give the lock back (only if it is still ours); best effort."""


class NodeRuntime(Protocol):
    """One node as a rollout acts on it (see the module docstring)."""

    node: Node
    """The node."""

    def mask(self, text: str) -> str:
        """``text`` with every secret value masked."""

    def observe(self, deployments: Sequence[str], *, key: str = "",
                candidates: Mapping[str, str] | None = None) -> ObservedNode:
        """Read-only: the lock and the deployments' facts (``key`` seeds the secret
        digests, see :func:`servefleet.core.plan.rotated_secrets`; ``candidates``:
        deployment → a hand-started container to adopt, read while there is no current
        release)."""

    def lock(self, operation: str, now: datetime, *, unlock_id: str | None,
             deployments: Sequence[str], key: str = "",
             candidates: Mapping[str, str] | None = None) -> tuple[RuntimeLock, ObservedNode]:
        """Take the node's lock and observe under it, in one step."""

    def adopt(self, target: Target, container: str) -> None:
        """Take over the running hand-started ``container`` as ``target``'s release,
        without a restart; refuse when it does not run the image the release names."""

    def unadopt(self, deployment: str, container: str) -> None:
        """Undo :meth:`adopt` (the gate failed): the container, still serving, gets its
        own name back."""

    def stop_container(self, container: str) -> None:
        """Stop a hand-started container that a release replaces (it is kept)."""

    def preflight(self, target: Target, observed: ObservedDeployment | None) -> list[str]:
        """What keeps ``target`` from starting here (empty: nothing)."""

    def stage(self, target: Target, manifest: Mapping[str, Any], aside: str | None) -> None:
        """Put the release's files on the node (``aside``: move an edited copy aside)."""

    def prepare(self, target: Target, on_line: Callable[[str], None]) -> None:
        """Pull the release's images, or build its overlay, while the old engine serves."""

    def stage_weights(self, target: Target, say: Callable[[str], None], *,
                      should_stop: Callable[[], bool] | None = None) -> None:
        """Fetch and verify ``target``'s weights (:attr:`Target.weights`) while the old
        engine serves; raise when they are not all there, saying what is cached."""

    def stop(self, deployment: str, *, grace_seconds: int | None = None,
             what: str = "stop the old engine") -> None:
        """Stop the deployment's engine (its releases stay)."""

    def clear(self, deployment: str, *, grace_seconds: int) -> None:
        """Stop and remove every container of the deployment (a clean slate)."""

    def start(self, target: Target) -> str:
        """Start ``target``'s engine; return the node time it started (for the log)."""

    def follow_boot(self, target: Target, since: str, *, deadline: float,
                    clock: Callable[[], float],
                    on_line: Callable[[str], None]) -> BootResult:
        """Follow the engine's boot log from ``since`` until ready, failed or deadline."""

    def health_checks(self, project: Project, target: Target, *, facts: BootFacts,
                      base_url: str, since: float | None,
                      options: HealthOptions) -> tuple[list[CheckRow], str | None]:
        """The health checks beyond the gate's own that need the node (see
        :func:`servefleet.adapters.node_health.gate_checks`)."""

    def gpu_reading(self) -> GpuProbeResult:
        """The node's GPU memory as the probe reads it."""

    def mark_gated(self, deployment: str, release_id: str, at: str) -> None:
        """Record that the running engine of ``release_id`` passed its gate."""

    def switch(self, deployment: str, release_id: str) -> None:
        """Make ``release_id`` current (the commit point)."""

    def prune(self, deployment: str, keep: int, protect: Sequence[str]) -> None:
        """Remove old releases beyond ``keep``, never those in ``protect``."""

    def audit(self, deployment: str, line: str, *,
              timeout: float = AUDIT_TIMEOUT_SECONDS) -> None:
        """Append one line to the deployment's audit log."""

    def releases(self, deployment: str) -> list[ReleaseInfo]:
        """The deployment's releases, newest first."""

    def log_lines(self, deployment: str, *, follow: bool = False, since: str | None = None,
                  tail: int | None = None,
                  should_stop: Callable[[], bool] | None = None) -> Iterator[str]:
        """The engine's log lines (stdout and stderr merged, secrets masked)."""

    def containers(self, deployment: str) -> list[ObservedContainer]:
        """The deployment's containers, running or not."""

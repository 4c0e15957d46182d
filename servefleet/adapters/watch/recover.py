"""Recovery through the rollout machinery: the node lock, the boot gate, the audit line and
the restore of the last-known-good release are :class:`NodeRollout`'s; nothing here runs a
docker command of its own beside them, except the plain ``stop`` of the last rung."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from servefleet.adapters.gateway.follow import GatewayFollow
from servefleet.adapters.rollout import Clock, NodeRollout
from servefleet.adapters.runtime import NodeRuntime, TransportFactory, open_transport, runtime_for
from servefleet.core.errors import ServefleetError
from servefleet.core.gpu import free_memory_check
from servefleet.core.models import Node
from servefleet.core.observed import ObservedDeployment, ObservedNode
from servefleet.core.project import Project
from servefleet.core.secrets import SecretMask
from servefleet.core.watch.policy import Decision

MEMORY_POLL_SECONDS = 5.0


def restore_target(observed: ObservedDeployment) -> str | None:
    """The release the last-known-good rung starts: ``last-good`` unless it is what runs
    now (then ``previous``); only a release whose folder is on the node."""
    for release in (observed.last_good, observed.previous_release):
        if release and release != observed.current_release and release in observed.releases:
            return release
    return None


def wait_for_memory(runtime: NodeRuntime, node: Node, utilization: float, deadline: float,
                    clock: Clock) -> str | None:
    """Poll the node's GPU probe until the profile's share of memory is free again; None
    when it is, else the last reading's complaint (past ``deadline``)."""
    while True:
        problem = free_memory_check(runtime.gpu_reading(), utilization, node.unified_memory)
        if problem is None or clock.monotonic() >= deadline:
            return problem
        clock.sleep(MEMORY_POLL_SECONDS)


class Recovery:
    """Carries out a :class:`Decision` on one deployment; one line says what came of it."""

    def __init__(self, project: Project, *, secrets: Mapping[str, str] | None = None,
                 transport_factory: TransportFactory | None = None,
                 clock: Clock | None = None, memory_wait_seconds: float = 300,
                 gateway: GatewayFollow | None = None) -> None:
        self.project = project
        self.gateway = gateway
        """The stack's gateway: an engine is drained there before it is stopped (an engine
        stuck while its ``/health`` says 200 still gets requests otherwise) and re-admitted
        after its gate."""
        self.secrets = dict(secrets or {})
        self.factory: TransportFactory = transport_factory or open_transport
        self.clock = clock or Clock()
        self.memory_wait_seconds = memory_wait_seconds

    def execute(self, node_name: str, deployment: str, decision: Decision) -> str:
        """Do ``decision.action`` under the node lock; the outcome in one line."""
        node = self.project.nodes[node_name]
        operation = f"watch-{decision.action.replace('_', '-')}"
        with self.factory(node, SecretMask.from_mapping(self.secrets)) as transport:
            runtime = runtime_for(transport)
            rollout = NodeRollout(self.project, node, runtime, secrets=self.secrets,
                                  clock=self.clock,
                                  hooks=self.gateway.hooks() if self.gateway else None)
            with contextlib.suppress(ServefleetError):
                runtime.audit(deployment, rollout.audit_line(
                    "watch", deployment, None, decision.action, decision.reason))
            lock, seen = runtime.lock(operation, self.clock.now(), unlock_id=None,
                                      deployments=[deployment])
            rollout.lock = lock
            try:
                return self._under_lock(rollout, runtime, node, deployment, decision,
                                        operation, seen)
            finally:
                rollout.lock = None
                lock.release()

    def _drain(self, node: Node, deployment: str) -> None:
        """Take the engine out of the gateway before a stop no rollout hook surrounds."""
        if self.gateway is not None:
            self.gateway.drain(node.name, deployment, lambda line: None)

    def _under_lock(self, rollout: NodeRollout, runtime: NodeRuntime, node: Node,
                    deployment: str, decision: Decision, operation: str,
                    seen: ObservedNode) -> str:
        observed = seen.deployments.get(deployment)
        if observed is None:
            return f"{node.name}/{deployment}: never deployed here: nothing to recover"
        if decision.action == "stop_and_alert":
            self._drain(node, deployment)
            runtime.stop(deployment, what="stop the engine")
            runtime.audit(deployment, rollout.audit_line(
                operation, deployment, observed.current_release, "stopped", decision.reason))
            return f"stopped {node.name}/{deployment}; deploy to bring it back"
        release = (observed.current_release if decision.action == "restart"
                   else restore_target(observed))
        if release is None:
            why = f"no release to {'restart' if decision.action == 'restart' else 'fall back to'}"
            with contextlib.suppress(ServefleetError):
                runtime.audit(deployment, rollout.audit_line(
                    operation, deployment, observed.current_release, "nothing-to-do", why))
            return f"{node.name}/{deployment}: {why}"
        target = rollout.target_from_manifest(deployment, release,
                                              rollout.manifest_of(deployment, release))
        if decision.wait_for_memory and target.utilization is not None:
            # Stop first, then wait: a unified-memory pool is given back slowly, and an
            # engine started before it is back fails (or leaks more) at once.
            self._drain(node, deployment)
            runtime.stop(deployment, what="stop the engine")
            problem = wait_for_memory(runtime, node, target.utilization,
                                      self.clock.monotonic() + self.memory_wait_seconds,
                                      self.clock)
            if problem is not None:
                runtime.audit(deployment, rollout.audit_line(
                    operation, deployment, release, "memory-not-back", problem))
                return f"{node.name}/{deployment}: not restarted, memory not back: {problem}"
        result = rollout.activate(target, observed, operation)
        line = f"{node.name}/{deployment}: {decision.action} {release}: {result.status}"
        if result.failure is not None:
            line += f" ({result.failure.phase}: {result.failure.message})"
        if result.restore is not None:
            line += f"; restored {result.restore.release_id}: {result.restore.message}"
        return line

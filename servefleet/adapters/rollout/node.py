"""The rollout's state machine on one node: observe and plan, lock, then per changed
deployment preflight, stage, prepare, the ``before_stop`` hooks, stop, GPU check, start,
boot and gate, the ``after_gate`` hooks, mark gated, switch ``current``, prune and audit
(see :mod:`servefleet.adapters.rollout`). It acts only through its
:class:`~servefleet.adapters.runtime.node.NodeRuntime`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC
from secrets import token_hex
from typing import Any

from servefleet.adapters.health_gate import HealthReport
from servefleet.adapters.lock import whoami
from servefleet.adapters.rollout.choose import choose_rollback
from servefleet.adapters.rollout.recovery import Recovery
from servefleet.adapters.rollout.results import (
    FAILED_PHASE,
    DeploymentResult,
    Failure,
    GaveUp,
    NodeResult,
    StepFailed,
)
from servefleet.adapters.rollout.target import Target, target_for, target_from_manifest
from servefleet.core.errors import ConfigError, ServefleetError
from servefleet.core.models import Deployment
from servefleet.core.observed import ObservedDeployment, ObservedNode
from servefleet.core.plan import PlanItem, plan, recovery_notes
from servefleet.core.render import RenderedRelease, manifest_for


@dataclasses.dataclass(frozen=True)
class Observation:
    """One unlocked read of a node, kept for the rest of the command: the plan shown before
    a confirmation is the plan the deploy acts on, and the node is not read again before its
    lock (whose own read, under the lock, still decides what changes)."""

    node: ObservedNode
    key: str
    """The read's random key of the secret digests (:attr:`NodeRollout.observe_key`)."""


class NodeRollout(Recovery):
    """Rollouts on one node (see the module docstring)."""

    observe_key = ""
    """The random key of the last observation's secret digests (see
    :func:`servefleet.core.plan.rotated_secrets`): kept in memory only."""

    def observe(self, deployments: Sequence[str]) -> ObservedNode:
        """Read-only: the lock and the deployments' facts."""
        self.observe_key = token_hex(32)
        return self.runtime.observe(deployments, key=self.observe_key,
                                    candidates=self.adopt_candidates())

    def adopt_candidates(self) -> dict[str, str]:
        """Deployment → the hand-started container the stack says it adopts."""
        return {d.name: d.adopt for d in self.project.stack.for_node(self.node.name)
                if d.adopt}

    def plan(self, releases: Sequence[RenderedRelease]) -> tuple[ObservedNode, list[PlanItem]]:
        """Observe and plan (read-only)."""
        self.emit("observe")
        observed = self.observe([r.deployment for r in releases])
        return observed, self.plan_items(observed, releases)

    def plan_items(self, observed: ObservedNode,
                   releases: Sequence[RenderedRelease]) -> list[PlanItem]:
        """The plan of ``releases`` against ``observed`` (read with :attr:`observe_key`)."""
        items = []
        for rendered in releases:
            dep = observed.deployments.get(rendered.deployment)
            items.append(dataclasses.replace(plan(
                rendered, dep, secret_key=self.observe_key.encode()), recovery=recovery_notes(
                observed.lock, dep, rendered.deployment),
                node_baselines=observed.baselines))
        return items

    def observation(self, observed: ObservedNode) -> Observation:
        """``observed`` (the last read) with its key, to hand to :meth:`deploy` later."""
        return Observation(observed, self.observe_key)

    def deploy(self, releases: Sequence[RenderedRelease],
               deployments: Mapping[str, Deployment],
               seen: Observation | None = None, *, read_first: bool = True) -> NodeResult:
        """Bring every deployment of ``releases`` to its release. A node is read before
        its lock so that a deploy with nothing to do takes no lock; ``seen`` (this
        command's earlier read of the node, its plan) stands in for that read, and with
        ``read_first`` false there is none (a caller that knows something changes: the
        Pulumi provider's update, called only on a diff). The read under the lock decides."""
        result = NodeResult(self.node.name)
        items: list[PlanItem] | None = None
        if seen is not None:
            self.observe_key = seen.key
            items = self.plan_items(seen.node, releases)
        elif read_first:
            _, items = self.plan(releases)
        if items is not None and not any(item.changes for item in items):
            result.deployments = [self._unchanged(item) for item in items]
            self.emit("done", message="unchanged")
            return result
        self.emit("lock")
        # Re-observed under the lock: another rollout may have finished meanwhile.
        self.observe_key = token_hex(32)
        lock, observed = self.runtime.lock(
            "deploy", self.clock.now(), unlock_id=self.unlock_id,
            deployments=[r.deployment for r in releases], key=self.observe_key,
            candidates=self.adopt_candidates())
        self.lock = lock
        try:
            if lock.taken_over is not None:
                how = (f"of process {lock.taken_over.pid} on this machine, which is gone,"
                       if lock.holder_gone else "abandoned")
                self.emit("lock", message=f"took over the lock {how} "
                          f"{lock.taken_over.where()}: repairing")
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
                if item.action == "adopt":
                    deployed = self.adopt(dataclasses.replace(
                        target, adopted=item.adopt_container), item)
                else:
                    deployed = self.activate(target, dep, "deploy", item)
                result.deployments.append(deployed)
                if deployed.status == "interrupted":
                    break
        finally:
            self.lock = None
            lock.release()  # a no-op once abandoned: the lock then stays for the next run
        # "done" only when every deployment is right; a failed (restored) one is "failed".
        self.emit("done" if result.ok else FAILED_PHASE, message=result.status)
        return result

    def _unchanged(self, item: PlanItem) -> DeploymentResult:
        # Nothing to deploy, but a lock left by a rollout that died is still worth a word:
        # only `servefleet unlock NODE LOCK_ID` removes it.
        return DeploymentResult(self.node.name, item.deployment, "unchanged", item.release_id,
                                item.current_release, plan=item,
                                warnings=list(item.recovery))

    def target_for(self, rendered: RenderedRelease, deployment: Deployment) -> Target:
        """The target of a freshly rendered release."""
        return target_for(self.project, self.node, rendered, deployment)

    def target_from_manifest(self, deployment: str, release_id: str,
                             manifest: Mapping[str, Any]) -> Target:
        """The target of a release already on the node, described by its manifest."""
        return target_from_manifest(self.project, self.node, deployment, release_id, manifest)

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
                    problems = self.runtime.preflight(target, observed)
                    if problems:
                        raise StepFailed("preflight", f"{self.node.name}: "
                                         + "; ".join(problems))
                if target.rendered is not None and (item is None or item.upload):
                    with self.phase(result, "upload"):
                        self.upload(target, repair=item is not None and item.repair)
                with self.phase(result, "build" if target.builds_image else "pull"):
                    self.runtime.prepare(target, lambda line: self.emit(
                        "pull", target.deployment, line))
                if target.weights is not None:
                    self.stage_weights(result, target)
                self.run_hooks(result, self.hooks.before_stop, target)
                with self.phase(result, "stop"):
                    # Set inside the phase: an abort caught at its start has touched
                    # nothing, and "restoring" a release that never stopped would re-gate
                    # an engine whose boot log is long past (and stop it when that fails).
                    touched = True
                    if observed is not None and observed.containers:
                        self.runtime.stop(target.deployment)
                    if item is not None and item.adopt_container:
                        self.runtime.stop_container(item.adopt_container)
                with self.phase(result, "gpu"):
                    self.gpu_check(target)
                started = True
                report = self.boot(result, target)
                result.health = report
                if not report.ok:
                    raise StepFailed("health", report.summary(), report.failure_class,
                                     report.evidence())
                self.run_hooks(result, self.hooks.after_gate, target, report)
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

    def stage_weights(self, result: DeploymentResult, target: Target) -> None:
        """Fetch and verify the release's weights while the old engine serves; a signal
        ends the fetch at once (the next deploy resumes it) and leaves that engine as it
        was."""
        with self.phase(result, "weights"):
            try:
                self.runtime.stage_weights(
                    target, lambda line: self.emit("weights", target.deployment, line),
                    should_stop=lambda: self.abort.requested)
            except ServefleetError:
                if not self.abort.requested:
                    raise
                if self.abort.give_up:
                    raise GaveUp(f"{self.node.name}: gave up staging the weights on a "
                                 "second signal") from None
                raise StepFailed("weights", f"{self.node.name}: interrupted by "
                                 f"{self.abort.signal_name} while staging the weights: the "
                                 "old engine still serves, and the next deploy resumes the "
                                 "fetch", "interrupted") from None

    def adopt(self, target: Target, item: PlanItem) -> DeploymentResult:
        """Take a hand-started engine over as ``target`` without restarting it: upload the
        release, check the container's image and take it over (renamed), gate it as it
        runs, then switch ``current``. A failed gate gives the container its name back:
        it serves throughout, as before."""
        assert target.adopted is not None
        result = DeploymentResult(self.node.name, target.deployment, "failed",
                                  target.release_id, None, plan=item)
        adopted = False
        try:
            with self.phase(result, "upload"):
                self.upload(target, repair=item.repair)
            with self.phase(result, "adopt"):
                self.runtime.adopt(target, target.adopted)
                adopted = True
            deadline = self.clock.monotonic() + target.gate.boot_deadline_seconds
            report = self.gate(result, target, "0", deadline)
            result.health = report
            if not report.ok:
                raise StepFailed("health", report.summary(), report.failure_class,
                                 report.evidence())
            self.commit(result, target, "adopt", None, report)
        except StepFailed as failed:
            result.failure = failed.failure
            if adopted:
                try:
                    self.runtime.unadopt(target.deployment, target.adopted)
                except ServefleetError as error:
                    result.warnings.append(f"container {target.adopted} keeps the name "
                                           f"it was adopted under: {error}")
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
            self.runtime.switch(target.deployment, target.release_id)
        result.status = "deployed"
        self.finish(result, target.deployment, [target.release_id, previous],
                    self.audit_line(operation, target.deployment, target.release_id, "ok",
                                    f"previous {previous or '-'}; {report.summary()}"
                                    + self.gate_record(result, target, report)))

    def finish(self, result: DeploymentResult, deployment: str, protect: Sequence[str | None],
               audit_line: str) -> None:
        """After the switch: prune, then audit; each failure is a warning."""
        kept = [r for r in protect if r]
        steps = (("prune old releases", lambda: self.runtime.prune(deployment, self.keep, kept)),
                 ("append the audit line", lambda: self.runtime.audit(deployment, audit_line)))
        for what, step in steps:
            try:
                step()
            except ServefleetError as error:
                result.warnings.append(f"{what} failed after the switch (the new release "
                                       f"stays current): {error}")

    def upload(self, target: Target, *, repair: bool = False) -> None:
        """Send the release with its manifest. ``repair``: the release folder on the node
        was edited there; it is moved aside to ``<id>.edited-<UTC time>`` (kept for
        forensics, pruned like an old release) and the rendered files take its place."""
        assert target.rendered is not None and target.deployment_model is not None
        now = self.clock.now()
        manifest = manifest_for(target.rendered, target.deployment_model,
                                created_at=now, created_by=whoami())
        manifest["boot_deadline_seconds"] = target.gate.boot_deadline_seconds
        if target.adopted is not None:
            # The release is the container started by hand: a rollback to it starts it.
            manifest["adopted"] = {"container": target.adopted}
        aside = f"edited-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}" if repair else None
        self.runtime.stage(target, manifest, aside)

    # -- rollback -------------------------------------------------------------------------
    def rollback(self, deployment: str, to: str | None = None) -> DeploymentResult:
        """Make an earlier release current again (default: the one before ``current``)."""
        self.emit("lock", deployment)
        lock, observed_node = self.runtime.lock("rollback", self.clock.now(),
                                                unlock_id=self.unlock_id,
                                                deployments=[deployment])
        self.lock = lock
        try:
            observed = observed_node.deployments.get(deployment)
            if observed is None:
                raise ConfigError(f"{self.node.name}: deployment {deployment!r} has never been "
                                  "deployed here")
            infos = self.runtime.releases(deployment)
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

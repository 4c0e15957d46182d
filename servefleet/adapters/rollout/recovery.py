"""What a rollout does after a failure: stop the failed engine, restore the release that
served before and gate it again, or, on a second signal, record the node's state and leave
the lock for the next deploy to repair."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from servefleet.adapters.health_gate import HealthReport
from servefleet.adapters.rollout.choose import restore_candidate
from servefleet.adapters.rollout.results import (
    DeploymentResult,
    Failure,
    Restore,
    StepFailed,
)
from servefleet.adapters.rollout.steps import RECORD_TIMEOUT_SECONDS, HookCall, RolloutBase
from servefleet.adapters.rollout.target import Target, target_from_manifest
from servefleet.core.errors import ServefleetError
from servefleet.core.history import gate_record
from servefleet.core.observed import ObservedDeployment

FAILED_STOP_GRACE_SECONDS = 5
"""A failed (crash-looping or hung) engine has nothing to finish: stop it quickly."""


class Recovery(RolloutBase):
    """The failure paths of a rollout (see the module docstring)."""

    def recover(self, result: DeploymentResult, target: Target, operation: str, touched: bool,
                started: bool, observed: ObservedDeployment | None) -> None:
        """After a failure: stop the failed engine, restore what served before once the old
        engine was stopped (else ``last-good``, else ``previous``), and write the audit line
        (best effort: the node may be gone). A second signal here raises
        :class:`~servefleet.adapters.rollout.results.GaveUp`."""
        failure = result.failure
        assert failure is not None
        chosen = restore_candidate(observed, target.release_id) if touched else None
        try:
            if started:
                # A failed engine must not keep serving or restarting; when it cannot be
                # stopped, the restore's start still replaces it (one project, one engine).
                try:
                    self.runtime.stop(target.deployment, what="stop the failed engine",
                                      grace_seconds=FAILED_STOP_GRACE_SECONDS)
                except ServefleetError as error:
                    result.warnings.append(f"the failed engine {target.release_id} could not "
                                           f"be stopped ({error}): unless the restore "
                                           "replaced it, it may serve ungated")
            if not touched:
                # The old engine never stopped: it serves, so whatever a before_stop hook
                # took from it (a drain in the gateway) is given back.
                self.after_restore(result, target)
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
            self.runtime.audit(target.deployment, self.audit_line(
                operation, target.deployment, target.release_id, result.status, detail))

    def after_restore(self, result: DeploymentResult, target: Target) -> None:
        """Run the ``after_restore`` hooks; a failure is a warning (the engine serves)."""
        for hook in self.hooks.after_restore:
            try:
                hook.run(HookCall(self.runtime, target, self._sayer(hook.phase, target),
                                  None, self.node.name))
            except Exception as error:  # the restore stands whatever a hook says
                text = self.runtime.mask(str(error) or type(error).__name__)
                result.warnings.append(f"{hook.phase} after the restore failed: {text}")

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
                # renamed; a start beside them may start nothing new, and the gate would
                # then read a boot log long past.
                self.runtime.clear(deployment, grace_seconds=FAILED_STOP_GRACE_SECONDS)
            target = target_from_manifest(self.project, self.node, deployment, release_id,
                                          manifest)
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
                    self.runtime.stop(deployment, what="stop the failed restore",
                                      grace_seconds=FAILED_STOP_GRACE_SECONDS)
                return Restore(release_id, False,
                               report.summary() if report is not None else message, report)
            warnings: list[str] = []
            self.after_restore(result, target)
            try:
                self.mark_gated(deployment, release_id)
                # What serves is what current names: the restored release passed its gate.
                self.runtime.switch(deployment, release_id)
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
        infos = self.runtime.releases(deployment)
        found = next((i for i in infos if i.release_id == release_id), None)
        if found is None or found.manifest is None:
            raise StepFailed("restore", f"{self.node.name}/{deployment}: release {release_id} "
                             "has no readable manifest")
        return found.manifest

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
            self.runtime.audit(target.deployment, self.audit_line(
                operation, target.deployment, target.release_id, "interrupted",
                f"{phase}: {why}; {engine}"), timeout=RECORD_TIMEOUT_SECONDS)
        self.record(phase, target.deployment, target.release_id,
                    abandoned=f"second signal during {phase}")

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

"""Roll out an engine spanning several nodes as one unit.

Each rank is a deployment of the same name on its node, driven by that node's
:class:`~servefleet.adapters.rollout.NodeRollout` (preflight, upload, pull, stop, gate,
commit are its steps, not copies of them). What this module adds is the order and the
all-or-nothing:

1. lock every node, in sorted node order (two rollouts of overlapping pairs can never each
   hold one lock and wait for the other); a lock held elsewhere releases those taken;
2. preflight, upload and pull on every rank, while the old engine still serves;
3. stop every rank (an engine whose peer is gone cannot serve);
4. start the workers, and wait for each to say it joined
   (``Launching vLLM (v…) headless multiproc executor, with head node address …``), then
   the head, gated on its boot log and API like any engine;
5. check every worker still runs, and with ``ncclDebug`` that NCCL chose the transport
   the link promises (``via NET/IB`` with RDMA devices, else ``via NET/Socket``);
6. mark every rank gated and switch ``current`` on each;

or, after any failure before the switch, stop every rank and restore the release that
served before on all of them (workers first, then the head, gated the same way), so the
ranks never run different releases.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from servefleet.adapters.health_gate import Check, HealthReport
from servefleet.adapters.multinode_result import MultiNodePlan, MultiNodeResult, Rank
from servefleet.adapters.rollout import (
    Abort,
    Clock,
    DeploymentResult,
    Failure,
    GaveUp,
    NodeResult,
    NodeRollout,
    Progress,
    Restore,
    StepFailed,
    Target,
    TransportFactory,
    _node_error,
    check_rules,
    restore_candidate,
)
from servefleet.adapters.runtime import open_transport, runtime_for
from servefleet.core.errors import ConfigError, LockHeld, ServefleetError
from servefleet.core.models import MultiNodeDeployment
from servefleet.core.plan import PlanItem, plan
from servefleet.core.project import Project
from servefleet.core.render.ranks import MultiNodeRelease, render_multinode
from servefleet.core.secrets import SecretMask

WORKER_JOINED = "headless multiproc executor, with head node address"
"""vLLM's line when a headless rank starts its workers for the head's torch.distributed
group (``vllm/entrypoints/cli/serve.py`` ``run_headless``, vLLM 0.32.0; see
tests/adapters/data/multinode/README.md)."""
NCCL_VIA_IB = "via NET/IB"
"""NCCL_DEBUG=INFO channel lines over RDMA: ``… [send] via NET/IB/0/GDRDMA``."""
NCCL_VIA_SOCKET = "via NET/Socket"
"""NCCL_DEBUG=INFO channel lines over TCP sockets: ``… [send] via NET/Socket/3``."""
WORKER_LOG_TAIL = 400
"""Lines of a worker's log read after the head's gate (NCCL lines come early)."""


def _row(fact: str, expected: str, observed: str, ok: bool,
         evidence: Sequence[str] = ()) -> Check:
    return Check(fact, expected, observed, "pass" if ok else "fail", tuple(evidence))


class MultiNodeRollout:
    """One engine across ``release.ranks``' nodes, one :class:`NodeRollout` per node."""

    def __init__(self, release: MultiNodeRelease, rollouts: Mapping[str, NodeRollout]) -> None:
        self.release = release
        self.rollouts = dict(rollouts)
        self.ranks: list[Rank] = []

    # -- overridable checks -----------------------------------------------------------------
    def worker_joined(self, rank: Rank, since: str, deadline: float) -> tuple[str, ...]:
        """Follow the worker's log until it says it joined the head's group; return that
        line. Raises :class:`StepFailed` when the container exits or the deadline passes."""
        rollout = rank.rollout
        clock = rollout.deadline_clock()
        seen: list[str] = []
        for line in rollout.runtime.log_lines(rank.target.deployment, follow=True, since=since,
                                              should_stop=lambda: clock() > deadline):
            seen = [*seen[-19:], line]
            rollout.emit("boot", rank.target.deployment, line[:160])
            if WORKER_JOINED in line:
                return (line,)
        rollout.check_abort("boot")
        raise StepFailed("boot", f"{rank.node}: the worker never said it joined the head "
                         f"('{WORKER_JOINED}') before the deadline or its exit",
                         "worker_not_joined", seen[-5:])

    def worker_log(self, rank: Rank) -> list[str]:
        """The worker's recent log lines (for the NCCL transport check)."""
        return list(rank.rollout.runtime.log_lines(rank.target.deployment,
                                                   tail=WORKER_LOG_TAIL))

    # -- the rollout --------------------------------------------------------------------------
    def deploy(self) -> MultiNodeResult:
        """Bring every rank to the release, as one unit (see the module docstring)."""
        result = MultiNodeResult(self.release.deployment.key, self.release.release_id)
        for index, (rendered, dep) in enumerate(zip(self.release.ranks,
                                                    self.release.rank_deployments,
                                                    strict=True)):
            rollout = self.rollouts[rendered.node]
            _, items = rollout.plan([rendered])
            target = rollout.target_for(rendered, dep)
            self.ranks.append(Rank(index, rollout, target, None, items[0], DeploymentResult(
                rendered.node, rendered.deployment, "failed", rendered.release_id)))
        if not any(r.item.changes for r in self.ranks):
            result.status = "unchanged"
            result.ranks = [DeploymentResult(r.node, r.target.deployment, "unchanged",
                                             r.target.release_id, r.item.current_release,
                                             plan=r.item) for r in self.ranks]
            return result
        try:
            self._lock_all()
        except ServefleetError as error:
            result.failure = Failure("lock", str(error), "lock_held"
                                     if isinstance(error, LockHeld) else None)
            result.ranks = [r.result for r in self.ranks]
            return result
        try:
            self._run(result)
        finally:
            for rank in reversed(self.ranks):
                rank.rollout.lock = None
                if rank.lock is not None:
                    rank.lock.release()  # a no-op once abandoned
        result.ranks = [r.result for r in self.ranks]
        return result

    def _lock_all(self) -> None:
        """Every node's lock, in sorted node order; on a refusal, give back those taken."""
        taken: list[Rank] = []
        try:
            for rank in sorted(self.ranks, key=lambda r: r.node):
                rollout = rank.rollout
                rollout.emit("lock", rank.target.deployment)
                lock, observed = rollout.runtime.lock(
                    "deploy", rollout.clock.now(), unlock_id=rollout.unlock_id,
                    deployments=[rank.target.deployment])
                rank.lock = lock
                rollout.lock = lock
                taken.append(rank)
                rank.observed = observed.deployments.get(rank.target.deployment)
                rank.item = plan(rank.target.rendered, rank.observed) \
                    if rank.target.rendered is not None else rank.item
                rank.result.previous_release = rank.item.current_release
                rank.result.plan = rank.item
        except BaseException:
            for rank in reversed(taken):
                rank.rollout.lock = None
                if rank.lock is not None:
                    rank.lock.release()
                rank.lock = None
            raise

    def _run(self, result: MultiNodeResult) -> None:
        touched = False
        try:
            try:
                for rank in self.ranks:
                    self._prepare(rank)
                touched = True
                for rank in self.ranks:
                    with rank.rollout.phase(rank.result, "stop"):
                        if rank.observed is not None and rank.observed.containers:
                            rank.rollout.runtime.stop(rank.target.deployment)
                reports = self._boot_all(self.ranks, restoring=False)
                for rank in self.ranks:
                    rank.rollout.check_abort("switch")
                for rank in self.ranks:
                    rank.result.health = reports[rank.index]
                    rank.rollout.commit(rank.result, rank.target, "deploy",
                                        rank.item.current_release, reports[rank.index])
                result.status = "deployed"
            except StepFailed as failed:
                result.failure = failed.failure
                for rank in self.ranks:
                    rank.result.failure = failed.failure
                self._recover(result, touched)
        except GaveUp as gave_up:
            result.status = "interrupted"
            for rank in self.ranks:
                rank.rollout.give_up(rank.result, rank.target, "deploy", str(gave_up),
                                     rank.started)

    def _prepare(self, rank: Rank) -> None:
        """Preflight, upload, build or pull: nothing that stops the old engine."""
        rollout, target, item = rank.rollout, rank.target, rank.item
        with rollout.phase(rank.result, "preflight"):
            problems = rollout.runtime.preflight(target, rank.observed)
            if problems:
                raise StepFailed("preflight", f"{rank.node}: " + "; ".join(problems))
        if item.upload:
            with rollout.phase(rank.result, "upload"):
                rollout.upload(target, repair=item.repair)
        with rollout.phase(rank.result, "build" if target.builds_image else "pull"):
            rollout.runtime.prepare(target, lambda line: rollout.emit(
                "pull", target.deployment, line))

    def _up(self, rank: Rank, target: Target, result: DeploymentResult) -> str:
        rollout = rank.rollout
        with rollout.phase(result, "up"):
            since = rollout.runtime.start(target)
        rank.started = True
        return since

    def _boot_all(self, ranks: Sequence[Rank], *, restoring: bool,
                  targets: Mapping[int, Target] | None = None,
                  results: Mapping[int, DeploymentResult] | None = None,
                  ) -> dict[int, HealthReport]:
        """Workers first (each must join), then the head (its gate), then every worker
        again (still running; the NCCL transport when asked). Raises :class:`StepFailed`
        naming the node that failed."""
        targets = targets or {r.index: r.target for r in ranks}
        results = results or {r.index: r.result for r in ranks}
        head, workers = ranks[0], ranks[1:]
        reports: dict[int, HealthReport] = {}
        joined: dict[int, tuple[str, ...]] = {}
        for rank in workers:
            target = targets[rank.index]
            deadline = rank.rollout.clock.monotonic() + target.gate.boot_deadline_seconds
            since = self._up(rank, target, results[rank.index])
            with rank.rollout.phase(results[rank.index], "boot"):
                joined[rank.index] = self.worker_joined(rank, since, deadline)
        head_report = head.rollout.boot(results[head.index], targets[head.index])
        if not head_report.ok:
            raise StepFailed("health", f"{head.node}: {head_report.summary()}",
                             head_report.failure_class, head_report.evidence())
        reports[head.index] = head_report
        for rank in workers:
            reports[rank.index] = self._worker_check(rank, targets[rank.index],
                                                     results[rank.index], joined[rank.index])
        return reports

    def _worker_check(self, rank: Rank, target: Target, result: DeploymentResult,
                      joined: tuple[str, ...]) -> HealthReport:
        rollout = rank.rollout
        url = f"{rollout.node.name} (headless rank {rank.index})"
        with rollout.phase(result, "health"):
            running = [c for c in rollout.runtime.containers(target.deployment)
                       if c.running and c.release_id == target.release_id]
            rows = [_row("worker joined the head", WORKER_JOINED, "joined", True, joined),
                    _row("worker container", f"running {target.release_id}",
                         "running" if running else "not running", bool(running))]
            if running and self.release.deployment.nccl_debug:
                rows.append(self._nccl_row(rank))
            report = HealthReport(url, tuple(rows),
                                  None if all(r.verdict == "pass" for r in rows)
                                  else "worker_failed")
        if not report.ok:
            raise StepFailed("health", f"{rank.node}: worker rank {rank.index}: "
                             f"{report.summary()}", report.failure_class, report.evidence())
        return report

    def _nccl_row(self, rank: Rank) -> Check:
        """The transport NCCL chose, from the worker's ``NCCL_DEBUG=INFO`` lines."""
        link = rank.rollout.node.fast_link
        wanted = NCCL_VIA_IB if link is not None and link.ib_hcas else NCCL_VIA_SOCKET
        lines = self.worker_log(rank)
        found = [line for line in lines if NCCL_VIA_IB in line or NCCL_VIA_SOCKET in line]
        ok = bool(found) and all(wanted in line for line in found)
        observed = "no NCCL channel line" if not found else (
            wanted if ok else next(line for line in found if wanted not in line)[-80:])
        return _row("NCCL transport", wanted, observed, ok, found[:3])

    # -- failure ------------------------------------------------------------------------------
    def _recover(self, result: MultiNodeResult, touched: bool) -> None:
        """Stop every started rank; when the old engines were stopped, restore the release
        that served before on every rank (one id for all), gated as one."""
        failure = result.failure
        assert failure is not None
        for rank in self.ranks:
            if rank.started:
                try:
                    rank.rollout.runtime.stop(rank.target.deployment, grace_seconds=10,
                                              what="stop the failed engine")
                except ServefleetError as error:
                    rank.result.warnings.append(f"the failed engine could not be stopped: "
                                                f"{error}")
        result.status = "failed"
        if touched:
            result.restore = self._restore()
            result.status = "rolled_back" if result.restore.ok else "restore_failed"
        for rank in self.ranks:
            rank.result.status = result.status  # type: ignore[assignment]
            rank.result.restore = result.restore
            detail = f"{failure.phase}: {failure.message}"
            if result.restore is not None:
                detail += (f"; restored {result.restore.release_id}: "
                           f"{result.restore.message}")
            with contextlib.suppress(ServefleetError):
                rank.rollout.runtime.audit(rank.target.deployment, rank.rollout.audit_line(
                    "deploy", rank.target.deployment, rank.target.release_id, result.status,
                    detail))

    def _restore(self) -> Restore:
        chosen = {r.index: restore_candidate(r.observed, r.target.release_id)
                  for r in self.ranks}
        ids = set(chosen.values())
        if None in ids or len(ids) != 1:
            shown = ", ".join(f"{r.node} {chosen[r.index] or 'none'}" for r in self.ranks)
            return Restore("-", False, f"no release served on every rank before ({shown}): "
                           "nothing restored, no engine serves")
        release_id = str(ids.pop())
        for rank in self.ranks:
            rank.rollout.restoring = True
            rank.started = False
        try:
            targets: dict[int, Target] = {}
            scratch: dict[int, DeploymentResult] = {}
            for rank in self.ranks:
                rank.rollout.emit("restore", rank.target.deployment, f"restoring {release_id}")
                with rank.rollout.phase(rank.result, "restore"):
                    manifest = rank.rollout.manifest_of(rank.target.deployment, release_id)
                targets[rank.index] = rank.rollout.target_from_manifest(
                    rank.target.deployment, release_id, manifest)
                scratch[rank.index] = DeploymentResult(rank.node, rank.target.deployment,
                                                       "failed", release_id)
            try:
                reports = self._boot_all(self.ranks, restoring=True, targets=targets,
                                         results=scratch)
            finally:
                for rank in self.ranks:
                    rank.result.phases += [(f"restore {p}", t)
                                           for p, t in scratch[rank.index].phases]
            warnings = []
            for rank in self.ranks:
                try:
                    rank.rollout.mark_gated(rank.target.deployment, release_id)
                    rank.rollout.runtime.switch(rank.target.deployment, release_id)
                except ServefleetError as error:
                    warnings.append(f"{rank.node}: bookkeeping failed: {error}")
            head = reports[0]
            return Restore(release_id, True,
                           f"release {release_id} serves again on "
                           f"{', '.join(r.node for r in self.ranks)}"
                           + (f" ({'; '.join(warnings)})" if warnings else ""), head)
        except StepFailed as failed:
            for rank in self.ranks:
                if rank.started:
                    with contextlib.suppress(ServefleetError):
                        rank.rollout.runtime.stop(rank.target.deployment, grace_seconds=10,
                                                  what="stop the failed restore")
            return Restore(release_id, False, failed.failure.message)
        finally:
            for rank in self.ranks:
                rank.rollout.restoring = False


def select_multinode(project: Project, nodes: Sequence[str] | None
                     ) -> tuple[list[str] | None, list[MultiNodeDeployment]]:
    """Split a command's NODES between the per-node deployments and the engines spanning
    nodes: ``(nodes for the per-node rollout, multi-node deployments)``.

    No NODES: every per-node deployment (``None``; ``[]`` when the stack has none) and every
    multi-node deployment. NODES: the per-node deployments on them, and every multi-node
    deployment with a rank on one of them (all its ranks move together). A name in neither
    raises :class:`ConfigError`, naming the stack's nodes."""
    multi = list(project.stack.multi_node)
    if not nodes:
        return (None if project.stack.deployments else []), multi
    spanned = {n for dep in multi for n in dep.nodes}
    unknown = [n for n in nodes if n not in project.stack.nodes and n not in spanned]
    if unknown:
        known = list(dict.fromkeys([*project.stack.nodes, *sorted(spanned)]))
        raise ConfigError(f"{', '.join(unknown)}: not in stack {project.stack.stack!r} "
                          f"(its nodes: {', '.join(known) or 'none'})")
    single = [n for n in nodes if n in project.stack.nodes]
    return single, [dep for dep in multi if any(n in dep.nodes for n in nodes)]


def _factory(transport_factory: TransportFactory | None) -> TransportFactory:
    return transport_factory or open_transport


def plan_multinode(project: Project, deployments: Sequence[MultiNodeDeployment],
                   secrets: Mapping[str, str] | None = None, *,
                   transport_factory: TransportFactory | None = None,
                   ) -> tuple[list[MultiNodePlan], list[NodeResult]]:
    """Render each multi-node deployment and observe its ranks (read-only). Returns the
    plans and one error per node that could not be read (a deployment with an unreadable
    rank has no plan: half a picture would mislead)."""
    if deployments:
        check_rules(project)
    mask = SecretMask.from_mapping(secrets)
    factory = _factory(transport_factory)
    clock = Clock()
    plans: list[MultiNodePlan] = []
    errors: list[NodeResult] = []
    for dep in deployments:
        release = render_multinode(project, dep, secrets, require_secrets=False)
        items: list[PlanItem] = []
        for rendered in release.ranks:
            started = clock.monotonic()
            try:
                with factory(project.nodes[rendered.node], mask) as transport:
                    items += NodeRollout(project, project.nodes[rendered.node],
                                         runtime_for(transport)).plan([rendered])[1]
            except ServefleetError as error:
                errors.append(_node_error(rendered.node, error, started, clock))
        if len(items) == len(release.ranks):
            plans.append(MultiNodePlan(dep, release.release_id, tuple(items)))
    return plans, errors


def deploy_multinode(project: Project, name: str, secrets: Mapping[str, str] | None = None, *,
                     transport_factory: TransportFactory | None = None,
                     abort: Abort | None = None, progress: Progress | None = None,
                     unlock_id: str | None = None,
                     runner: type[MultiNodeRollout] = MultiNodeRollout) -> MultiNodeResult:
    """Validate the project (errors stop here), render the multi-node deployment ``name``
    and roll it out over one connection per node. ``progress`` gets every rank's events;
    ``unlock_id`` removes a lock with that id (``--force-unlock``) on any rank first."""
    check_rules(project)
    matches = [d for d in project.stack.multi_node if d.name == name]
    if not matches:
        known = ", ".join(d.name for d in project.stack.multi_node) or "none"
        raise ConfigError(f"{project.stack_file}: servefleet:multiNode has no deployment "
                          f"{name!r} (known: {known})")
    release = render_multinode(project, matches[0], secrets)
    mask = SecretMask.from_mapping(secrets)
    factory = _factory(transport_factory)
    abort = abort or Abort()
    with contextlib.ExitStack() as stack:
        rollouts = {}
        for node_name in matches[0].nodes:
            try:
                transport = stack.enter_context(factory(project.nodes[node_name], mask))
            except ServefleetError as error:
                # Nothing was touched on any rank: say which node could not be reached.
                message = str(error) if str(error).startswith(f"{node_name}: ") \
                    else f"{node_name}: {error}"
                return MultiNodeResult(matches[0].key, release.release_id, failure=Failure(
                    "connect", message, type(error).__name__))
            rollouts[node_name] = NodeRollout(project, project.nodes[node_name],
                                              runtime_for(transport),
                                              secrets=secrets, abort=abort,
                                              progress=progress, unlock_id=unlock_id)
        with abort.handling_signals():
            return runner(release, rollouts).deploy()

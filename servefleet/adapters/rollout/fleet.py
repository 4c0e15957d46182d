"""The rollout's entry points: validate and render the stack, then plan, deploy, roll back,
unlock, observe, list releases, stream logs or stop, node by node (in parallel, or
one node at a time for the ``rolling`` strategy)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from servefleet.adapters.health_gate import HttpGet, http_get
from servefleet.adapters.lock import force_unlock as remove_lock
from servefleet.adapters.rollout.control import Abort, Clock
from servefleet.adapters.rollout.node import NodeRollout, Observation
from servefleet.adapters.rollout.results import (
    FAILED_PHASE,
    DeploymentResult,
    NodeResult,
    Progress,
    ProgressEvent,
    Strategy,
)
from servefleet.adapters.rollout.steps import RolloutHooks
from servefleet.adapters.runtime import Transport, TransportFactory, open_transport, runtime_for
from servefleet.adapters.weights.peers import PeerCopy
from servefleet.core.errors import ConfigError, ServefleetError, ValidationFailed
from servefleet.core.models import Deployment, Node
from servefleet.core.observed import ObservedNode, ReleaseInfo
from servefleet.core.plan import PlanItem
from servefleet.core.project import Project
from servefleet.core.render import RenderedRelease, render_deployments
from servefleet.core.rules import Finding, Severity, validate
from servefleet.core.secrets import SecretMask


def _with_weights_source(item: PlanItem, rendered: RenderedRelease, peers: PeerCopy,
                         transport: Transport, project: Project) -> PlanItem:
    """``item`` with where its weights would come from, asked of the nodes."""
    if rendered.weights is None or not item.changes:
        return item
    return dataclasses.replace(item, weights_source=peers.source(
        transport, project.profiles[rendered.profile], rendered.weights))


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
               transport_factory: TransportFactory = open_transport,
               observations: dict[str, Observation] | None = None,
               ) -> tuple[list[PlanItem], list[NodeResult]]:
    """Observe every node (in parallel, read-only) and plan. Returns the plan items and
    node-level errors (unreachable nodes, refused host keys). ``observations``, when given,
    receives each node's read, for a :func:`deploy` of the same command."""
    releases = render_for(project, nodes, secrets, require_secrets=False)
    mask = SecretMask.from_mapping(secrets)
    clock = Clock()
    grouped = _group(releases)

    peers = PeerCopy(list(project.nodes.values()), lambda peer: transport_factory(peer, mask))

    def one(name: str) -> list[PlanItem] | NodeResult:
        started = clock.monotonic()
        try:
            with transport_factory(project.nodes[name], mask) as transport:
                reader = NodeRollout(project, project.nodes[name], runtime_for(transport))
                observed, planned = reader.plan(grouped[name])
                if observations is not None:
                    observations[name] = reader.observation(observed)
                return [_with_weights_source(item, rendered, peers, transport, project)
                        for item, rendered in zip(planned, grouped[name], strict=True)]
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
           transport_factory: TransportFactory = open_transport,
           abort: Abort | None = None, hooks: RolloutHooks | None = None,
           observations: Mapping[str, Observation] | None = None,
           read_first: bool = True) -> list[NodeResult]:
    """Deploy the stack to ``nodes`` (default: every node of the stack).

    ``parallel`` (the stack's default) rolls out all nodes at once, one connection each;
    ``rolling`` goes one node at a time and stops at the first failure (the rest are
    ``skipped``). Secrets fill the nodes' env files and are masked in everything printed.
    Everything is validated and rendered first, so a rule's error or a render error stops
    the deploy before any node is touched. SIGINT, SIGTERM and SIGHUP become a controlled
    abort while it runs (see the module docstring); ``unlock_id`` removes a lock with that id
    first (``--force-unlock LOCK_ID``).
    ``observations``: the command's earlier reads of the nodes (:func:`plan_fleet`'s), so
    that a node is not read again before its lock; ``read_first`` false: no read before
    the lock at all (:meth:`NodeRollout.deploy`).
    """
    abort = abort or Abort()
    with abort.handling_signals():
        return _deploy(project, nodes, strategy, secrets, progress=progress,
                       unlock_id=unlock_id, clock=clock, http=http,
                       transport_factory=transport_factory, abort=abort, hooks=hooks,
                       observations=observations or {}, read_first=read_first)


def _deploy(project: Project, nodes: Sequence[str] | None, strategy: Strategy | None,
            secrets: Mapping[str, str] | None, *, progress: Progress | None,
            unlock_id: str | None, clock: Clock | None, http: HttpGet,
            transport_factory: TransportFactory, abort: Abort,
            hooks: RolloutHooks | None,
            observations: Mapping[str, Observation], read_first: bool) -> list[NodeResult]:
    strategy = strategy or project.stack.strategy
    clock = clock or Clock()
    releases = render_for(project, nodes, secrets)
    mask = SecretMask.from_mapping(secrets)
    grouped = _group(releases)
    deployments = {d.key: d for d in project.deployments(list(nodes) if nodes else None)}
    # Staged weights come from a neighbour that holds them, before the hub.
    peers = PeerCopy(list(project.nodes.values()), lambda peer: transport_factory(peer, mask))

    def one(name: str) -> NodeResult:
        node = project.nodes[name]
        started = clock.monotonic()
        try:
            with transport_factory(node, mask) as transport:
                runtime = runtime_for(transport, peers=peers)
                rollout = NodeRollout(project, node, runtime, clock=clock,
                                      progress=progress, http=http, unlock_id=unlock_id,
                                      secrets=secrets, abort=abort, hooks=hooks)
                result = rollout.deploy(grouped[name], {
                    r.deployment: deployments[r.key] for r in grouped[name]},
                    seen=observations.get(name), read_first=read_first)
        except ServefleetError as error:
            result = _node_error(name, error, started, clock)
            if progress is not None:
                # Never "done": the node was not deployed.
                progress(ProgressEvent(name, None, FAILED_PHASE, result.elapsed,
                                       (result.error or "").removeprefix(f"{name}: ")))
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
             transport_factory: TransportFactory = open_transport,
             abort: Abort | None = None) -> DeploymentResult:
    """Roll ``node``'s ``deployment`` back to release ``to`` (default: the previous one).
    ``secrets`` are those the profiles need for their probes (an API key): the gate of the
    release rolled back to, and of a restore, probe with them."""
    check_rules(project)
    abort = abort or Abort()
    with abort.handling_signals(), \
            transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        return NodeRollout(project, transport.node, runtime_for(transport), clock=clock,
                           progress=progress, http=http, unlock_id=unlock_id,
                           secrets=secrets, abort=abort).rollback(deployment, to)


def unlock(project: Project, node: str, lock_id: str, *,
           transport_factory: TransportFactory = open_transport) -> str:
    """Remove ``node``'s lock if its id is ``lock_id`` (``servefleet unlock NODE LOCK_ID``):
    ``removed`` or ``not locked``; :class:`LockHeld` when the lock has another id."""
    with transport_factory(_node(project, node), SecretMask()) as transport:
        return remove_lock(transport, lock_id)


def observe_node(project: Project, node: str, deployments: Sequence[str] = ("main",), *,
                 secrets: Mapping[str, str] | None = None,
                 transport_factory: TransportFactory = open_transport) -> ObservedNode:
    """What runs on ``node`` (read-only, one command): current releases, their manifests,
    containers, and the lock holder."""
    with transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        return NodeRollout(project, transport.node, runtime_for(transport)).observe(
            deployments)


def list_releases(project: Project, node: str, deployment: str = "main", *,
                  secrets: Mapping[str, str] | None = None,
                  transport_factory: TransportFactory = open_transport,
                  ) -> list[ReleaseInfo]:
    """The releases of ``node``'s ``deployment``, newest first."""
    with transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        return runtime_for(transport).releases(deployment)


def stream_logs(project: Project, node: str, deployment: str = "main", *, follow: bool = False,
                tail: int | None = 200, should_stop: Callable[[], bool] | None = None,
                secrets: Mapping[str, str] | None = None,
                transport_factory: TransportFactory = open_transport) -> Iterator[str]:
    """The engine's log lines (``--follow`` keeps streaming until ``should_stop``); the
    values of ``secrets`` are masked in every line."""
    with transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        # stdout and stderr arrive merged, in the order the engine wrote them.
        yield from runtime_for(transport).log_lines(deployment, follow=follow, tail=tail,
                                                          should_stop=should_stop)


def stop_deployment(project: Project, node: str, deployment: str = "main", *,
                    secrets: Mapping[str, str] | None = None,
                    transport_factory: TransportFactory = open_transport) -> None:
    """Stop a deployment's engine (its releases stay on the node)."""
    with transport_factory(_node(project, node), SecretMask.from_mapping(secrets)) as transport:
        runtime = runtime_for(transport)
        rollout = NodeRollout(project, transport.node, runtime)
        runtime.stop(deployment, what="stop the engine")
        # No audit log when the deployment never got a folder on this node.
        with contextlib.suppress(ServefleetError):
            runtime.audit(deployment, rollout.audit_line("stop", deployment, None, "ok"))


def deploy_node(project: Project, node: str, deployments: Sequence[Deployment] | None = None,
                secrets: Mapping[str, str] | None = None, *,
                progress: Progress | None = None, unlock_id: str | None = None,
                clock: Clock | None = None, http: HttpGet = http_get,
                transport_factory: TransportFactory = open_transport,
                abort: Abort | None = None, hooks: RolloutHooks | None = None,
                read_first: bool = True) -> NodeResult:
    """Deploy to one node: ``deployments`` (default: what the stack places there), each
    validated, rendered, staged, gated and committed or restored as in :func:`deploy`.
    The one call every front end uses for a node (the CLI through :func:`deploy`, the
    Pulumi resource with the deployments it declares)."""
    if deployments is not None:
        project = project.placing(node, deployments)
    return deploy(project, [node], "parallel", secrets, progress=progress,
                  unlock_id=unlock_id, clock=clock, http=http,
                  transport_factory=transport_factory, abort=abort, hooks=hooks,
                  read_first=read_first)[0]

"""The Pulumi dynamic provider of engines spanning nodes: one ``MultiNodeDeployment``
resource per ``servefleet:multiNode`` entry, named after the deployment.

**One resource per engine, not per-node resources coordinated.** The ranks of one engine
must move together: every rank runs one release id, the worker must join before the head
boots, and a failure on any rank restores the earlier release on all of them
(:func:`servefleet.adapters.multinode.deploy_multinode`). Per-node resources would each see
half of that: Pulumi would update them as separate steps (in parallel, or one after the
other), so a node resource could switch its rank while its peer failed, and the restore of
both would have to be coordinated across two provider calls that share no memory (the
provider is stateless, and Pulumi may run each call on another thread). One resource makes
the engine one Pulumi step whose create/update is exactly the CLI's rollout of it, whose
failure is one failed step, and whose diff is one release id. The per-node
``NodeDeployment`` resources stay as they are for the node's own deployments.

**Inputs** (rendered by the program, so ``pulumi preview`` names the change offline): the
release id every rank runs, per rank its node, role, a sha256 over its release files
(``engine.env`` in its names-only form, :mod:`servefleet.core.envdigest`: no value and no
plain digest of a secret) and its engine flags, the profile and the head's endpoint.
Secret values arrive only as a Pulumi secret input and never reach an output.

**diff**: changed when the release id changes, a rank drifted (another current release,
its engine down or ungated, its files changed on the node), or the provider version
changes; **replaced** when the set of nodes changes, deleting first
(``delete_before_replace``): the old ranks are stopped before the new ones start, since a
rank that stays on a node keeps its deployment name, port and GPU, and a delete after the
create would stop the new engine there.

**create / update** run :func:`~servefleet.adapters.multinode.deploy_multinode` (locks on
every rank in sorted node order, upload and pull, stop all, workers then head, gate,
switch all or restore all) and fail the step with the failure in one line (secrets masked);
the nodes then serve the restored release, which ``pulumi refresh`` shows. **read** observes
every rank with the command ``servefleet plan`` uses (``current``, containers, gate mark,
file hashes) and the head's last passed gate record from its audit log (what ``servefleet
history`` reads): KV pool, CUDA-graph mode, concurrency. **delete** stops every rank (their
releases stay for a later deploy), as the node resource's delete stops its engines.

**Locks and ordering.** A node lock is taken without waiting (``mkdir``; a held lock fails
the rollout at once naming its holder), and the engine's rollout takes its ranks' locks in
sorted node order and gives back those it took when one is held: nothing ever holds one lock
while waiting for another, so no two rollouts can deadlock. What remains is a spurious
failure: Pulumi runs resources in parallel unless they depend on each other, and a node
resource updating ``dgx-spark-1`` while the engine's rollout wants the same lock would fail
one of them with "lock held". The program therefore declares each ``MultiNodeDeployment``
with ``depends_on`` the ``NodeDeployment`` of every node it spans (when that node has one)
and every earlier ``MultiNodeDeployment`` sharing a node — the CLI's order too (the per-node
deployments, then each engine spanning nodes, one after the other).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi.dynamic

from servefleet.adapters.pulumi_common import (
    ServefleetProvider,
    _int,
    _mapping,
    _quiet_libraries,
    flags_property,
    plain_inputs,
    progress_printer,
    with_outputs,
)
from servefleet.adapters.pulumi_observe import HEALTHY, _load_node
from servefleet.adapters.pulumi_provider import RESOURCE_MODULE
from servefleet.core.errors import (
    ConfigError,
    HealthGateFailed,
    ServefleetError,
    UnreachableNode,
)
from servefleet.core.models import MultiNodeDeployment, Node, StackConfig
from servefleet.core.plan import flags_from_argv
from servefleet.core.project import Project, load_project
from servefleet.core.release_diff import (
    CurrentDiff,
    EngineDiff,
    FilesDiff,
    Seen,
    Wanted,
    find,
    release_diff,
)
from servefleet.core.secrets import SecretMask

if TYPE_CHECKING:
    from servefleet.adapters.multinode import MultiNodeResult
    from servefleet.adapters.runtime import Transport
    from servefleet.core.observed import ObservedDeployment
    from servefleet.core.render.ranks import MultiNodeRelease

MULTINODE_PROVIDER_VERSION = "2"
"""Bump on every change of what this provider does: Pulumi compares this input, not code."""
MULTINODE_RESOURCE_NAME = "MultiNodeDeployment"
MULTINODE_RESOURCE_TYPE = f"pulumi-python:dynamic/{RESOURCE_MODULE}:{MULTINODE_RESOURCE_NAME}"
"""The resource's Pulumi type token (dynamic providers name their types this way)."""
OUTPUT_KEYS = ("releaseIds", "health", "kvCacheTokens", "cudagraphMode", "maxConcurrency",
               "observed")
"""Outputs filled from the observation; declared so the program can read them."""

Factory = Callable[[Node, SecretMask], "Transport"]
"""Opens a transport to a node (``rollout.TransportFactory``; tests pass fakes)."""


# -- what the program passes ------------------------------------------------------------------
def files_digest(file_hashes: Mapping[str, str]) -> str:
    """One sha256 over a rank's ``path → sha256`` map (the rendered or the observed one;
    ``engine.env`` is hashed in its names-only form in both)."""
    digest = hashlib.sha256()
    for path, value in sorted(file_hashes.items()):
        digest.update(f"{path}\0{value}\n".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class RankInputs:
    """One rank as the program rendered it (non-secret)."""

    node: str
    """Node name."""
    role: str
    """``head`` (rank 0, serves the API) or ``worker`` (``--headless``)."""
    files_digest: str
    """:func:`files_digest` of the rank's release files."""
    engine_flags: dict[str, str | None]
    """The rank's engine command line as a ``flag → value`` map."""

    def to_props(self) -> dict[str, Any]:
        """The resource property (camelCase keys)."""
        return {"node": self.node, "role": self.role, "filesDigest": self.files_digest,
                "engineFlags": flags_property(self.engine_flags)}


@dataclass(frozen=True)
class MultiNodeArgs:
    """Inputs of a :class:`MultiNodeDeploymentResource`."""

    name: str
    """Deployment name (the folder and compose project on every rank)."""
    project_dir: str
    """The project folder the provider loads inventory, profiles and templates from."""
    stack: str
    """Stack name (``Pulumi.<stack>.yaml``)."""
    profile: str
    """Serving profile of every rank."""
    nodes: tuple[str, ...]
    """Nodes in rank order (the head first)."""
    port: int
    """The head's API port."""
    master_port: int
    """torch.distributed rendezvous port on the head."""
    pipeline_parallel: int
    """Pipeline stages."""
    nccl_debug: bool
    """``NCCL_DEBUG=INFO`` and the transport check in the gate."""
    release_id: str
    """The one release every rank runs."""
    endpoint: str
    """``http://<head address>:<port>``."""
    ranks: tuple[RankInputs, ...]
    """Each rank, in rank order."""
    secrets: pulumi.Input[Mapping[str, str]] | None = None
    """Secret environment values the profile needs; pass a Pulumi secret."""
    unlock_id: str | None = None
    """Remove a stale node lock with this id on any rank first (``servefleet:forceUnlock``
    of one of the nodes). Not part of the diff."""
    provider_version: str = MULTINODE_PROVIDER_VERSION
    """Version of this provider's behaviour."""

    def to_props(self) -> dict[str, Any]:
        """The resource's input properties, plus the declared outputs (``None``)."""
        props: dict[str, Any] = {
            "name": self.name, "projectDir": self.project_dir, "stack": self.stack,
            "profile": self.profile, "nodes": list(self.nodes), "port": self.port,
            "masterPort": self.master_port, "pipelineParallel": self.pipeline_parallel,
            "ncclDebug": self.nccl_debug, "releaseId": self.release_id,
            "endpoint": self.endpoint, "ranks": [r.to_props() for r in self.ranks],
            "providerVersion": self.provider_version,
        }
        return with_outputs(props, self.unlock_id, self.secrets, OUTPUT_KEYS)


def multinode_args(project: Project, release: MultiNodeRelease,
                   secrets: pulumi.Input[Mapping[str, str]] | None = None,
                   unlock_id: str | None = None) -> MultiNodeArgs:
    """The resource inputs of one rendered engine spanning nodes."""
    from servefleet.adapters.multinode_result import rank_role

    dep = release.deployment
    port = release.rank_deployments[0].port or project.nodes[dep.head].ports[0]
    return MultiNodeArgs(
        name=dep.name, project_dir=str(project.root), stack=project.stack.stack,
        profile=dep.profile, nodes=tuple(dep.nodes), port=port,
        master_port=dep.master_port, pipeline_parallel=dep.pipeline_parallel_size,
        nccl_debug=dep.nccl_debug, release_id=release.release_id,
        endpoint=f"http://{project.nodes[dep.head].address}:{port}",
        ranks=tuple(RankInputs(node=r.node, role=rank_role(i),
                               files_digest=files_digest(r.file_hashes),
                               engine_flags=flags_from_argv(r.engine_argv))
                    for i, r in enumerate(release.ranks)),
        secrets=secrets, unlock_id=unlock_id)


def _nodes(props: Mapping[str, Any]) -> list[str]:
    value = props.get("nodes")
    return [str(n) for n in value] if isinstance(value, list | tuple) else []


def deployment_of(props: Mapping[str, Any]) -> MultiNodeDeployment:
    """The stack entry the resource stands for, rebuilt from its inputs."""
    return MultiNodeDeployment(
        name=str(props["name"]), profile=str(props["profile"]), nodes=_nodes(props),
        port=_int(props.get("port")), master_port=_int(props.get("masterPort")) or 29501,
        pipeline_parallel_size=_int(props.get("pipelineParallel")) or 1,
        nccl_debug=bool(props.get("ncclDebug")))


# -- observing the ranks ------------------------------------------------------------------------
def _rank_health(seen: ObservedDeployment | None) -> str:
    """``healthy`` (its engine runs the current release and passed its gate) or what is
    wrong with the rank: the shared serving verdict over the rollout's read (links,
    containers, gate mark)."""
    from servefleet.core.observed.serving import serving

    return serving(seen).words()


def _head_gate(transport: Transport, name: str, release: str | None) -> dict[str, Any]:
    """The head's last passed gate of ``release`` (its audit log's gate record)."""
    from servefleet.adapters.history import read_history

    rows = [row for row in read_history(transport, name).rows
            if row.release_id == release and row.verdict == "passed"]
    if release is None or not rows:
        return {"kvCacheTokens": None, "cudagraphMode": None, "maxConcurrency": None}
    last = rows[-1]
    kv = last.kv_pool if last.kv_unit == "tokens" else None
    return {"kvCacheTokens": int(kv) if kv is not None else None,
            "cudagraphMode": last.cudagraph, "maxConcurrency": last.max_concurrency}


def observe_ranks(nodes: Mapping[str, Node], name: str, ranks: Sequence[str],
                  transport_factory: Factory | None = None) -> dict[str, Any]:
    """Read every rank (one connection each, read-only) and return the output properties.
    Raises :class:`UnreachableNode` naming the rank that could not be read: an engine whose
    peer is unknown is not known to serve."""
    from servefleet.adapters.multinode import _factory
    from servefleet.adapters.multinode_result import rank_role
    from servefleet.adapters.observe import observe_node

    factory = _factory(transport_factory)
    observed: dict[str, dict[str, Any]] = {}
    gate: dict[str, Any] = {}
    for index, node_name in enumerate(ranks):
        node = nodes[node_name]
        try:
            with factory(node, SecretMask()) as transport:
                seen = observe_node(transport, [name]).deployments.get(name)
                if index == 0:
                    gate = _head_gate(transport, name, seen.current_release if seen else None)
        except ServefleetError as error:
            text = str(error)
            raise UnreachableNode(text if text.startswith(f"{node_name}") else
                                  f"{node_name}: {text}") from None
        observed[node_name] = {
            "rank": index, "role": rank_role(index),
            "currentRelease": seen.current_release if seen else None,
            "runningRelease": seen.running_release if seen else None,
            "engineState": seen.engine_state() if seen else "nothing deployed",
            "filesDigest": files_digest(seen.file_hashes) if seen and seen.file_hashes
            else None,
            "health": _rank_health(seen),
        }
    return {
        "observed": observed,
        "releaseIds": {n: o["currentRelease"] for n, o in observed.items()},
        "health": {n: o["health"] for n, o in observed.items()},
        **gate,
    }


def drift_reasons(props: Mapping[str, Any]) -> list[str]:
    """How the ranks last observed (``props['observed']``) differ from what the resource
    deployed (its ``releaseId`` and per-rank ``filesDigest``)."""
    observed = _mapping(props.get("observed"))
    if not observed:
        return []
    want = props.get("releaseId")
    digests = {str(r.get("node")): r.get("filesDigest")
               for r in map(_mapping, props.get("ranks") or [])}
    reasons = []
    for node in _nodes(props):
        seen = _mapping(observed.get(node))
        rank = _int(seen.get("rank"))  # Pulumi hands numbers over as floats
        where = " ".join(str(p) for p in ("rank", "?" if rank is None else rank,
                                          seen.get("role"), node) if p)
        health = seen.get("health")
        # The state keeps one digest of each rank's files, and the rank's health verdict
        # (which already says when its engine runs another release than its current one).
        diffs = release_diff(Wanted(want, files_digest=digests.get(node)),
                             Seen(current_release=seen.get("currentRelease"),
                                  files_digest=seen.get("filesDigest"),
                                  serving=health == HEALTHY))
        current = find(diffs, CurrentDiff)
        if current is not None:
            reasons.append(f"drift: {where}: current release is {current.have or 'none'}, "
                           f"not {want}")
        elif find(diffs, FilesDiff) is not None:
            reasons.append(f"drift: {where}: release files differ on the node")
        if find(diffs, EngineDiff) is not None:
            reasons.append(f"drift: {where}: {health or 'unknown'}")
    return reasons


def describe_changes(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    """Why an update would touch the engine: the release, the nodes, the engine flags of
    each rank, drift (empty: nothing to do)."""
    reasons = []
    if olds.get("releaseId") != news.get("releaseId"):
        reasons.append(f"release {olds.get('releaseId')} -> {news.get('releaseId')} on "
                       "every rank (restarted together)")
    if _nodes(olds) != _nodes(news):
        reasons.append(f"nodes {' + '.join(_nodes(olds))} -> {' + '.join(_nodes(news))}")
    return reasons + drift_reasons(olds)


# -- applying -----------------------------------------------------------------------------------
def failure_line(result: MultiNodeResult) -> str:
    """The failed rollout in one line: engine, outcome, failed phase and class, the node
    and message, and what serves now; then the proving log lines, one per line."""
    restore = result.restore
    outcome = {"rolled_back": "rolled back", "restore_failed": "restore FAILED",
               "interrupted": "interrupted"}.get(result.status, result.status)
    line = f"{result.deployment}: release {result.release_id} {outcome}"
    failure = result.failure
    if failure is not None:
        cls = f" [{failure.failure_class}]" if failure.failure_class else ""
        line += f": failed in {failure.phase}{cls}: {failure.message}"
    if restore is not None:
        state = "serves again on every rank" if restore.ok else "could NOT be restored"
        line += f"; release {restore.release_id} {state}: {restore.message}"
    elif result.status == "failed" and failure is not None and failure.phase in (
            "lock", "connect", "preflight", "upload", "pull", "build"):
        line += "; nothing was stopped: the ranks serve what they served before"
    evidence = failure.evidence if failure is not None else ()
    return "\n".join([" ".join(line.split()), *(f"  | {e}" for e in evidence)])


def apply(props: Mapping[str, Any], *, transport_factory: Factory | None = None,
          ) -> dict[str, Any]:
    """Roll the engine out as one unit and return the output properties. Raises with
    :func:`failure_line` (secrets masked) when the rollout did not deploy."""
    from servefleet.adapters import multinode

    secrets = {str(k): str(v) for k, v in _mapping(props.get("secrets")).items()}
    mask = SecretMask.from_mapping(secrets)
    project = load_project(Path(str(props["projectDir"])), str(props["stack"])) \
        .placing_multinode(deployment_of(props))
    name = str(props["name"])
    _quiet_libraries()
    unlock_id = props.get("unlockId")
    result = multinode.deploy_multinode(
        project, name, secrets, transport_factory=transport_factory,
        progress=progress_printer(mask), unlock_id=str(unlock_id) if unlock_id else None)
    if not result.ok:
        failure = result.failure
        gate = failure is not None and failure.phase in ("boot", "health")
        raise (HealthGateFailed if gate else ServefleetError)(mask(failure_line(result)))
    want = props.get("releaseId")
    if result.release_id != want:
        raise ConfigError(
            f"{result.deployment}: the project renders release {result.release_id} now, but "
            f"the program rendered {want}: a file changed while pulumi ran; run `pulumi up` "
            "again")
    outs = observe_ranks(project.nodes, name, _nodes(props), transport_factory)
    left = drift_reasons({**props, **outs})
    if left:
        raise ServefleetError(mask("; ".join(left) + ": the ranks still differ from the "
                                   "rendered release after the rollout: something changed "
                                   "them meanwhile; run `pulumi up` again"))
    return {**_plain_inputs(props), **outs}


def _plain_inputs(props: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs echoed into the outputs: all but the secrets and the provider blob."""
    return plain_inputs(props, OUTPUT_KEYS)


def stop_ranks(props: Mapping[str, Any], transport_factory: Factory | None = None) -> None:
    """Stop the engine on every rank, head first (the API stops answering before its
    peers go); the releases stay on the nodes."""
    from servefleet.adapters import rollout
    from servefleet.adapters.multinode import _factory

    project_dir = str(props["projectDir"])
    nodes = {n: _load_node(project_dir, n) for n in _nodes(props)}
    project = Project(root=Path(project_dir), nodes=nodes, node_files={}, profiles={},
                      profile_files={},
                      stack=StackConfig(stack=str(props.get("stack") or "sim")),
                      stack_file="")
    _quiet_libraries()
    for node in nodes:
        rollout.stop_deployment(project, node, str(props["name"]),
                                transport_factory=_factory(transport_factory))


# -- the provider -------------------------------------------------------------------------------
class MultiNodeDeploymentProvider(ServefleetProvider):
    """Pulumi dynamic provider of :class:`MultiNodeDeploymentResource`."""

    def apply(self, props: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
        """Roll every rank out as one unit (gated; every rank restored on failure)."""
        return apply(props)

    def resource_id(self, props: dict[str, Any]) -> str:
        """The multi-node deployment's key."""
        return deployment_of(props).key

    def diff(self, _id: str, _olds: dict[str, Any],
             _news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        """Changed on a new release id, drift or a provider bump; replaced (old ranks
        stopped first) when the set of nodes changes."""
        reasons = describe_changes(_olds, _news)
        bumped = _olds.get("providerVersion") != _news.get("providerVersion")
        replaced = set(_nodes(_olds)) != set(_nodes(_news))
        return pulumi.dynamic.DiffResult(changes=bool(reasons or bumped),
                                         replaces=["nodes"] if replaced else [],
                                         delete_before_replace=True)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Stop every rank's engine; the releases stay for a later deploy."""
        stop_ranks(_props)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        """What every rank runs now (``pulumi refresh``)."""
        project_dir = str(props["projectDir"])
        nodes = {n: _load_node(project_dir, n) for n in _nodes(props)}
        _quiet_libraries()
        outs = {**_plain_inputs(props),
                **observe_ranks(nodes, str(props["name"]), _nodes(props))}
        return pulumi.dynamic.ReadResult(id_=id_, outs=outs)


class MultiNodeDeploymentResource(pulumi.dynamic.Resource, module=RESOURCE_MODULE,
                                  name=MULTINODE_RESOURCE_NAME):
    """One engine spanning nodes, rolled out by servefleet as one unit."""

    endpoint: pulumi.Output[str]
    """``http://<head address>:<port>``: the engine's API (an input, echoed)."""
    releaseId: pulumi.Output[str]
    """The release the program rendered for every rank (an input, echoed)."""
    releaseIds: pulumi.Output[dict[str, str | None]]
    """Node → release ``current`` names on that rank."""
    health: pulumi.Output[dict[str, str]]
    """Node → ``healthy`` or what is wrong with that rank."""
    kvCacheTokens: pulumi.Output[int | None]
    """The head's KV-cache pool in tokens, from its last passed gate of the release."""
    cudagraphMode: pulumi.Output[str | None]
    """The head's CUDA-graph mode, from the same gate."""
    maxConcurrency: pulumi.Output[float | None]
    """Requests of the full context the head's pool holds at once, from the same gate."""
    observed: pulumi.Output[dict[str, Any]]
    """Node → everything observed on that rank."""

    def __init__(self, name: str, args: MultiNodeArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(MultiNodeDeploymentProvider(), name, args.to_props(), opts)

"""The Pulumi dynamic provider: one ``NodeDeployment`` resource per node of a stack.

A thin shell over the rollout the CLI uses (:mod:`servefleet.adapters.rollout`) and the
drift collector (:mod:`servefleet.adapters.drift_collect`):

* **inputs** are computed by the program (:mod:`servefleet.adapters.pulumi_program`) by
  rendering every deployment of the node, so ``pulumi preview`` shows what changes (release
  id, profile, engine flags as a ``flag → value`` map, file hashes) without touching a node;
  secrets arrive as a Pulumi secret input and nowhere else;
* ``diff`` compares the old outputs (what was deployed and what was last observed on the
  node) with the new inputs (:func:`describe_changes`): changed engine flags
  (:func:`servefleet.core.render.diff_flags`), whether the engine restarts, and drift;
* ``create`` / ``update`` run the rollout (upload, stop, boot, health gate; a failed gate
  restores the previous release) and then observe the node; a failure raises with the
  failure class and the log lines that prove it;
* ``read`` (``pulumi refresh``, ``pulumi preview --refresh``) observes the node: running
  release, image, file hashes of the current release, boot facts (KV pool, CUDA-graph
  mode), health. A file edited by hand on the node shows as changed file hashes, and
  ``diff`` then reports the resource as changed; the update's rollout uploads the release
  again (the edited folder is moved aside), so the node runs what git says;
* ``delete`` stops the engines (their releases stay on the node for a rollback).

The provider object is pickled into the Pulumi state when the program declares a resource:
it holds no attribute at all, builds its SSH connections inside each method, and every
value it needs comes from the resource's properties. Pulumi cannot see a change of this
module's code, so behaviour changes bump :data:`PROVIDER_VERSION` (an input).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi.dynamic

# Re-exported: the single-node provider's names, which the multi-node one and tests use.
from servefleet.adapters.gateway.follow import following_gateway
from servefleet.adapters.pulumi_common import ServefleetProvider, plain_inputs, with_outputs
from servefleet.adapters.pulumi_common import _int as _int
from servefleet.adapters.pulumi_common import _mapping as _mapping
from servefleet.adapters.pulumi_common import _quiet_libraries as _quiet_libraries
from servefleet.adapters.pulumi_common import flags_property as flags_property
from servefleet.adapters.pulumi_common import progress_printer as progress_printer
from servefleet.adapters.pulumi_observe import HEALTHY as HEALTHY
from servefleet.adapters.pulumi_observe import _health as _health
from servefleet.adapters.pulumi_observe import _load_node as _load_node
from servefleet.adapters.pulumi_observe import observe as observe
from servefleet.core.errors import (
    ConfigError,
    HealthGateFailed,
    ServefleetError,
)
from servefleet.core.models import Deployment, StackConfig
from servefleet.core.project import Project, load_project
from servefleet.core.release_diff import (
    CurrentDiff,
    EngineDiff,
    FilesDiff,
    RunningDiff,
    Seen,
    Wanted,
    find,
    release_diff,
)
from servefleet.core.render import FlagDiff, diff_flags
from servefleet.core.secrets import SecretMask

if TYPE_CHECKING:
    from servefleet.adapters.rollout import NodeResult

# The rollout and the drift collector (paramiko, tenacity…) are imported where they are
# used: a no-op `pulumi up` only diffs, and both the program and the provider host start
# faster without them.

PROVIDER_VERSION = "3"
"""Bump on every change of what the provider does: Pulumi compares this input, not code."""
RESOURCE_MODULE = "servefleet"
RESOURCE_NAME = "NodeDeployment"
RESOURCE_TYPE = f"pulumi-python:dynamic/{RESOURCE_MODULE}:{RESOURCE_NAME}"
"""The resource's Pulumi type token."""

# Input keys of one deployment whose change means a new release (and an engine restart).
_RELEASE_KEYS = ("profile", "port", "releaseId")
# Output keys filled from the observation; the program declares them so they can be read.
OUTPUT_KEYS = ("endpoints", "releaseIds", "kvCacheTokens", "cudagraphModes", "health",
               "observed")


# -- what the program passes ------------------------------------------------------------------
@dataclass(frozen=True)
class DeploymentInputs:
    """One deployment of a node as the program rendered it (non-secret)."""

    profile: str
    """Serving profile."""
    port: int
    """Port the engine listens on."""
    release_id: str
    """The rendered release's id."""
    engine: str
    """``vllm`` or ``llama.cpp``."""
    image: str
    """Image the engine runs (the pinned base image, or the overlay tag)."""
    engine_flags: dict[str, str | None]
    """The engine command line as an ordered ``flag → value`` map (``None``: no value), so
    a preview diff names each flag that changes (``--speculative-config``…)."""
    file_hashes: dict[str, str]
    """sha256 of every release file (``engine.env`` in its secret-hashed form)."""
    adopt: str | None = None
    """The hand-started container the first deploy adopts (the stack's ``adopt``)."""

    def to_props(self) -> dict[str, Any]:
        """The resource property (camelCase keys, as Pulumi shows them)."""
        props = {"profile": self.profile, "port": self.port, "releaseId": self.release_id,
                 "engine": self.engine, "image": self.image,
                 "engineFlags": flags_property(self.engine_flags),
                 "fileHashes": dict(self.file_hashes)}
        if self.adopt:
            # Only when set: a stack without adoption keeps the properties it had.
            props["adopt"] = self.adopt
        return props


@dataclass(frozen=True)
class NodeDeploymentArgs:
    """Inputs of a :class:`NodeDeployment`."""

    node: str
    """Node name (inventory file ``nodes/<name>.yaml`` or ``nodes/*/<name>.yaml``)."""
    address: str
    """The node's address (for the endpoints)."""
    project_dir: str
    """The project folder the provider loads inventory, profiles and templates from."""
    stack: str
    """Stack name (``Pulumi.<stack>.yaml``)."""
    strategy: str
    """The stack's rollout strategy (shown; ordering is done with ``depends_on``)."""
    deployments: dict[str, DeploymentInputs]
    """The node's deployments by name."""
    secrets: pulumi.Input[Mapping[str, str]] | None = None
    """Secret environment values the node's profiles need; pass a Pulumi secret."""
    provider_version: str = PROVIDER_VERSION
    """Version of this provider's behaviour."""
    unlock_id: str | None = None
    """Remove the node lock with this id before deploying (stack config
    ``servefleet:forceUnlock.<node>``; a lock with another id stays). Not part of the diff:
    it only unblocks an update that has something to do."""
    allow_outage: bool = False
    """With a gateway, let the rollout drain the last engine serving a route (stack config
    ``servefleet:allowOutage``). Not part of the diff."""

    def to_props(self) -> dict[str, Any]:
        """The resource's input properties, plus the declared outputs (``None``)."""
        props: dict[str, Any] = {
            "node": self.node,
            "address": self.address,
            "projectDir": self.project_dir,
            "stack": self.stack,
            "strategy": self.strategy,
            "providerVersion": self.provider_version,
            "deployments": {name: dep.to_props() for name, dep in self.deployments.items()},
        }
        if self.allow_outage:
            props["allowOutage"] = True
        return with_outputs(props, self.unlock_id, self.secrets, OUTPUT_KEYS)


# -- diff ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeploymentChange:
    """What an update does to one deployment, and why."""

    deployment: str
    """Deployment name."""
    reasons: tuple[str, ...]
    """One phrase per reason (``profile qwen36-fp8 -> qwen36-fp8-mtp``, drift…)."""
    flag_diff: FlagDiff = field(default_factory=FlagDiff)
    """Engine flags added, removed, changed."""
    restart: bool = False
    """The engine (re)starts or stops."""

    def lines(self) -> list[str]:
        """Human lines: reasons, flag changes, restart."""
        out = [f"{self.deployment}: {reason}" for reason in self.reasons]
        out += [f"{self.deployment}:   {line}" for line in self.flag_diff.lines()]
        if self.restart:
            out.append(f"{self.deployment}: engine restarts")
        return out


def _same(key: str, old: Any, new: Any) -> bool:
    if key == "port":
        return _int(old) == _int(new)
    return bool(old == new)


def _flags(value: Any) -> dict[str, str | None]:
    """The inverse of :func:`flags_property`."""
    return {str(k): (None if v is True or v is None else str(v))
            for k, v in _mapping(value).items()}


def drift_reasons(deployed: Mapping[str, Any], observed: Mapping[str, Any] | None) -> list[str]:
    """How a node differs from what was deployed (``deployed``: the deployment's inputs as
    last applied; ``observed``: what ``read``/``create`` found on the node)."""
    if observed is None:
        return []
    want = deployed.get("releaseId")
    health = observed.get("health")
    diffs = release_diff(
        # A state written before file hashes were inputs has none: nothing to compare.
        Wanted(want, file_hashes=_mapping(deployed.get("fileHashes")) or None),
        Seen(current_release=observed.get("currentRelease"),
             running_release=observed.get("runningRelease"),
             file_hashes=_mapping(observed.get("fileHashes")), serving=health == HEALTHY))
    reasons: list[str] = []
    # One reason for the release: the first of these says what the others follow from.
    release = next((d for d in diffs if isinstance(d, CurrentDiff | RunningDiff | FilesDiff)),
                   None)
    if isinstance(release, CurrentDiff):
        reasons.append(f"drift: the node's current release is {release.have or 'none'}, "
                       f"not {want}")
    elif isinstance(release, RunningDiff):
        reasons.append(f"drift: the engine runs release {release.have}, not {want}")
    elif isinstance(release, FilesDiff):
        reasons.append("drift: release files differ on the node: " + ", ".join(release.paths))
    if find(diffs, EngineDiff) is not None:
        reasons.append(f"drift: engine is not healthy ({health or 'unknown'})")
    return reasons


def describe_changes(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[DeploymentChange]:
    """Every deployment an update would touch: desired changes (old inputs in ``olds`` →
    ``news``) and drift (``olds['observed']`` against what was deployed)."""
    old_deps = _mapping(olds.get("deployments"))
    new_deps = _mapping(news.get("deployments"))
    observed = _mapping(olds.get("observed"))
    changes: list[DeploymentChange] = []
    for name in [*new_deps, *(n for n in old_deps if n not in new_deps)]:
        old = _mapping(old_deps.get(name)) if name in old_deps else None
        new = _mapping(new_deps.get(name)) if name in new_deps else None
        if new is None:
            changes.append(DeploymentChange(name, ("removed from the stack: engine stops",),
                                            restart=True))
            continue
        if old is None:
            changes.append(DeploymentChange(
                name, (f"new deployment ({new.get('profile')}, release {new.get('releaseId')})",),
                flag_diff=diff_flags({}, _flags(new.get("engineFlags"))), restart=True))
            continue
        reasons: list[str] = []
        for key in _RELEASE_KEYS:
            if not _same(key, old.get(key), new.get(key)):
                reasons.append(f"{key} {old.get(key)} -> {new.get(key)}")
        flag_diff = diff_flags(_flags(old.get("engineFlags")), _flags(new.get("engineFlags")))
        restart = bool(reasons)
        drift = drift_reasons(old, _mapping(observed.get(name)) if name in observed else None)
        if drift:
            reasons += drift
            restart = True
        if reasons:
            changes.append(DeploymentChange(name, tuple(reasons), flag_diff, restart))
    return changes


# -- applying -----------------------------------------------------------------------------------
def _plain_inputs(props: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs echoed into the outputs: all but the secrets and the provider blob."""
    return plain_inputs(props, OUTPUT_KEYS)


def _deployments(props: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(name): _mapping(dep) for name, dep in _mapping(props.get("deployments")).items()}


def _placed(props: Mapping[str, Any]) -> list[Deployment]:
    """The deployments the resource places on its node (the stack file may say more)."""
    node = str(props["node"])
    return [Deployment(node=node, name=name, profile=str(dep["profile"]),
                       port=_int(dep.get("port")), adopt=dep.get("adopt") or None)
            for name, dep in _deployments(props).items()]


def failure_text(result: NodeResult) -> str:
    """What a failed rollout of one node says: per deployment the phase, the failure class,
    the log lines that prove it, and whether the previous release was restored."""
    headline = {
        "rolled_back": "rollout failed; the previous release was restored",
        "restore_failed": "rollout failed and the previous release could NOT be restored",
        "skipped": "rollout not attempted",
        "interrupted": "rollout interrupted; the node lock records the phase for the next "
                       "`pulumi up` to repair",
    }.get(result.status, "rollout failed")
    lines = [f"{result.node}: {headline}"]
    if result.error:
        lines.append(result.error)
    for dep in result.deployments:
        if dep.ok:
            continue
        where = f"{result.node}/{dep.deployment}"
        failure = dep.failure
        if failure is not None:
            cls = f" [{failure.failure_class}]" if failure.failure_class else ""
            lines.append(f"{where}: release {dep.release_id} failed in {failure.phase}{cls}: "
                         f"{failure.message}")
            lines += [f"  | {line}" for line in failure.evidence]
        if dep.restore is not None:
            state = "restored" if dep.restore.ok else "NOT restored"
            lines.append(f"{where}: previous release {dep.restore.release_id} {state}: "
                         f"{dep.restore.message}")
        elif dep.previous_release is None:
            lines.append(f"{where}: there was no previous release to restore")
    return "\n".join(lines)


def apply(props: Mapping[str, Any], previous: Mapping[str, Any] | None = None,
          ) -> dict[str, Any]:
    """Deploy the resource's deployments on its node, stop the ones it no longer has, and
    return the output properties. Raises with :func:`failure_text` when a rollout fails."""
    from servefleet.adapters import rollout

    secrets = {str(k): str(v) for k, v in _mapping(props.get("secrets")).items()}
    mask = SecretMask.from_mapping(secrets)
    name = str(props["node"])
    placed = _placed(props)
    project = load_project(Path(str(props["projectDir"])), str(props["stack"]))
    wanted = _deployments(props)
    _quiet_libraries()
    unlock_id = props.get("unlockId")
    # The routes come from the whole stack: the gateway knows every node's engines.
    with following_gateway(project, allow_outage=bool(props.get("allowOutage")),
                           mask=mask) as gateway:
        # Called only when the diff found a change: the read under the lock is the
        # node's first (and decides); the one after the rollout reports what it left.
        result = rollout.deploy_node(project, name, placed, secrets,
                                     progress=progress_printer(mask),
                                     unlock_id=str(unlock_id) if unlock_id else None,
                                     hooks=gateway.hooks() if gateway else None,
                                     read_first=False)
    if not result.ok:
        text = mask(failure_text(result))
        gate = any(d.failure is not None and (d.failure.failure_class is not None or
                                              d.failure.phase in ("boot", "health"))
                   for d in result.deployments)
        raise (HealthGateFailed if gate else ServefleetError)(text)
    for dep in result.deployments:
        want = wanted[dep.deployment].get("releaseId")
        if dep.release_id != want:
            raise ConfigError(
                f"{name}/{dep.deployment}: the project renders release {dep.release_id} now, "
                f"but the program rendered {want}: a file changed while pulumi ran; run "
                "`pulumi up` again")
    for gone in [n for n in _deployments(previous or {}) if n not in wanted]:
        rollout.stop_deployment(project, name, gone)
    outs = observe(project.nodes[name], wanted)
    # The rollout re-uploads a release edited on the node; a node that still differs
    # afterwards was changed again meanwhile: say so instead of reporting success.
    left = [f"{name}/{dep}: {reason}" for dep, spec in wanted.items()
            for reason in drift_reasons(spec, outs["observed"].get(dep))
            if not reason.startswith("drift: engine is not healthy")]
    if left:
        raise ServefleetError("\n".join([
            *left, "the node still differs from the rendered release after the rollout: "
            "something changed it meanwhile; run `pulumi up` again"]))
    return {**_plain_inputs(props), **outs}


# -- the provider -------------------------------------------------------------------------------
class NodeDeploymentProvider(ServefleetProvider):
    """Pulumi dynamic provider of :class:`NodeDeployment` (stateless: see the module doc)."""

    def apply(self, props: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
        """Deploy every deployment of the node (health-gated, restored on failure)."""
        return apply(props, previous=previous)

    def resource_id(self, props: dict[str, Any]) -> str:
        """The node's name."""
        return str(props["node"])

    def diff(self, _id: str, _olds: dict[str, Any],
             _news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        """Changed when a deployment's release, profile or port changes, when the node
        drifted from what was deployed, or when the provider version changes."""
        changes = describe_changes(_olds, _news)
        bumped = _olds.get("providerVersion") != _news.get("providerVersion")
        moved = _olds.get("address") != _news.get("address")
        return pulumi.dynamic.DiffResult(changes=bool(changes or bumped or moved))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Stop the node's engines; their releases stay for a later rollback."""
        from servefleet.adapters import rollout

        node = _load_node(str(_props["projectDir"]), str(_props["node"]))
        _quiet_libraries()
        project = Project(root=Path(str(_props["projectDir"])), nodes={node.name: node},
                          node_files={}, profiles={}, profile_files={},
                          stack=StackConfig(stack=str(_props.get("stack") or "sim")),
                          stack_file="")
        for name in _deployments(_props):
            rollout.stop_deployment(project, node.name, name)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        """What is really on the node now (``pulumi refresh``)."""
        node = _load_node(str(props["projectDir"]), str(props["node"]))
        _quiet_libraries()
        outs = {**_plain_inputs(props), **observe(node, _deployments(props))}
        return pulumi.dynamic.ReadResult(id_=id_, outs=outs)


class NodeDeployment(pulumi.dynamic.Resource, module=RESOURCE_MODULE, name=RESOURCE_NAME):
    """The engines of one node, rolled out by servefleet."""

    endpoints: pulumi.Output[dict[str, str]]
    """Deployment → ``http://<address>:<port>``."""
    releaseIds: pulumi.Output[dict[str, str | None]]
    """Deployment → release ``current`` names on the node."""
    kvCacheTokens: pulumi.Output[dict[str, int | None]]
    """Deployment → KV-cache pool in tokens, from the engine's boot log."""
    cudagraphModes: pulumi.Output[dict[str, str | None]]
    """Deployment → final CUDA-graph mode, from the engine's boot log."""
    health: pulumi.Output[dict[str, str]]
    """Deployment → ``healthy`` or what is wrong."""
    observed: pulumi.Output[dict[str, Any]]
    """Deployment → everything observed (image, file hashes, boot facts…)."""

    def __init__(self, name: str, args: NodeDeploymentArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(NodeDeploymentProvider(), name, args.to_props(), opts)


def summary(changes: Sequence[DeploymentChange]) -> list[str]:
    """Human lines for a list of changes (tests and tools print them)."""
    return [line for change in changes for line in change.lines()]

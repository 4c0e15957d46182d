"""Drift: how a node differs from what git says it should run. Pure: data in, items out.

:class:`DesiredNode` is what the inventory, the profiles and the rendered releases promise;
:class:`NodeObservation` is what one read of the node found (gathered by
:mod:`servefleet.adapters.drift_collect`). :func:`compare` lists every difference as a
:class:`DriftItem` with a :class:`DriftKind`, the expected and the observed value and one
line for the operator. Secret values never appear: secrets are compared by sha256 and shown
as ``(secret)``.

:func:`desired_deployment` derives the desired state of one deployment from its rendered
release (the compose files as docker compose merges them: command, environment, labels).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Literal

import yaml
from pydantic import Field, JsonValue

from servefleet.core.baselines import BASELINE_FILE, Baseline, relative_change
from servefleet.core.gpu import ExpectedGpuFacts, GpuProbeResult, compare_with_inventory
from servefleet.core.models.common import StrictModel
from servefleet.core.models.profile import version_tuple
from servefleet.core.observed import ObservedContainer, gate_miss
from servefleet.core.secrets import secret_digest

MANIFEST_FILE = "manifest.json"
"""Written by the rollout next to the release files; not one of the rendered files."""
ENV_FILE = "engine.env"
"""The release's secret env file (hashed form in every hash shown or compared)."""
COMPOSE_LABEL_PREFIX = "com.docker.compose."
"""Labels docker compose adds itself (project, service, config hash…): never drift."""
ENGINE_SERVICE = "engine"
"""The compose service of the engine in every rendered compose file."""
SECRET_SHOWN = "(secret)"
"""What a report shows instead of a secret value."""
HIDDEN_SHOWN = "(set; value not shown)"
"""What a report shows for an unmanaged variable: it may hold a secret."""


class DriftKind(StrEnum):
    """What kind of difference an item describes."""

    RELEASE = "release"
    """``current`` points at another release than git renders (or there is none)."""
    FILE_HASH = "file-hash"
    """A file of the current release no longer has the content it was deployed with."""
    CONTAINER_MISSING = "container-missing"
    """The deployment has no container."""
    CONTAINER_STOPPED = "container-stopped"
    """The container exists but does not run (exited, created, dead, paused)."""
    UNGATED_ENGINE = "ungated-engine"
    """The running engine never passed the health gate (started by hand, or again since)."""
    CONTAINER_RESTARTING = "container-restarting"
    """The container is crash-looping, or Docker has restarted it since it was created."""
    COMMAND = "command"
    """The running container's command line differs from the rendered one."""
    ENV = "env"
    """An environment variable is missing, different or added by hand."""
    LABELS = "labels"
    """A label is missing, different or added by hand."""
    IMAGE_DIGEST = "image-digest"
    """The container runs another image than the pinned / deployed one (a tag that moved)."""
    PATCH_SET = "patch-set"
    """The overlay marker inside the container differs from the release's patch set."""
    DRIVER = "driver"
    """The NVIDIA driver differs from the inventory."""
    CUDA = "cuda"
    """The CUDA driver version differs from the inventory."""
    GPU = "gpu"
    """GPUs (name, count, memory, compute capability, architecture) differ from the inventory."""
    ENGINE_VERSION = "engine-version"
    """The engine's ``/version`` differs from the profile's ``engine_version``."""
    KV_POOL = "kv-pool"
    """The latest boot's KV pool differs from the baseline beyond the profile's tolerance."""
    CUDAGRAPH_MODE = "cudagraph-mode"
    """The latest boot's CUDA-graph mode differs from the expected one."""
    UNREACHABLE = "unreachable"
    """The node could not be reached or read: nothing on it was checked."""
    ERROR = "error"
    """A fact could not be read (docker down, collector failed): that part was not checked."""


ERROR_KINDS = frozenset({DriftKind.UNREACHABLE, DriftKind.ERROR})
"""Kinds that mean "not checked" rather than "differs": they make the exit status 1."""

NodeStatus = Literal["ok", "drift", "error"]


class DriftItem(StrictModel):
    """One difference between git and a node."""

    node: str
    """Node name."""
    deployment: str | None
    """Deployment name; ``None`` for node-wide facts (GPU, driver, reachability)."""
    kind: DriftKind
    """What differs."""
    expected: JsonValue = None
    """What git says (``None`` when git says nothing should be there)."""
    observed: JsonValue = None
    """What the node has (``None`` when missing or unreadable)."""
    message: str
    """One line for the operator: what differs and what to do."""
    subject: str | None = None
    """The file, variable or label concerned, when the kind has several."""


# --------------------------------------------------------------------------- desired state


class ImageExpectation(StrictModel):
    """Which image the engine container should run."""

    ref: str
    """Image the release's compose file names (``repo:tag@sha256:…`` or an overlay tag)."""
    repo_digest: str | None = None
    """Pinned content digest ``sha256:…``; checked against the image's RepoDigests when the
    node pulled it from a registry (a locally built image has none)."""
    image_id: str | None = None
    """Image ID (``sha256:…``) the deployment started with, when the node recorded one
    (manifest, or the image the rollout's health gate recorded for the current release);
    the strongest check, also for locally built images."""


class DesiredDeployment(StrictModel):
    """What one deployment should look like on its node."""

    node: str
    """Node name."""
    deployment: str
    """Deployment name (folder under the base directory and compose project)."""
    profile: str
    """Profile name."""
    profile_identity: str
    """sha256 of the resolved profile."""
    release_id: str | None
    """Release id git renders; ``None`` when it cannot be computed here (a secret value is
    not available), in which case the profile identity of the current release is compared."""
    file_hashes: dict[str, str] = Field(default_factory=dict)
    """Rendered files and their sha256 (``engine.env`` in hashed form); empty when
    ``release_id`` is None."""
    command: tuple[str, ...] | None = None
    """Engine command line (compose ``command:``); ``None`` skips the check."""
    env: dict[str, str] = Field(default_factory=dict)
    """Non-secret environment the compose files set."""
    secret_env: dict[str, str | None] = Field(default_factory=dict)
    """Secret variables → ``sha256:`` digest of the value; ``None`` when the value is not
    known here (then the container is compared with the release's ``engine.env``)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels the compose files set."""
    image: ImageExpectation
    """The image."""
    patch_marker_sha256: str | None = None
    """sha256 of the release's ``patches.json`` when it builds an overlay; ``None`` when no
    overlay marker is expected inside the container."""
    engine: str
    """``vllm`` or ``llama.cpp``."""
    engine_version: str
    """Version the profile pins."""
    kv_baseline: Baseline | None = None
    """The node's KV-pool baseline of this profile as git has it (the health checks record
    it after a healthy boot); ``None`` skips the check."""
    kv_tolerance: float = 0.05
    """Relative change of the KV pool that is flagged (profile ``health.kv_tolerance``)."""
    cudagraph_mode: str | None = None
    """Expected final CUDA-graph mode; ``None`` skips the check."""


class DesiredNode(StrictModel):
    """What one node should look like."""

    node: str
    """Node name."""
    gpu: ExpectedGpuFacts | None = None
    """What the inventory says about GPUs, driver, CUDA and CPU; ``None`` skips the probe."""
    deployments: tuple[DesiredDeployment, ...] = ()
    """Deployments placed on the node by the stack."""


# --------------------------------------------------------------------------- observed state


class BootSummary(StrictModel):
    """The facts of the latest boot log that drift compares."""

    outcome: str | None = None
    """``ready``, ``failed`` or ``incomplete``."""
    kv_cache_tokens: int | None = None
    """KV pool in tokens (vLLM)."""
    kv_cache_mib: float | None = None
    """KV buffer in MiB (llama.cpp)."""
    cudagraph_mode: str | None = None
    """Final CUDA-graph mode."""


class ObservedDeploymentState(StrictModel):
    """One deployment as read from its node."""

    deployment: str
    """Deployment name."""
    present: bool = True
    """The deployment's folder exists."""
    current_release: str | None = None
    """Release ``current`` points to."""
    manifest: dict[str, Any] | None = None
    """The current release's manifest."""
    file_hashes: dict[str, str] = Field(default_factory=dict)
    """sha256 of each file of the current release (``engine.env`` in hashed form; the
    manifest itself left out)."""
    release_secret_digests: dict[str, str] = Field(default_factory=dict)
    """Variable → ``sha256:`` digest of its value in the current release's ``engine.env``."""
    container: ObservedContainer | None = None
    """The engine container (the drift collector fills every field); ``None`` when there
    is none."""
    others: int = 0
    """Further containers of the same compose project (left-overs)."""
    docker_error: str | None = None
    """Why containers could not be listed."""
    boot: BootSummary | None = None
    """Facts of the latest boot's log; ``None`` when it could not be read."""
    gated: dict[str, str] | None = None
    """The deployment's gate mark (``release``, ``started``, ``at``): the engine that last
    passed its gate; empty when there is none; ``None`` when it was not read."""
    engine_version: str | None = None
    """What the engine's HTTP API says its version is."""
    engine_version_error: str | None = None
    """Why the version could not be asked."""


class NodeObservation(StrictModel):
    """Everything one drift read of a node found."""

    node: str
    """Node name."""
    unreachable: str | None = None
    """Why the node could not be read at all; ``None`` when it was."""
    gpu: GpuProbeResult | None = None
    """The GPU probe's reading."""
    gpu_error: str | None = None
    """Why the GPU probe gave no reading."""
    deployments: dict[str, ObservedDeploymentState] = Field(default_factory=dict)
    """Deployments read, by name."""
    baselines: dict[str, Any] = Field(default_factory=dict)
    """Baselines files of the node's base directory (name → JSON content; ``None`` when
    absent), read for the desired side's KV-pool and image baselines."""
    errors: tuple[str, ...] = ()
    """Other facts that could not be read."""


# --------------------------------------------------------------------------- comparison


def engine_version_matches(expected: str, observed: str) -> bool:
    """Does the version an engine reports match the profile's pin?

    vLLM reports ``0.21.0`` or ``0.19.1rc1.dev328+g18013df6a`` (a local ``+`` part the pin
    may leave out); llama.cpp's ``build_info`` is ``b8680-1a2b3c4`` for the pin ``b8680``.
    """
    want, have = expected.strip().lstrip("v"), observed.strip().lstrip("v")
    if have == want:
        return True
    if have.startswith(want + "+") or have.startswith(want + "-"):
        return True
    # llama.cpp pins may be written as a bare number; builds report b<N>.
    return bool(re.fullmatch(r"b?\d+", want)) and version_tuple(have.split("-")[0]) == \
        version_tuple(want)


def _short(digest: str | None) -> str | None:
    if digest is None:
        return None
    algo, _, hexpart = digest.partition(":")
    return f"{algo}:{hexpart[:12]}" if hexpart else digest[:12]


def _status_phrase(container: ObservedContainer) -> str:
    detail = "OOM-killed, " if container.oom_killed else ""
    return f"{container.status} ({detail}exit {container.exit_code})"


class _Items:
    """Collects items for one node and deployment."""

    def __init__(self, node: str, deployment: str | None) -> None:
        self.node = node
        self.deployment = deployment
        self.found: list[DriftItem] = []

    def add(self, kind: DriftKind, expected: JsonValue, observed: JsonValue, message: str,
            subject: str | None = None) -> None:
        where = f"{self.node}/{self.deployment}" if self.deployment else self.node
        self.found.append(DriftItem(node=self.node, deployment=self.deployment, kind=kind,
                                    expected=expected, observed=observed,
                                    message=f"{where}: {message}", subject=subject))


def _compare_gpu(desired: DesiredNode, observed: NodeObservation, items: _Items) -> None:
    if desired.gpu is None:
        return
    if observed.gpu is None:
        items.add(DriftKind.ERROR, None, None,
                  f"GPU probe gave no reading: {observed.gpu_error or 'no reason given'}",
                  "gpu")
        return
    for mismatch in compare_with_inventory(observed.gpu, desired.gpu):
        if mismatch.severity != "error":
            continue  # "could not be read" warnings: not a difference
        kind = {"driver_version": DriftKind.DRIVER,
                "cuda_version": DriftKind.CUDA}.get(mismatch.field, DriftKind.GPU)
        items.add(kind, mismatch.expected, mismatch.observed, mismatch.message, mismatch.field)


def _compare_release(want: DesiredDeployment, have: ObservedDeploymentState,
                     items: _Items) -> None:
    if not have.present:
        items.add(DriftKind.RELEASE, want.release_id, None,
                  "not deployed: the deployment's folder does not exist on the node; deploy it")
        return
    if have.current_release is None:
        items.add(DriftKind.RELEASE, want.release_id, None,
                  "no current release (the 'current' link is missing); deploy again")
        return
    if want.release_id is not None:
        if have.current_release != want.release_id:
            profile = (have.manifest or {}).get("profile")
            was = f" (profile {profile})" if isinstance(profile, str) else ""
            items.add(DriftKind.RELEASE, want.release_id, have.current_release,
                      f"runs release {have.current_release}{was}, git renders "
                      f"{want.release_id} (profile {want.profile}); deploy to converge, or "
                      "roll back in git")
    else:
        identity = (have.manifest or {}).get("profile_identity")
        if identity != want.profile_identity:
            items.add(DriftKind.RELEASE, _short("sha256:" + want.profile_identity),
                      _short(f"sha256:{identity}") if isinstance(identity, str) else None,
                      f"release {have.current_release} was rendered from another profile "
                      f"than {want.profile} in git (release id not computed: a secret value "
                      "is not available here)")


def _manifest_hashes(manifest: Mapping[str, Any] | None) -> dict[str, str] | None:
    files = (manifest or {}).get("files")
    if not isinstance(files, dict):
        return None
    hashes: dict[str, str] = {}
    for path, entry in files.items():
        digest = entry.get("sha256") if isinstance(entry, dict) else entry
        if isinstance(digest, str):
            hashes[str(path)] = digest
    return hashes


def _compare_files(want: DesiredDeployment, have: ObservedDeploymentState,
                   items: _Items) -> None:
    if not have.present or have.current_release is None:
        return
    # The files must match what they were deployed with: git's render when the release is
    # the one git renders, else the release's own manifest (a hand edit is drift either way).
    if want.release_id is not None and have.current_release == want.release_id:
        expected, source = want.file_hashes, "git"
    else:
        recorded = _manifest_hashes(have.manifest)
        if recorded is None:
            items.add(DriftKind.ERROR, None, None,
                      f"release {have.current_release} has no readable {MANIFEST_FILE}; its "
                      "files could not be checked", MANIFEST_FILE)
            return
        expected, source = recorded, MANIFEST_FILE
    for path in sorted(set(expected) | set(have.file_hashes)):
        want_hash, have_hash = expected.get(path), have.file_hashes.get(path)
        if want_hash == have_hash:
            continue
        if have_hash is None:
            message = f"{path} is missing from release {have.current_release}"
        elif want_hash is None:
            message = f"{path} was added to release {have.current_release} by hand"
        else:
            message = (f"{path} of release {have.current_release} was edited on the node "
                       f"(sha256 {have_hash[:12]}…, {source} says {want_hash[:12]}…); "
                       "deploy again to restore it, or move the change into git")
        items.add(DriftKind.FILE_HASH, want_hash, have_hash, message, path)


def _compare_container_state(have: ObservedDeploymentState, container: ObservedContainer,
                             items: _Items) -> None:
    if container.status == "restarting":
        items.add(DriftKind.CONTAINER_RESTARTING, "running",
                  f"restarting ({container.restart_count} restarts)",
                  f"container {container.name} is crash-looping ({container.restart_count} "
                  f"restarts, last exit {container.exit_code}); read its log")
    elif not container.running:
        items.add(DriftKind.CONTAINER_STOPPED, "running", _status_phrase(container),
                  f"container {container.name} is {_status_phrase(container)}; start it "
                  "or deploy again")
    elif container.restart_count > 0:
        items.add(DriftKind.CONTAINER_RESTARTING, 0, container.restart_count,
                  f"container {container.name} runs but Docker restarted it "
                  f"{container.restart_count} time(s) since it was created (it crashed)")
    if have.others:
        items.add(DriftKind.CONTAINER_STOPPED, 1, 1 + have.others,
                  f"{have.others} more container(s) belong to the compose project "
                  "(left-overs of a hand-made change?)", "containers")


def ungated_why(have: ObservedDeploymentState, container: ObservedContainer) -> str | None:
    """Why the running ``container`` has not passed its gate (the gate mark names another
    release, or an earlier start of it), or ``None``: it passed, is not running, or the
    mark was not read. Drift and the Pulumi provider's health both say it."""
    if have.gated is None or not container.running:
        return None
    gated_release = have.gated.get("release")
    miss = gate_miss(container.release_id, container.started_at, gated_release,
                     have.gated.get("started"))
    if miss == "no-gate":
        return "no passed health gate is recorded for it"
    if miss == "other-release":
        return f"the last gate passed for release {gated_release}"
    if miss == "started-again":
        return (f"its container started again since its gate passed ({container.restart_count}"
                " Docker restarts)")
    return None


def _compare_gate(have: ObservedDeploymentState, container: ObservedContainer,
                  items: _Items) -> None:
    """A running engine whose container is not the one the gate mark names."""
    why = ungated_why(have, container)
    if why is None:
        return
    release = container.release_label
    items.add(DriftKind.UNGATED_ENGINE, "gated", "ungated",
              f"engine {release or '?'} runs ungated: {why}; run servefleet deploy to put it "
              "through the gate", "gated")


def _compare_command(want: DesiredDeployment, container: ObservedContainer,
                     items: _Items) -> None:
    if want.command is None or container.command is None:
        return
    if tuple(container.command) == tuple(want.command):
        return
    missing = [a for a in want.command if a not in container.command]
    added = [a for a in container.command if a not in want.command]
    detail = []
    if missing:
        detail.append("missing " + " ".join(missing))
    if added:
        detail.append("added " + " ".join(added))
    items.add(DriftKind.COMMAND, list(want.command), list(container.command),
              f"container {container.name} runs another command line than the release "
              f"({'; '.join(detail) or 'same arguments in another order'})")


def _compare_env(want: DesiredDeployment, have: ObservedDeploymentState,
                 container: ObservedContainer, items: _Items) -> None:
    env = container.env
    for name, value in sorted(want.env.items()):
        got = env.get(name)
        if got is None:
            items.add(DriftKind.ENV, value, None,
                      f"environment variable {name} is not set in the container", name)
        elif got.sha256 != secret_digest(value):
            shown = got.value if got.value is not None else HIDDEN_SHOWN
            items.add(DriftKind.ENV, value, shown,
                      f"environment variable {name} is {shown!r} in the container, the "
                      f"release sets {value!r}", name)
    for name, digest in sorted(want.secret_env.items()):
        got = env.get(name)
        reference = digest if digest is not None else have.release_secret_digests.get(name)
        if got is None:
            items.add(DriftKind.ENV, SECRET_SHOWN, None,
                      f"secret variable {name} is not set in the container", name)
        elif reference is not None and got.sha256 != reference:
            against = "git's value" if digest is not None else f"the release's {ENV_FILE}"
            items.add(DriftKind.ENV, SECRET_SHOWN, f"{SECRET_SHOWN} differs",
                      f"secret variable {name} in the container differs from {against} "
                      "(compared by sha256)", name)
    managed = set(want.env) | set(want.secret_env)
    for name, got in sorted(env.items()):
        if name in managed or container.image_env.get(name) == got.sha256:
            continue
        items.add(DriftKind.ENV, None, HIDDEN_SHOWN,
                  f"environment variable {name} is set in the container but not by the "
                  "release (added by hand?)", name)


def _compare_labels(want: DesiredDeployment, container: ObservedContainer,
                    items: _Items) -> None:
    labels = container.labels
    for name, value in sorted(want.labels.items()):
        got = labels.get(name)
        if got != value:
            what = "missing" if got is None else f"{got!r}"
            items.add(DriftKind.LABELS, value, got,
                      f"label {name} is {what} on the container, the release sets {value!r}",
                      name)
    for name, got in sorted(labels.items()):
        if name in want.labels or name.startswith(COMPOSE_LABEL_PREFIX):
            continue
        if container.image_labels.get(name) == got:
            continue
        items.add(DriftKind.LABELS, None, got,
                  f"label {name}={got!r} is on the container but not in the release", name)


def _compare_image(want: DesiredDeployment, container: ObservedContainer,
                   items: _Items) -> None:
    image = want.image
    have_id = container.image_id
    if image.image_id is not None and have_id is not None and have_id != image.image_id:
        items.add(DriftKind.IMAGE_DIGEST, image.image_id, have_id,
                  f"container {container.name} runs image {_short(have_id)}, the deployment "
                  f"started with {_short(image.image_id)} ({container.image_ref or image.ref}:"
                  " a tag that moved, or an image rebuilt by hand)", "image_id")
    elif image.repo_digest is not None and container.repo_digests and not any(
            d.endswith("@" + image.repo_digest) for d in container.repo_digests):
        items.add(DriftKind.IMAGE_DIGEST, image.repo_digest, list(container.repo_digests),
                  f"container {container.name} runs an image whose digest is not the pinned "
                  f"{_short(image.repo_digest)} (its tag moved); deploy again to pull the "
                  "pinned digest", "repo_digest")
    if container.ref_image_id is not None and have_id is not None and \
            container.ref_image_id != have_id:
        items.add(DriftKind.IMAGE_DIGEST, have_id, container.ref_image_id,
                  f"{container.image_ref} now points at image {_short(container.ref_image_id)}, "
                  f"the container runs {_short(have_id)}: the tag moved under it (the next "
                  "restart would run the other image)", "image_ref")


def _compare_patch_set(want: DesiredDeployment, container: ObservedContainer,
                       items: _Items) -> None:
    if not container.patch_marker_checked:
        return
    want_hash, have_hash = want.patch_marker_sha256, container.patch_marker_sha256
    if want_hash == have_hash:
        return
    if want_hash is None:
        message = ("the container carries an overlay marker, but the release builds no "
                   "overlay (an image patched by hand?)")
    elif have_hash is None:
        message = ("the overlay marker is missing from the container: it runs an image "
                   "without the release's patches")
    else:
        message = "the container's overlay marker lists another patch set than the release"
    items.add(DriftKind.PATCH_SET, want_hash, have_hash, message, "patches.json")


def _pool(value: float, unit: str) -> int | float:
    return round(value) if unit == "tokens" else value


def _compare_kv_pool(want: DesiredDeployment, boot: BootSummary, items: _Items) -> None:
    baseline = want.kv_baseline
    if baseline is None:
        return
    now = boot.kv_cache_tokens if baseline.unit == "tokens" else boot.kv_cache_mib
    if now is None:
        return
    change = relative_change(now, baseline.kv_pool)
    if abs(change) <= want.kv_tolerance:
        return
    unit, base = baseline.unit, _pool(baseline.kv_pool, baseline.unit)
    items.add(DriftKind.KV_POOL, base, _pool(now, unit),
              f"the latest boot's KV pool is {_pool(now, unit):,} {unit}, the baseline "
              f"({BASELINE_FILE}, recorded {baseline.recorded_at}) is {base:,} "
              f"({change:+.1%}, tolerance ±{want.kv_tolerance:.0%})")


def _compare_engine(want: DesiredDeployment, have: ObservedDeploymentState,
                    items: _Items) -> None:
    if have.engine_version is not None:
        if not engine_version_matches(want.engine_version, have.engine_version):
            items.add(DriftKind.ENGINE_VERSION, want.engine_version, have.engine_version,
                      f"the engine reports version {have.engine_version}, the profile pins "
                      f"{want.engine_version}")
    elif have.engine_version_error is not None:
        items.add(DriftKind.ENGINE_VERSION, want.engine_version, None,
                  f"the engine did not tell its version: {have.engine_version_error}")
    boot = have.boot
    if boot is None:
        return
    _compare_kv_pool(want, boot, items)
    if want.cudagraph_mode is not None and boot.cudagraph_mode is not None and \
            boot.cudagraph_mode.upper() != want.cudagraph_mode.upper():
        items.add(DriftKind.CUDAGRAPH_MODE, want.cudagraph_mode, boot.cudagraph_mode,
                  f"the latest boot runs CUDA graphs in mode {boot.cudagraph_mode}, expected "
                  f"{want.cudagraph_mode}")


def _compare_deployment(want: DesiredDeployment, have: ObservedDeploymentState | None,
                        node: str) -> list[DriftItem]:
    items = _Items(node, want.deployment)
    if have is None:
        items.add(DriftKind.ERROR, None, None, "the node's answer left this deployment out")
        return items.found
    _compare_release(want, have, items)
    _compare_files(want, have, items)
    if have.docker_error is not None:
        items.add(DriftKind.ERROR, None, None,
                  f"containers could not be listed: {have.docker_error}", "docker")
        return items.found
    container = have.container
    if container is None:
        items.add(DriftKind.CONTAINER_MISSING, "running", None,
                  "the deployment has no container; deploy again")
        return items.found
    _compare_container_state(have, container, items)
    _compare_gate(have, container, items)
    _compare_command(want, container, items)
    _compare_env(want, have, container, items)
    _compare_labels(want, container, items)
    _compare_image(want, container, items)
    _compare_patch_set(want, container, items)
    if container.running:
        _compare_engine(want, have, items)
    return items.found


def compare(desired: DesiredNode, observed: NodeObservation) -> list[DriftItem]:
    """Every difference between what git wants on a node and what the node has.

    An unreachable node gives one ``unreachable`` item and nothing else. Checks whose
    facts are missing from ``observed`` are skipped or reported as ``error`` items.
    """
    node_items = _Items(desired.node, None)
    if observed.unreachable is not None:
        reason = observed.unreachable.removeprefix(f"{desired.node}: ")
        node_items.add(DriftKind.UNREACHABLE, "reachable", None, reason)
        return node_items.found
    for error in observed.errors:
        node_items.add(DriftKind.ERROR, None, None, error)
    _compare_gpu(desired, observed, node_items)
    found = list(node_items.found)
    for want in desired.deployments:
        found.extend(_compare_deployment(want, observed.deployments.get(want.deployment),
                                         desired.node))
    return found


def node_status(items: Iterable[DriftItem]) -> NodeStatus:
    """``error`` when something could not be checked, ``drift`` when something differs."""
    kinds = {item.kind for item in items}
    if kinds & ERROR_KINDS:
        return "error"
    return "drift" if kinds else "ok"


class NodeReport(StrictModel):
    """The drift check's answer for one node."""

    status: NodeStatus
    """``ok``, ``drift`` or ``error``."""
    items: tuple[DriftItem, ...] = ()
    """What differs (or could not be checked)."""


class DriftReport(StrictModel):
    """The drift check's answer for the fleet (``servefleet drift --json``)."""

    status: NodeStatus
    """The worst node status."""
    nodes: dict[str, NodeReport]
    """Per node, in the order checked."""
    stack: str | None = None
    """Stack checked."""
    checked_at: str | None = None
    """When the check started (ISO 8601, UTC)."""
    errors: tuple[str, ...] = ()
    """Problems that stopped the check before any node was read (configuration)."""
    notes: tuple[str, ...] = ()
    """What was checked less strictly than it could be, and why (a missing secret)."""

    @property
    def exit_code(self) -> int:
        """0 clean, 2 drift, 1 error (``terraform plan -detailed-exitcode``'s convention)."""
        return {"ok": 0, "drift": 2, "error": 1}[self.status]

    @property
    def items(self) -> list[DriftItem]:
        """Every item of every node."""
        return [item for report in self.nodes.values() for item in report.items]

    def to_json(self) -> str:
        """The machine-readable report."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"


def build_report(items_by_node: Mapping[str, Sequence[DriftItem]], *,
                 stack: str | None = None, checked_at: str | None = None,
                 errors: Sequence[str] = (), notes: Sequence[str] = ()) -> DriftReport:
    """The fleet report from each node's items (and configuration errors, if any)."""
    nodes = {name: NodeReport(status=node_status(items), items=tuple(items))
             for name, items in items_by_node.items()}
    statuses = {r.status for r in nodes.values()}
    status: NodeStatus = "error" if "error" in statuses or errors else \
        "drift" if "drift" in statuses else "ok"
    return DriftReport(status=status, nodes=nodes, stack=stack, checked_at=checked_at,
                       errors=tuple(errors), notes=tuple(notes))


# --------------------------------------------------------------------------- desired from a release


_INTERPOLATION_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}"
                               r"|\$([A-Za-z_][A-Za-z0-9_]*)")


def _interpolate(value: str, variables: Mapping[str, str]) -> str:
    """Compose's interpolation of ``${NAME}``, ``${NAME:-default}``, ``$NAME`` and ``$$``."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(3)
        value = variables.get(name)
        if value in (None, "") and match.group(2) is not None:
            return match.group(2)
        return value or ""
    return _INTERPOLATION_RE.sub(replace, value)


def parse_dotenv(content: bytes) -> dict[str, str]:
    """``NAME=value`` lines of a compose ``.env`` / env file (quotes removed, comments
    skipped)."""
    values: dict[str, str] = {}
    for line in content.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def _mapping(value: Any, where: str) -> dict[str, str]:
    """A compose ``environment`` / ``labels`` entry (mapping or ``NAME=value`` list)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): "" if v is None else _scalar(v) for k, v in value.items()}
    if isinstance(value, list):
        result = {}
        for entry in value:
            name, _, rest = str(entry).partition("=")
            result[name] = rest
        return result
    raise ValueError(f"{where} is neither a mapping nor a list")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Reset:
    """A compose ``!reset`` value: the key is cleared, whatever earlier files set."""


class _Override:
    """A compose ``!override`` value: replaces the earlier value instead of merging."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _ComposeLoader(yaml.SafeLoader):
    """safe_load plus compose's merge tags (``!reset``, ``!override``)."""


def _construct_reset(loader: yaml.SafeLoader, node: yaml.Node) -> _Reset:
    return _Reset()


def _construct_override(loader: yaml.SafeLoader, node: yaml.Node) -> _Override:
    if isinstance(node, yaml.MappingNode):
        return _Override(loader.construct_mapping(node, deep=True))
    if isinstance(node, yaml.SequenceNode):
        return _Override(loader.construct_sequence(node, deep=True))
    return _Override(loader.construct_scalar(node))  # type: ignore[arg-type]


_ComposeLoader.add_constructor("!reset", _construct_reset)
_ComposeLoader.add_constructor("!override", _construct_override)


class ComposeService(StrictModel):
    """The engine service after docker compose merged the release's compose files."""

    image: str | None = None
    """``image:``."""
    command: tuple[str, ...] | None = None
    """``command:`` as a list."""
    environment: dict[str, str] = Field(default_factory=dict)
    """``environment:`` (not the ``env_file``)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """``labels:``."""


def merged_engine_service(files: Mapping[str, bytes], compose_files: Sequence[str],
                          service: str = ENGINE_SERVICE) -> ComposeService:
    """Merge ``compose_files`` (in ``-f`` order) the way docker compose does for the fields
    drift compares: ``image`` and ``command`` replaced, ``environment`` and ``labels``
    merged by key. Values are interpolated from the release's ``.env``."""
    variables = parse_dotenv(files.get(".env", b""))
    image: str | None = None
    command: tuple[str, ...] | None = None
    environment: dict[str, str] = {}
    labels: dict[str, str] = {}
    for name in compose_files:
        content = files.get(name)
        if content is None:
            continue  # an override outside the release (absolute path): not rendered here
        # A SafeLoader subclass: no arbitrary objects, only the two compose tags.
        document = yaml.load(content, Loader=_ComposeLoader) or {}
        spec = (document.get("services") or {}).get(service)
        if not isinstance(spec, dict):
            continue
        for key, value in list(spec.items()):
            if isinstance(value, _Reset):
                spec[key] = None
                if key == "environment":
                    environment = {}
                elif key == "labels":
                    labels = {}
            elif isinstance(value, _Override):
                spec[key] = value.value
                if key == "environment":
                    environment = {}
                elif key == "labels":
                    labels = {}
        if spec.get("image") is not None:
            image = _interpolate(str(spec["image"]), variables)
        if "command" in spec:
            raw = spec["command"]
            args = raw if isinstance(raw, list) else str(raw or "").split()
            command = tuple(_interpolate(_scalar(a), variables) for a in args) or None
        environment.update({k: _interpolate(v, variables) for k, v in
                            _mapping(spec.get("environment"), f"{name}: environment").items()})
        labels.update({k: _interpolate(v, variables) for k, v in
                       _mapping(spec.get("labels"), f"{name}: labels").items()})
    return ComposeService(image=image, command=command, environment=environment,
                          labels=labels)


def desired_deployment(
    *,
    node: str,
    deployment: str,
    profile: str,
    profile_identity: str,
    release_id: str | None,
    files: Mapping[str, bytes],
    file_hashes: Mapping[str, str],
    compose_files: Sequence[str],
    secret_names: Sequence[str],
    secrets: Mapping[str, str] | None,
    engine: str,
    engine_version: str,
    kv_tolerance: float,
    cudagraph_mode: str | None = None,
    kv_baseline: Baseline | None = None,
    image_id: str | None = None,
) -> DesiredDeployment:
    """The desired state of one deployment from its rendered release files.

    ``release_id`` is ``None`` when the release was rendered without every secret value:
    then file hashes are not compared against git (only against the node's manifest). The
    pinned digest is taken from the merged compose ``image:`` (``ref@sha256:…``), so a node
    override that swaps the image (a local build) is not held to the profile's digest.
    """
    service = merged_engine_service(files, compose_files)
    marker = files.get("patches.json")
    secret_env: dict[str, str | None] = {}
    for name in secret_names:
        value = (secrets or {}).get(name)
        secret_env[name] = secret_digest(value) if value is not None else None
    env = {k: v for k, v in service.environment.items() if k not in secret_env}
    ref = service.image or ""
    _, at, digest = ref.partition("@")
    return DesiredDeployment(
        node=node, deployment=deployment, profile=profile, profile_identity=profile_identity,
        release_id=release_id,
        file_hashes=dict(file_hashes) if release_id is not None else {},
        command=service.command, env=env, secret_env=secret_env, labels=service.labels,
        image=ImageExpectation(ref=ref, repo_digest=digest if at else None,
                               image_id=image_id),
        patch_marker_sha256=hashlib.sha256(marker).hexdigest() if marker is not None else None,
        engine=engine, engine_version=engine_version,
        kv_baseline=kv_baseline, kv_tolerance=kv_tolerance, cudagraph_mode=cudagraph_mode,
    )

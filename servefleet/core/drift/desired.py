"""Drift's desired side: what one deployment and one node should look like, as git says.

The release's files are held to git by hash. The engine container is held to what those
files mean: the engine service as ``docker compose config`` merges them on the node
(:class:`~servefleet.core.observed.ComposeService`), Compose's own answer rather than a copy
of its merge rules here."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from pydantic import Field

from servefleet.core.baselines import Baseline
from servefleet.core.gpu import ExpectedGpuFacts
from servefleet.core.models.common import StrictModel
from servefleet.core.observed import ComposeService
from servefleet.core.secrets import secret_digest


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
    service_known: bool = True
    """Compose told how the release's files merge: without it (no current release, or
    ``docker compose config`` failed) the container's command, environment and labels
    are not compared."""
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


def desired_deployment(
    *,
    node: str,
    deployment: str,
    profile: str,
    profile_identity: str,
    release_id: str | None,
    files: Mapping[str, bytes],
    file_hashes: Mapping[str, str],
    service: ComposeService | None,
    secret_names: Sequence[str],
    secrets: Mapping[str, str] | None,
    engine: str,
    engine_version: str,
    kv_tolerance: float,
    cudagraph_mode: str | None = None,
    kv_baseline: Baseline | None = None,
    image_id: str | None = None,
) -> DesiredDeployment:
    """The desired state of one deployment from its rendered release files and ``service``,
    the engine service as Compose merges the node's current release (``None``: not known).

    ``release_id`` is ``None`` when the release was rendered without every secret value:
    then file hashes are not compared against git (only against the node's manifest). The
    pinned digest is taken from the merged compose ``image:`` (``ref@sha256:…``), so a node
    override that swaps the image (a local build) is not held to the profile's digest.
    """
    known = service is not None
    service = service or ComposeService()
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
        service_known=known,
        image=ImageExpectation(ref=ref, repo_digest=digest if at else None,
                               image_id=image_id),
        patch_marker_sha256=hashlib.sha256(marker).hexdigest() if marker is not None else None,
        engine=engine, engine_version=engine_version,
        kv_baseline=kv_baseline, kv_tolerance=kv_tolerance, cudagraph_mode=cudagraph_mode,
    )

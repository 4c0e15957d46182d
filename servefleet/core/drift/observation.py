"""Drift's observed side: what one read of a node found."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from servefleet.core.gpu import GpuProbeResult
from servefleet.core.models.common import StrictModel
from servefleet.core.observed import ObservedContainer


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
    adopted_release: str | None = None
    """Release the deployment's adopted container runs as (a container started by hand
    and taken over without a restart): it carries none of servefleet's labels."""
    gated: dict[str, str] | None = None
    """The deployment's gate mark (``release``, ``started``, ``at``): the engine that last
    passed its gate; empty when there is none; ``None`` when it was not read."""
    engine_version: str | None = None
    """What the engine's HTTP API says its version is."""
    engine_version_error: str | None = None
    """Why the version could not be asked."""
    weights: dict[str, Any] | None = None
    """What the node holds of the current release's staged weights (``present``,
    ``verified``, ``revisions``: the commits its cache holds of the repository); ``None``
    when the release stages none."""


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

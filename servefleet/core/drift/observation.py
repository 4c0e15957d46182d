"""Drift's observed side: what one read of a node found."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from servefleet.core.gpu import GpuProbeResult
from servefleet.core.models.common import StrictModel
from servefleet.core.observed import ObservedDeployment


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
    deployments: dict[str, ObservedDeployment] = Field(default_factory=dict)
    """Deployments read, by name (every one asked for, present or not), as the rollout sees
    them plus the latest boot's facts and the engine's version."""
    baselines: dict[str, Any] = Field(default_factory=dict)
    """Baselines files of the node's base directory (name → JSON content; ``None`` when
    absent), read for the desired side's KV-pool and image baselines."""
    errors: tuple[str, ...] = ()
    """Other facts that could not be read."""

"""The release a rollout makes current, and how it is made from a rendered release or from
a manifest already on the node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servefleet.adapters.health_gate import GateSpec, unchanged_profile
from servefleet.core.engines import engine_of
from servefleet.core.models import Deployment, Node, Profile
from servefleet.core.project import Project
from servefleet.core.render import RenderedRelease
from servefleet.core.render.weights import WeightsSpec


@dataclass(frozen=True)
class Target:
    """A release to make current: freshly rendered, or one already on the node."""

    deployment: str
    """Deployment name."""
    release_id: str
    """Release id."""
    port: int
    """Port the engine listens on."""
    engine: str
    """``vllm`` or ``llama.cpp``."""
    compose_files: tuple[str, ...]
    """Compose files in ``-f`` order, relative to the release folder."""
    builds_image: bool
    """Whether the release builds an overlay image."""
    gate: GateSpec
    """What its health gate checks."""
    profile: Profile | None = None
    """Its profile, for the health checks beyond the gate's own; ``None`` for a release
    whose profile the project no longer has unchanged (only the gate's checks run)."""
    utilization: float | None = None
    """``--gpu-memory-utilization`` for the GPU memory check (vLLM only)."""
    rendered: RenderedRelease | None = None
    """The rendered files, when they may need uploading."""
    deployment_model: Deployment | None = None
    """The stack's deployment, for the manifest."""
    adopted: str | None = None
    """The release is a container started by hand and taken over (its name then): it is
    started again with ``docker start``, never created by Compose."""
    weights: WeightsSpec | None = None
    """The weights it stages before the old engine stops (``None``: none)."""




def _utilization(profile: Profile) -> float | None:
    """The share of GPU memory a vLLM engine takes (None: llama.cpp, not checked)."""
    return engine_of(profile).gpu_memory_utilization(profile)




def target_for(project: Project, node: Node, rendered: RenderedRelease,
               deployment: Deployment) -> Target:
    """The target of a freshly rendered release."""
    profile = project.profiles[rendered.profile]
    return Target(
        deployment=rendered.deployment, release_id=rendered.release_id,
        port=rendered.port, engine=rendered.engine,
        compose_files=tuple(rendered.compose_files), builds_image=rendered.builds_image,
        gate=GateSpec.for_profile(profile, node), profile=profile,
        utilization=_utilization(profile), rendered=rendered, deployment_model=deployment,
        weights=rendered.weights)


def manifest_compose_files(manifest: Mapping[str, Any]) -> tuple[str, ...]:
    """The compose files a release's manifest lists, in ``-f`` order (``compose.yaml`` for a
    manifest written before it listed them)."""
    files = manifest.get("compose_files")
    return tuple(str(f) for f in files) if isinstance(files, list) else ("compose.yaml",)


def target_from_manifest(project: Project, node: Node, deployment: str, release_id: str,
                         manifest: Mapping[str, Any]) -> Target:
    """The target of a release already on the node, described by its manifest."""
    gate = GateSpec.for_manifest(manifest, project.profiles, node)
    profile = project.profiles.get(str(manifest.get("profile")))
    return Target(
        deployment=deployment, release_id=release_id,
        port=int(manifest.get("port") or node.ports[0]),
        engine=str(manifest.get("engine") or gate.engine),
        compose_files=manifest_compose_files(manifest),
        builds_image=bool(manifest.get("builds_image")), gate=gate,
        profile=unchanged_profile(manifest, project.profiles),
        utilization=_utilization(profile) if profile is not None else None,
        adopted=_adopted_name(manifest), weights=WeightsSpec.from_json(manifest.get("weights")))


def _adopted_name(manifest: Mapping[str, Any]) -> str | None:
    adopted = manifest.get("adopted")
    if isinstance(adopted, dict) and isinstance(adopted.get("container"), str):
        return adopted["container"]
    return None

"""What a running container does that its profile does not say, for the operator to check:
its mounts, GPUs, network, restart policy and state. Servefleet renders these from the
node's inventory and its own defaults, not from the profile."""

from __future__ import annotations

from servefleet.core.adopt.running import RunningEngine
from servefleet.core.engines import engine_of
from servefleet.core.models import Profile
from servefleet.core.render.layout import HF_CACHE_TARGET, MODELS_TARGET

RENDERED_RESTART = "on-failure:3"
"""The restart policy of a rendered compose file."""


def container_notes(running: RunningEngine, profile: Profile, port: int) -> list[str]:
    """One line per difference between the container and what servefleet would run with
    ``profile`` on ``port``."""
    notes: list[str] = []
    if running.state != "running":
        notes.append(f"the container is {running.state}, not running: adopting it starts "
                     "nothing; the first deploy boots the engine through the health gate")
    for mount in running.mounts:
        if mount.target == HF_CACHE_TARGET:
            notes.append(f"mount {mount.source} -> {mount.target}: servefleet mounts the "
                         "node's hf_cache there; check hf_cache in the node's inventory")
        elif mount.target == MODELS_TARGET:
            notes.append(f"mount {mount.source} -> {mount.target}: servefleet mounts the "
                         "node's models_dir there; check models_dir in the node's inventory")
        else:
            notes.append(f"mount {mount.source} -> {mount.target}: servefleet mounts only "
                         f"hf_cache ({HF_CACHE_TARGET}) and models_dir ({MODELS_TARGET}); "
                         "a deploy will not have it")
    if not running.host_network:
        published = ", ".join(f"{h}->{c}" for c, h in sorted(running.published_ports.items()))
        notes.append(f"not on the host network (published {published or 'nothing'}): "
                     f"servefleet runs engines with host networking, on port {port}")
    wanted = engine_of(profile).gpu_count(profile)
    if running.gpu_ids:
        notes.append(f"pinned to GPUs {', '.join(running.gpu_ids)}: servefleet reserves GPUs "
                     "by count, not by id")
    elif running.gpu_count == 0 and not running.simulated:
        notes.append("no GPU reserved (no --gpus / device request): servefleet reserves "
                     f"{wanted or 'all'} GPU(s)")
    elif running.gpu_count not in (None, 0, -1) and wanted != running.gpu_count:
        notes.append(f"{running.gpu_count} GPU(s) reserved; servefleet reserves "
                     f"{wanted or 'all'} for this profile")
    if running.restart_policy != RENDERED_RESTART:
        notes.append(f"restart policy {running.restart_policy}: servefleet's is "
                     f"{RENDERED_RESTART} (an engine comes back through a deploy, gated)")
    if running.compose_project:
        files = ", ".join(running.compose_files) or "unknown files"
        notes.append(f"started by docker compose (project {running.compose_project}, service "
                     f"{running.compose_service}, {files}): keep that file out of the way "
                     "once servefleet deploys")
    return notes


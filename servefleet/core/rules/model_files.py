"""Model files: what the engine loads must lie in a folder the node mounts into it.

The rendered compose file mounts the node's Hugging Face cache at
:data:`~servefleet.core.render.layout.HF_CACHE_TARGET` and, when the inventory names one,
its ``models_dir`` read-only at :data:`~servefleet.core.render.layout.MODELS_TARGET`. A
GGUF (llama.cpp) outside those is not there at boot: the engine
fails after the old one was already stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

from servefleet.core.engines.llamacpp import LLAMACPP, llamacpp_settings
from servefleet.core.models import Node
from servefleet.core.render.layout import HF_CACHE_TARGET, MODELS_TARGET
from servefleet.core.rules.base import Issue, PlacementContext, Severity, placement_rule

WHY = ("servefleet's compose file mounts only the node's hf_cache at "
       f"{HF_CACHE_TARGET} and its models_dir at {MODELS_TARGET}; nothing else of the node is "
       "visible inside the engine's container")


def _inside(path: str, folder: str) -> bool:
    return PurePosixPath(path).is_relative_to(folder) and path.rstrip("/") != folder


def _mounted(node: Node) -> list[str]:
    """Folders inside the container that hold the node's files."""
    return [HF_CACHE_TARGET] + ([MODELS_TARGET] if node.models_dir is not None else [])


def _problem(path: str, ctx: PlacementContext) -> tuple[str, str] | None:
    """(what is missing, the fix) for a model path, or ``None`` when it is mounted."""
    node = ctx.node
    if any(_inside(path, folder) for folder in _mounted(node)):
        return None
    if _inside(path, MODELS_TARGET):
        return (f"{ctx.node_file} sets no models_dir, so nothing is mounted at {MODELS_TARGET}",
                f"set models_dir in {ctx.node_file} to the node's folder that holds the file "
                f"(it appears at {MODELS_TARGET}, read-only)")
    where = f"{MODELS_TARGET} (models_dir {node.models_dir})" if node.models_dir \
        else f"{MODELS_TARGET} (once {ctx.node_file} sets models_dir)"
    return (f"it lies in no folder the node mounts: only {HF_CACHE_TARGET} (hf_cache "
            f"{node.hf_cache}) and {where} are there",
            f"put the file under the node's models_dir and name it as {MODELS_TARGET}/<file>")


@placement_rule("model-file-not-mounted", Severity.ERROR, engines=(LLAMACPP.name,))
def model_file_not_mounted(ctx: PlacementContext) -> Iterator[Issue]:
    """The GGUF is in no folder the node mounts into the engine."""
    profile = ctx.profile
    # Only llama.cpp: vLLM serves model.id, a Hugging Face repo id (the profile refuses
    # paths): it is fetched into hf_cache, which every rendered release mounts.
    path = llamacpp_settings(profile).gguf
    found = _problem(path, ctx)
    if found is None:
        return
    missing, fix = found
    yield Issue(field="llamacpp.gguf", value=path,
                message=(f"{path} is not inside the engine's container {ctx.where}: {missing}; "
                         "llama-server stops with 'failed to load model'"),
                why=WHY, fix=fix)

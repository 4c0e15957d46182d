"""Staged weights (``model.source``): a source the engine's image can fetch, landing where
the engine loads from, on a node with a folder for it.

A wrong answer here is found late: the staging runs before the stop, so it cannot take the
old engine down, but a file staged where the engine does not look makes the new engine fail
its boot with the hub offline.
"""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines import engine_of
from servefleet.core.engines.llamacpp import LLAMACPP, llamacpp_settings
from servefleet.core.render.layout import MODELS_TARGET
from servefleet.core.rules.base import (
    Issue,
    PlacementContext,
    ProfileContext,
    Severity,
    placement_rule,
    profile_rule,
)

WHY = ("a rollout stages model.source before the old engine stops, with the fetcher the "
       "engine's image has (huggingface_hub in vLLM's, curl in llama.cpp's); the engine then "
       "boots with HF_HUB_OFFLINE=1 and finds only what was staged")


@profile_rule("weights-source-kind", Severity.ERROR)
def weights_source_kind(ctx: ProfileContext) -> Iterator[Issue]:
    """The engine's image cannot stage this kind of source."""
    source = ctx.profile.model.source
    if source is None:
        return
    engine = engine_of(ctx.profile)
    if source.kind not in engine.weights_kinds:
        yield Issue(
            field="model.source", value=source.kind,
            message=(f"a {source.kind} source cannot be staged for {engine.display_name}: it "
                     f"takes {' or '.join(engine.weights_kinds)}"),
            why=WHY,
            fix=("give source.revision (a commit) for the repository the engine serves"
                 if "snapshot" in engine.weights_kinds else
                 "give source.file (with source.sha256) or source.url (with source.sha256)"))


@profile_rule("staged-file-not-loaded", Severity.ERROR, engines=(LLAMACPP.name,))
def staged_file_not_loaded(ctx: ProfileContext) -> Iterator[Issue]:
    """The staged file lands somewhere else than the file the engine loads."""
    source = ctx.profile.model.source
    if source is None or source.file_name is None:
        return
    wanted = f"{MODELS_TARGET}/{source.file_name}"
    gguf = llamacpp_settings(ctx.profile).gguf
    if gguf != wanted:
        yield Issue(field="llamacpp.gguf", value=gguf,
                    message=(f"the staged file lands at {wanted} (the node's models_dir), but "
                             f"llama-server loads {gguf}"),
                    why=WHY, fix=f"set llamacpp.gguf: {wanted}")


@placement_rule("staged-file-needs-models-dir", Severity.ERROR)
def staged_file_needs_models_dir(ctx: PlacementContext) -> Iterator[Issue]:
    """A file source on a node without ``models_dir``: there is nowhere to stage it."""
    source = ctx.placement.profile.model.source
    if source is None or source.file_name is None or ctx.node.models_dir is not None:
        return
    yield Issue(field="models_dir", value=None,
                message=(f"{ctx.placement.profile.name} stages {source.file_name} into the "
                         f"node's models_dir, and {ctx.node_file} sets none"),
                why=WHY, fix=f"set models_dir in {ctx.node_file} (e.g. /srv/models)")

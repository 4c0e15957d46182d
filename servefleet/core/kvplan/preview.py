"""A plan's change, said in the engine's own terms: what the KV pool, the CUDA-graph mode
and the concurrency at ``max_model_len`` will be once the new profile boots on the node
(``MTP on: KV pool ≈ 1.08M tokens (−17%), CUDA graphs FULL_AND_PIECEWISE → PIECEWISE
(FlashInfer off SM100), concurrency at 131,072 ≈ 8.2×``). Pure: the pinned ``config.json``
and the predictor, no node."""

from __future__ import annotations

from pathlib import Path

from servefleet.core.expectations import derive_expectations
from servefleet.core.kvplan.modelconfig import facts_for_profile
from servefleet.core.kvplan.predict import Prediction, predict
from servefleet.core.models import Node, Profile


def _prediction(profiles_dir: Path, profile: Profile, node: Node) -> Prediction | None:
    if profile.vllm is None:
        return None
    facts = facts_for_profile(profiles_dir, profile)
    return None if facts is None else predict(facts, profile, node)


def _what(old: Profile | None, new: Profile) -> str:
    """The change in one or two words: ``MTP on``, ``speculative off``, ``new profile``…"""
    if old is None:
        return "new deployment"
    before, after = old.speculative, new.speculative
    if (before is None) != (after is None):
        spec = after or before
        assert spec is not None
        name = "MTP" if "mtp" in spec.method else "speculative decoding"
        return f"{name} {'on' if after is not None else 'off'}"
    return "profile change" if old.name != new.name else "flags change"


def _graph_reason(profile: Profile, node: Node) -> str:
    for note in derive_expectations(profile, node).notes:
        if "fall back to PIECEWISE" in note:
            return " (FlashInfer off SM100)"
        if note.startswith("enforce_eager"):
            return " (enforce_eager)"
    return ""


def engine_preview(profiles_dir: Path, old: Profile | None, new: Profile,
                   node: Node) -> str | None:
    """One line for a changed vLLM deployment (``None`` for other engines). A simulated
    node is judged as the GPU node it is shaped like: its CPU build boots another pool."""
    if new.vllm is None:
        return None
    gpu_node = node.model_copy(update={"sim": None}) if node.sim is not None else node
    after = _prediction(profiles_dir, new, gpu_node)
    if after is None:
        return (f"{_what(old, new)}: KV pool not predicted (the profile pins no model "
                "config: model.config)")
    parts = [f"KV pool ≈ {after.summary().split(', ')[0].removeprefix('KV pool ≈ ')}"]
    before = _prediction(profiles_dir, old, gpu_node) if old is not None else None
    if before is not None and before.pool.kv_cache_tokens:
        change = after.pool.kv_cache_tokens / before.pool.kv_cache_tokens - 1
        parts[0] += f" ({change:+.0%})".replace("-", "−")
    new_mode = derive_expectations(new, gpu_node).cudagraph_mode
    old_mode = derive_expectations(old, gpu_node).cudagraph_mode if old is not None \
        and old.vllm is not None else None
    if new_mode is not None and old_mode is not None and new_mode != old_mode:
        parts.append(f"CUDA graphs {old_mode} → {new_mode}{_graph_reason(new, gpu_node)}")
    elif new_mode is not None:
        parts.append(f"CUDA graphs {new_mode}")
    parts.append(f"concurrency at {after.pool.max_model_len:,} ≈ "
                 f"{after.pool.max_concurrency:.1f}×")
    basis = "calibrated" if after.calibrated else "estimated"
    shaped = ", as a GPU node of this shape" if node.sim is not None else ""
    return f"{_what(old, new)}: {', '.join(parts)} ({basis}{shaped})"

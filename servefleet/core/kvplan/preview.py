"""A plan's change, said in the engine's own terms: what the KV pool, the CUDA-graph mode
and the concurrency at ``max_model_len`` will be once the new profile boots on the node
(``MTP on: KV pool ≈ 1.08M tokens (−17%), CUDA graphs FULL_AND_PIECEWISE → PIECEWISE
(FlashInfer off SM100), concurrency at 131,072 ≈ 8.2× (calibrated on dgx-spark-1 release
…)``). Pure: the pinned ``config.json``, the predictor and, when the caller read them from
the node, the node's KV baselines (:func:`calibration_from_book`), which turn an estimate
into a prediction calibrated on a measured boot."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from servefleet.core.baselines import BaselineBook, book_from_json
from servefleet.core.engines import engine_of
from servefleet.core.errors import ServefleetError
from servefleet.core.expectations import derive_expectations
from servefleet.core.kvplan.modelconfig import facts_for_profile
from servefleet.core.kvplan.predict import Calibration, Prediction, predict
from servefleet.core.models import Node, Profile
from servefleet.core.plan import PlanItem
from servefleet.core.project import PROFILES_DIR, Project, profile_identity


def _prediction(profiles_dir: Path, profile: Profile, node: Node,
                calibration: Calibration | None = None) -> Prediction | None:
    if not engine_of(profile).kv_planned:
        return None
    facts = facts_for_profile(profiles_dir, profile)
    return None if facts is None else predict(facts, profile, node, calibration)


def calibration_from_book(book: BaselineBook | None, profiles: Mapping[str, Profile],
                          target: Profile, node: Node) -> Calibration | None:
    """A measured boot on ``node`` to calibrate ``target``'s prediction on: a baseline (the
    pool the health gate recorded) of a profile that still has the identity it booted with,
    serves the same pinned model config and runs the same vLLM version. ``target``'s own
    baseline first, then the newest. ``None`` on a simulated node: its baselines are the CPU
    build's pool on the tiny twin, not a measurement of the GPU it is shaped like."""
    if book is None or node.sim is not None or not engine_of(target).kv_planned \
            or target.model.config is None:
        return None
    found: list[tuple[bool, str, Calibration]] = []
    for baseline in book.baselines.values():
        profile = profiles.get(baseline.profile)
        if profile is None or profile.engine != target.engine or baseline.unit != "tokens" \
                or baseline.engine != target.engine or profile.model.config != target.model.config \
                or profile.engine_version != target.engine_version \
                or profile_identity(profile) != baseline.profile_identity:
            continue
        source = f"{node.name} release {baseline.release_id or '(unknown)'}"
        found.append((profile.name == target.name, baseline.recorded_at,
                      Calibration(profile, int(baseline.kv_pool), source)))
    if not found:
        return None
    return max(found, key=lambda item: (item[0], item[1]))[2]


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


def engine_preview(profiles_dir: Path, old: Profile | None, new: Profile, node: Node,
                   calibration: Calibration | None = None) -> str | None:
    """One line for a changed vLLM deployment (``None`` for other engines), calibrated on
    ``calibration`` when given. A simulated node is judged as the GPU node it is shaped
    like: its CPU build boots another pool."""
    if not engine_of(new).kv_planned:
        return None
    gpu_node = node.model_copy(update={"sim": None}) if node.sim is not None else node
    after = _prediction(profiles_dir, new, gpu_node, calibration)
    if after is None:
        return (f"{_what(old, new)}: KV pool not predicted (the profile pins no model "
                "config: model.config)")
    parts = [f"KV pool ≈ {after.summary().split(', ')[0].removeprefix('KV pool ≈ ')}"]
    before = _prediction(profiles_dir, old, gpu_node, calibration) if old is not None \
        else None
    if before is not None and before.pool.kv_cache_tokens:
        change = after.pool.kv_cache_tokens / before.pool.kv_cache_tokens - 1
        # From 0.21 the token count follows concurrency (blocks per request change with the
        # layout); the blocks say how much memory the pool lost.
        blocks = after.pool.num_blocks / max(before.pool.num_blocks, 1) - 1
        same = f"{blocks:+.0%}" == f"{change:+.0%}"
        parts[0] += (f" ({change:+.0%})" if same
                     else f" ({change:+.0%}; blocks {blocks:+.0%})").replace("-", "−")
    new_mode = derive_expectations(new, gpu_node).cudagraph_mode
    old_mode = derive_expectations(old, gpu_node).cudagraph_mode if old is not None \
        and old.engine == new.engine else None
    if new_mode is not None and old_mode is not None and new_mode != old_mode:
        parts.append(f"CUDA graphs {old_mode} → {new_mode}{_graph_reason(new, gpu_node)}")
    elif new_mode is not None:
        parts.append(f"CUDA graphs {new_mode}")
    parts.append(f"concurrency at {after.pool.max_model_len:,} ≈ "
                 f"{after.pool.max_concurrency:.1f}×")
    if after.layout.kv_note:  # the checkpoint, not the flag, chose the KV element size
        parts.append(after.layout.kv_note)
    basis = f"calibrated on {calibration.source}" if after.calibrated and calibration \
        else "modelled cold"
    shaped = ", as a GPU node of this shape" if node.sim is not None else ""
    return f"{_what(old, new)}: {', '.join(parts)} ({basis}{shaped})"


def plan_item_preview(project: Project, item: PlanItem) -> str | None:
    """The engine-terms line of one plan item (``servefleet plan``, ``pulumi preview``):
    ``None`` when unchanged or not vLLM; calibrated on the node's baselines when the plan
    read them. A pinned config that cannot be read is said, not raised."""
    if item.action == "unchanged" or item.profile not in project.profiles:
        return None
    new, node = project.profiles[item.profile], project.nodes[item.node]
    old = project.profiles.get(item.previous_profile or "")
    book = book_from_json(item.node_baselines)[0] if item.node_baselines else None
    try:
        calibration = calibration_from_book(book, project.profiles, new, node)
        return engine_preview(project.root / PROFILES_DIR, old, new, node, calibration)
    except ServefleetError as error:  # a pinned config that cannot be read: say so, go on
        return f"KV pool not predicted: {error}"

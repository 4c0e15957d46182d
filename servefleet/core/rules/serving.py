"""Rules on how a vLLM profile serves its model: tools, context length, chunk size, heads."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from servefleet.core.engines.vllm import VLLM, vllm_settings
from servefleet.core.rules.base import Issue, ProfileContext, Severity, profile_rule, show
from servefleet.core.rules.facts import CAP_FP8_LM_HEAD, has_capability

GDN_MIN_BATCHED_TOKENS = 4096
"""Hybrid Gated-DeltaNet models need chunks of at least this many tokens: the GDN layers
impose a Mamba block-size constraint of 3072 tokens (inferRouter/Qwen3.6-35B-A3B-NVFP4 model
card)."""
LONG_CONTEXT_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
ROPE_KEYS = ("rope_scaling", "rope_parameters")


@profile_rule("auto-tool-choice-needs-parser", Severity.ERROR, engines=(VLLM.name,))
def auto_tool_choice_needs_parser(ctx: ProfileContext) -> Iterator[Issue]:
    """``enable_auto_tool_choice`` without a ``tool_call_parser``."""
    vllm = vllm_settings(ctx.profile)
    if not vllm.enable_auto_tool_choice or vllm.tool_call_parser:
        return
    yield Issue(
        field="vllm.enable_auto_tool_choice", value=True,
        message=("enable_auto_tool_choice true without vllm.tool_call_parser: vLLM refuses to "
                 "start (--enable-auto-tool-choice requires --tool-call-parser)"),
        why="vLLM vllm/entrypoints/openai/cli_args.py (0.21.0)",
        fix=("set vllm.tool_call_parser (qwen3_coder or qwen3_xml for Qwen3.5/3.6), or set "
             "enable_auto_tool_choice: false"),
    )


def _rope_factors(value: Any, path: str = "hf_overrides") -> list[tuple[str, float]]:
    """Every rope override with a numeric factor inside ``hf_overrides``, with its path."""
    found: list[tuple[str, float]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}"
            factor = item.get("factor") if isinstance(item, dict) else None
            if key in ROPE_KEYS and isinstance(factor, int | float) and not isinstance(
                factor, bool
            ):
                found.append((here, float(factor)))
            found.extend(_rope_factors(item, here))
    return found


def _original_window(value: Any) -> int | None:
    """``original_max_position_embeddings`` of the first rope override that names one."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ROPE_KEYS and isinstance(item, dict):
                original = item.get("original_max_position_embeddings")
                if isinstance(original, int) and not isinstance(original, bool):
                    return original
            nested = _original_window(item)
            if nested is not None:
                return nested
    return None


@profile_rule("long-context-needs-override", Severity.ERROR, engines=(VLLM.name,))
def long_context_needs_override(ctx: ProfileContext) -> Iterator[Issue]:
    """max_model_len above the native window needs VLLM_ALLOW_LONG_MAX_MODEL_LEN and a
    rope override."""
    profile = ctx.profile
    vllm = vllm_settings(profile)
    native = profile.model.native_context
    if native is None or vllm.max_model_len is None:
        return
    length = vllm.max_model_len
    if length <= native:
        return
    factor_needed = math.ceil(length / native)
    env_value = profile.env.get(LONG_CONTEXT_ENV)
    if (env_value or "").strip().lower() not in {"1", "true"}:
        yield Issue(
            field=f"env.{LONG_CONTEXT_ENV}", value=env_value,
            message=(f"{LONG_CONTEXT_ENV} is {show(env_value)} but max_model_len {length} is "
                     f"above the model's native window ({native}): vLLM raises ValueError "
                     "at startup"),
            why="vLLM vllm/config/model.py max_model_len check (0.21.0); vllm/envs.py",
            fix=f'set env.{LONG_CONTEXT_ENV}: "1", together with a rope override',
        )
    factors = _rope_factors(vllm.hf_overrides)
    if not factors:
        yield Issue(
            field="vllm.hf_overrides", value=vllm.hf_overrides,
            message=(f"hf_overrides is {show(vllm.hf_overrides)}: no rope_scaling or "
                     f"rope_parameters with a factor, but max_model_len {length} is above the "
                     f"native window {native}, so positions beyond it are untrained"),
            why=("88plug/Qwen3.6-35B-A3B-W8A16 model card: vLLM does not synthesize the YaRN "
                 "config for this architecture"),
            fix=("add hf_overrides.text_config.rope_parameters with rope_type: yarn, factor: "
                 f"{factor_needed} (or more), original_max_position_embeddings: {native}"),
        )
        return
    original = _original_window(vllm.hf_overrides) or native
    path, factor = max(factors, key=lambda item: item[1])
    if factor * original < length:
        yield Issue(
            field=f"vllm.{path}.factor", value=factor,
            message=(f"rope factor {factor:g} × {original} = {int(factor * original)} tokens "
                     f"is less than max_model_len {length}"),
            why="YaRN extends the window by its factor (88plug/Qwen3.6-35B-A3B-W8A16: ×4 → 1M)",
            fix=f"raise the factor to {math.ceil(length / original)} or lower max_model_len",
        )


@profile_rule("hybrid-gdn-batched-tokens-below-4096", Severity.ERROR, engines=(VLLM.name,))
def hybrid_gdn_batched_tokens(ctx: ProfileContext) -> Iterator[Issue]:
    """Hybrid Gated-DeltaNet models need max_num_batched_tokens ≥ 4096."""
    profile = ctx.profile
    vllm = vllm_settings(profile)
    if not profile.model.hybrid_gdn or vllm.max_num_batched_tokens is None:
        return
    chunk = vllm.max_num_batched_tokens
    if chunk >= GDN_MIN_BATCHED_TOKENS:
        return
    yield Issue(
        field="vllm.max_num_batched_tokens", value=chunk,
        message=(f"{chunk} is below {GDN_MIN_BATCHED_TOKENS} for the hybrid Gated-DeltaNet "
                 f"model {profile.model.id}: its GDN linear-attention layers impose a Mamba "
                 "block-size constraint of 3072 tokens"),
        why=("inferRouter/Qwen3.6-35B-A3B-NVFP4 model card: max_num_batched_tokens must be at "
             "least 4096"),
        fix=(f"set vllm.max_num_batched_tokens to {GDN_MIN_BATCHED_TOKENS} or more (8192 keeps "
             "long-prompt TTFT reasonable; 16384 on DGX Spark)"),
    )


@profile_rule("fp8-lm-head-needs-overlay", Severity.ERROR, engines=(VLLM.name,))
def fp8_lm_head_needs_overlay(ctx: ProfileContext) -> Iterator[Issue]:
    """A checkpoint with an FP8 lm_head (the NVFP4 fp8-head branch) needs the dispatch
    overlay."""
    profile = ctx.profile
    model = profile.model
    if not (model.fp8_lm_head or model.revision == "fp8-head"):
        return
    if has_capability(profile, CAP_FP8_LM_HEAD):
        return
    field, value = (("model.fp8_lm_head", True) if model.fp8_lm_head
                    else ("model.revision", model.revision))
    yield Issue(
        field=field, value=value,
        message=(f"{show(value)}: {model.id} stores lm_head in FP8 and stock vLLM's "
                 "compressed-tensors dispatcher does not route ParallelLMHead through an FP8 "
                 "scheme, so those weights do not load"),
        why=("inferRouter/Qwen3.6-35B-A3B-NVFP4 model card (vllm_patches/ overlay); the "
             "upstream fix, vLLM PR #41000, is open"),
        fix=(f"add the checkpoint's lm_head patch overlay with provides: [{CAP_FP8_LM_HEAD}], "
             "or serve revision main"),
    )


@profile_rule("enforce-eager-cudagraph-expectation", Severity.ERROR, engines=(VLLM.name,))
def enforce_eager_cudagraph_expectation(ctx: ProfileContext) -> Iterator[Issue]:
    """enforce_eager means no CUDA graphs; an expected mode other than NONE cannot hold."""
    profile = ctx.profile
    expected = profile.health.cudagraph_mode
    if not vllm_settings(profile).enforce_eager or expected in (None, "NONE"):
        return
    yield Issue(
        field="health.cudagraph_mode", value=expected,
        message=(f"{expected} is expected but vllm.enforce_eager is true: vLLM captures no "
                 "CUDA graphs ('Skipping CUDA graph capture'), so the health gate would fail"),
        why="vLLM vllm/config/compilation.py: --enforce-eager means cudagraph_mode NONE",
        fix="set health.cudagraph_mode: NONE (or remove it), or turn enforce_eager off",
    )

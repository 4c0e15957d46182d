"""llama-server rules."""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines.llamacpp import LLAMACPP, llamacpp_settings
from servefleet.core.rules.base import Issue, ProfileContext, Severity, profile_rule, show

QUANTIZED_CACHE_TYPES = frozenset({"q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})


@profile_rule("llamacpp-determinism-settings", Severity.WARNING, engines=(LLAMACPP.name,))
def llamacpp_determinism_settings(ctx: ProfileContext) -> Iterator[Issue]:
    """Determinism wanted on llama.cpp needs one slot and no prompt cache."""
    profile = ctx.profile
    settings = llamacpp_settings(profile)
    if not profile.health.determinism.wanted:
        return
    why_parallel = ("llama.cpp PR #6950, #7052: the batch composition of several slots changes "
                    "the floating-point order")
    if settings.parallel != 1:
        yield Issue(
            field="llamacpp.parallel", value=settings.parallel,
            message=(f"{show(settings.parallel)} slots while determinism is wanted: requests "
                     "batched together give different outputs for the same seed"),
            why=why_parallel,
            fix="set llamacpp.parallel: 1",
        )
    if settings.cache_prompt is not False:
        yield Issue(
            field="llamacpp.cache_prompt", value=settings.cache_prompt,
            message=(f"{show(settings.cache_prompt)} (prompt cache on by default) while "
                     "determinism is wanted: a cached repeat changes greedy output"),
            why=("llama.cpp server README cache_prompt; maintainer on PR #22224: 'Just use "
                 "--no-cache-prompt if you need determinism'"),
            fix="set llamacpp.cache_prompt: false",
        )


@profile_rule("llamacpp-quantized-v-needs-flash-attn", Severity.ERROR, engines=(LLAMACPP.name,))
def llamacpp_quantized_v_needs_flash_attn(ctx: ProfileContext) -> Iterator[Issue]:
    """A quantized V cache with flash attention off."""
    settings = llamacpp_settings(ctx.profile)
    if settings.cache_type_v not in QUANTIZED_CACHE_TYPES:
        return
    if settings.flash_attn != "off":
        return
    yield Issue(
        field="llamacpp.cache_type_v", value=settings.cache_type_v,
        message=(f"{settings.cache_type_v} V cache with flash_attn off: llama.cpp refuses a "
                 "quantized V cache without flash attention"),
        why=("llama.cpp src/llama-context.cpp: 'V cache quantization requires flash_attn' "
             "(newer builds: 'quantized V cache requires flash_attn to be enabled')"),
        fix="set llamacpp.flash_attn: \"on\" (or auto), or cache_type_v: f16",
    )

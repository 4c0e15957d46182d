"""``--quantization`` rules."""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines.vllm import VLLM, vllm_settings
from servefleet.core.rules.base import Issue, ProfileContext, Severity, profile_rule
from servefleet.core.rules.facts import dotted, quantization_methods

FIELD = "vllm.quantization"


@profile_rule("quantization-turboquant", Severity.ERROR, engines=(VLLM.name,))
def quantization_turboquant(ctx: ProfileContext) -> Iterator[Issue]:
    """``quantization: turboquant`` is not a quantization method (TurboQuant is a KV dtype)."""
    vllm = vllm_settings(ctx.profile)
    if vllm.quantization is None or vllm.quantization.lower() != "turboquant":
        return
    yield Issue(
        field=FIELD, value=vllm.quantization,
        message=(f"{vllm.quantization} is not a quantization method: vLLM fails with "
                 "'Unknown quantization method: turboquant'; TurboQuant compresses the KV "
                 "cache and is chosen with kv_cache_dtype"),
        why=("vLLM #41560 footgun; QuantizationMethods in "
             "vllm/model_executor/layers/quantization/__init__.py has no turboquant"),
        fix=("remove vllm.quantization (the checkpoint's quantization_config applies) and set "
             "vllm.kv_cache_dtype: turboquant_4bit_nc"),
    )


@profile_rule("quantization-unknown", Severity.ERROR, engines=(VLLM.name,))
def quantization_unknown(ctx: ProfileContext) -> Iterator[Issue]:
    """A quantization method the profile's vLLM version does not know."""
    profile = ctx.profile
    vllm = vllm_settings(profile)
    if vllm.quantization is None or vllm.quantization.lower() == "turboquant":
        return
    checked = quantization_methods(profile)
    if checked is None:
        return
    minor, methods = checked
    if vllm.quantization in methods:
        return
    yield Issue(
        field=FIELD, value=vllm.quantization,
        message=(f"{vllm.quantization} is not a quantization method of vLLM {dotted(minor)}: "
                 "it fails with 'Unknown quantization method'"),
        why=(f"vllm=={dotted(minor)}.0 vllm/model_executor/layers/quantization/__init__.py "
             "QuantizationMethods"),
        fix=(f"use one of {', '.join(sorted(methods))}, or remove vllm.quantization so the "
             "checkpoint's quantization_config applies"),
    )

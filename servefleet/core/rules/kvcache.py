"""KV-cache dtype rules: which values a vLLM version accepts, and what TurboQuant needs."""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines.vllm import VLLM, vllm_settings
from servefleet.core.rules.base import Issue, ProfileContext, Severity, profile_rule
from servefleet.core.rules.facts import (
    CAP_TURBOQUANT_HYBRID,
    CAP_TURBOQUANT_WORKSPACE,
    KV_DTYPE_SINCE,
    KV_DTYPE_SOURCE,
    PR_TURBOQUANT_HYBRID,
    PR_TURBOQUANT_WORKSPACE,
    TURBOQUANT_HYBRID_SINCE,
    TURBOQUANT_RESERVATION_SINCE,
    TURBOQUANT_SINCE,
    at_least,
    chunked_prefill_on,
    dotted,
    has_capability,
    is_turboquant,
    spec_on,
    version_known,
)

FIELD = "vllm.kv_cache_dtype"
VLLM_ONLY = (VLLM.name,)


@profile_rule("kv-cache-dtype-not-in-version", Severity.ERROR, engines=VLLM_ONLY)
def kv_cache_dtype_not_in_version(ctx: ProfileContext) -> Iterator[Issue]:
    """A kv_cache_dtype value the profile's vLLM version does not accept."""
    profile = ctx.profile
    if not version_known(profile):
        return
    kv = vllm_settings(profile).kv_cache_dtype
    if kv is None or is_turboquant(kv):  # TurboQuant has its own rule with a better fix
        return
    since, evidence = KV_DTYPE_SINCE.get(kv, ((), ""))
    if at_least(profile, since):
        return
    known = ", ".join(k for k, (s, _) in KV_DTYPE_SINCE.items() if at_least(profile, s))
    yield Issue(
        field=FIELD, value=kv,
        message=(f"{kv} is not a --kv-cache-dtype choice of vLLM {profile.engine_version} "
                 f"({evidence}); vLLM rejects it at startup"),
        why=KV_DTYPE_SOURCE,
        fix=(f"use one of {known} with this version, or an image of vLLM ≥ {dotted(since)} "
             "(image.ref, image.digest and engine_version)"),
    )


@profile_rule("turboquant-needs-newer-vllm", Severity.ERROR, engines=VLLM_ONLY)
def turboquant_needs_newer_vllm(ctx: ProfileContext) -> Iterator[Issue]:
    """TurboQuant KV dtypes do not exist before vLLM 0.20."""
    profile = ctx.profile
    if not version_known(profile):
        return
    kv = vllm_settings(profile).kv_cache_dtype
    if not is_turboquant(kv) or at_least(profile, TURBOQUANT_SINCE):
        return
    yield Issue(
        field=FIELD, value=kv,
        message=(f"{kv} does not exist in vLLM {profile.engine_version}: TurboQuant KV presets "
                 f"first ship in {dotted(TURBOQUANT_SINCE)}.0"),
        why="vLLM PR #38479, released in 0.20.0",
        fix=("use a vLLM ≥ 0.21.0 image (0.21 also supports hybrid models, PR #39931), "
             "or kv_cache_dtype: fp8_e4m3"),
    )


@profile_rule("turboquant-needs-hybrid-support", Severity.ERROR, engines=VLLM_ONLY)
def turboquant_needs_hybrid_support(ctx: ProfileContext) -> Iterator[Issue]:
    """TurboQuant KV on a hybrid (Gated-DeltaNet) model needs vLLM ≥ 0.21 or PR #39931."""
    profile = ctx.profile
    if not profile.model.hybrid_gdn or not version_known(profile):
        return
    kv = vllm_settings(profile).kv_cache_dtype
    if not is_turboquant(kv) or not at_least(profile, TURBOQUANT_SINCE):
        return  # before 0.20 the preset does not exist at all: the rule above says so
    if at_least(profile, TURBOQUANT_HYBRID_SINCE) or has_capability(
        profile, CAP_TURBOQUANT_HYBRID, PR_TURBOQUANT_HYBRID
    ):
        return
    yield Issue(
        field=FIELD, value=kv,
        message=(f"{kv} on the hybrid model {profile.model.id} needs TurboQuant hybrid "
                 f"support, which vLLM {profile.engine_version} lacks: it refuses to start "
                 "with 'TurboQuant KV cache is not supported for hybrid …'"),
        why="vLLM PR #39931, shipped in 0.21.0",
        fix=("use a vLLM ≥ 0.21.0 image; or add a patch overlay with pr: 39931 and provides: "
             f"[{CAP_TURBOQUANT_HYBRID}] (list it in image.provides for a nightly that "
             "already has it); or use kv_cache_dtype: fp8_e4m3"),
    )


def _workspace_lock_affected(ctx: ProfileContext) -> bool:
    """Versions whose TurboQuant continuation prefill allocates after the workspace lock:
    0.21–0.24, and 0.20 builds that carry the hybrid work (nightlies after PR #39931 —
    vLLM #41726 reproduces on 0.20.2rc1 with it)."""
    profile = ctx.profile
    if at_least(profile, TURBOQUANT_RESERVATION_SINCE):
        return False
    if at_least(profile, TURBOQUANT_HYBRID_SINCE):
        return True
    return at_least(profile, TURBOQUANT_SINCE) and has_capability(
        profile, CAP_TURBOQUANT_HYBRID, PR_TURBOQUANT_HYBRID
    )


@profile_rule("turboquant-needs-workspace-overlay", Severity.ERROR, engines=VLLM_ONLY)
def turboquant_needs_workspace_overlay(ctx: ProfileContext) -> Iterator[Issue]:
    """TurboQuant KV with chunked prefill on vLLM 0.21–0.24 needs the PR #40798 overlay."""
    profile = ctx.profile
    vllm = vllm_settings(profile)
    if not version_known(profile):
        return
    kv = vllm.kv_cache_dtype
    if not is_turboquant(kv) or not chunked_prefill_on(profile):
        return
    if not _workspace_lock_affected(ctx) or has_capability(
        profile, CAP_TURBOQUANT_WORKSPACE, PR_TURBOQUANT_WORKSPACE
    ):
        return
    chunked = ("enable_chunked_prefill: true" if vllm.enable_chunked_prefill
               else "chunked prefill on by default")
    chunk = vllm.max_num_batched_tokens
    longer = f"max_num_batched_tokens ({chunk})" if chunk else "max_num_batched_tokens"
    yield Issue(
        field=FIELD, value=kv,
        message=(f"{kv} with {chunked} on vLLM {profile.engine_version}: prompts longer than "
                 f"{longer} crash with 'Workspace is locked but allocation from "
                 "…_continuation_prefill requires …'"),
        why=("vLLM #41565, #41726, #43357; fixed by PR #40798, the reservation ships "
             f"in {dotted(TURBOQUANT_RESERVATION_SINCE)}.0"),
        fix=(f"add the PR #40798 overlay to patches (pr: {PR_TURBOQUANT_WORKSPACE}, provides: "
             f"[{CAP_TURBOQUANT_WORKSPACE}]), or use a vLLM ≥ 0.25.0 image, or "
             "kv_cache_dtype: fp8_e4m3"),
    )


@profile_rule("turboquant-with-speculative-decoding", Severity.WARNING, engines=VLLM_ONLY)
def turboquant_with_speculative_decoding(ctx: ProfileContext) -> Iterator[Issue]:
    """TurboQuant KV together with speculative decoding is unverified upstream."""
    profile = ctx.profile
    vllm = vllm_settings(profile)
    if not is_turboquant(vllm.kv_cache_dtype):
        return
    spec = profile.speculative
    if spec is None or not spec_on(profile):
        return
    yield Issue(
        field="vllm.speculative.method", value=spec.method,
        message=(f"{spec.method} speculative decoding with kv_cache_dtype "
                 f"{vllm.kv_cache_dtype} is unverified upstream (the TurboQuant "
                 "tracking issue's speculative-decoding item is open)"),
        why="vLLM #40069",
        fix=("check acceptance rate and outputs on this node before production, or drop "
             "vllm.speculative for TurboQuant profiles"),
    )

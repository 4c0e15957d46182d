"""Speculative-decoding rules (MTP, EAGLE, n-gram) and what they do to CUDA graphs."""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines.vllm import VLLM, vllm_settings
from servefleet.core.rules.base import (
    Issue,
    PlacementContext,
    ProfileContext,
    Severity,
    placement_rule,
    profile_rule,
)
from servefleet.core.rules.facts import (
    ASYNC_INCOMPATIBLE_SPEC_METHODS,
    WHY_CUDAGRAPH_SPEC,
    attention_backend,
    flag_name,
    flashinfer_spec_downgrade,
    mtp_on,
)

FULL_DECODE_MODES = ("FULL_AND_PIECEWISE", "FULL", "FULL_DECODE_ONLY")


@profile_rule("mtp-thinking-budget-ignored", Severity.WARNING, engines=(VLLM.name,))
def mtp_thinking_budget_ignored(ctx: ProfileContext) -> Iterator[Issue]:
    """A thinking-token budget with MTP is silently ignored."""
    profile = ctx.profile
    vllm = vllm_settings(profile)
    spec = profile.speculative
    if spec is None or not mtp_on(profile):
        return
    why = "vLLM #39573 (0.19), #54906 (0.28): thinking_token_budget not enforced with MTP"
    fix = ("cap thinking with max_tokens per request, or serve budgeted traffic from a profile "
           "without MTP (vllm.speculative: null)")
    if vllm.thinking_token_budget is not None:
        yield Issue(
            field="vllm.thinking_token_budget", value=vllm.thinking_token_budget,
            message=(f"a thinking_token_budget of {vllm.thinking_token_budget} with MTP "
                     f"({spec.method}) is accepted and silently ignored: thinking can run away "
                     "and use the whole max_tokens"),
            why=why, fix=fix,
        )
    for index, arg in enumerate(vllm.extra_args):
        if flag_name(arg) == "reasoning-config" and "budget" in arg:
            yield Issue(
                field=f"vllm.extra_args[{index}]", value=arg,
                message=(f"{arg} sets a thinking budget, but with MTP ({spec.method}) it is "
                         "accepted and silently ignored"),
                why=why, fix=fix,
            )


@profile_rule("async-scheduling-incompatible-spec-method", Severity.ERROR, engines=(VLLM.name,))
def async_scheduling_incompatible_spec_method(ctx: ProfileContext) -> Iterator[Issue]:
    """Explicit async scheduling with an n-gram or suffix speculative method raises."""
    vllm = vllm_settings(ctx.profile)
    spec = ctx.profile.speculative
    if spec is None or vllm.async_scheduling is not True:
        return
    if spec.method not in ASYNC_INCOMPATIBLE_SPEC_METHODS:
        return
    yield Issue(
        field="vllm.async_scheduling", value=True,
        message=(f"async_scheduling true with speculative method {spec.method}: vLLM raises at "
                 "startup (async scheduling supports only EAGLE, MTP, draft-model and "
                 "ngram_gpu drafting)"),
        why="vLLM vllm/config/vllm.py async-scheduling checks (0.21.0)",
        fix=("remove vllm.async_scheduling (automatic mode turns it off for this method), set "
             "it to false, or use method ngram_gpu"),
    )


@profile_rule("mtp-multiple-speculative-tokens", Severity.INFO)
def mtp_multiple_speculative_tokens(ctx: ProfileContext) -> Iterator[Issue]:
    """num_speculative_tokens > 1 with MTP runs the same MTP layer several times."""
    spec = ctx.profile.speculative
    if spec is None or not spec.is_mtp or spec.num_speculative_tokens <= 1:
        return
    n = spec.num_speculative_tokens
    yield Issue(
        field="vllm.speculative.num_speculative_tokens", value=n,
        message=(f"{n} speculative tokens with MTP run the model's one MTP layer {n} times per "
                 "step; later positions accept less (GB10 measurement: 82% at position 0, "
                 "63% at position 1)"),
        why=("vLLM vllm/config/speculative.py warning 'Enabling num_speculative_tokens > 1 will "
             "run multiple times of forward on same MTP layer'"),
        fix=("keep it if measured acceptance pays for it; otherwise compare with "
             "num_speculative_tokens: 1"),
    )


@profile_rule("determinism-with-speculative-decoding", Severity.WARNING)
def determinism_with_speculative_decoding(ctx: ProfileContext) -> Iterator[Issue]:
    """Determinism wanted while MTP (speculative decoding) is on."""
    profile = ctx.profile
    spec = profile.speculative
    if spec is None or not profile.health.determinism.wanted:
        return
    yield Issue(
        field="health.determinism.wanted", value=True,
        message=(f"true while speculative decoding ({spec.method}) is on: identical "
                 "temperature-0 requests give different outputs (DGX Spark: 4/12 tasks stable "
                 "with MTP, 12/12 without)"),
        why=("operator measurements on Qwen3.6 with vLLM + MTP; MoE kernels also flip at "
             "near-ties in vLLM"),
        fix=("drop vllm.speculative for this profile, or serve deterministic traffic from "
             "llama.cpp with parallel: 1 and cache_prompt: false"),
    )


@placement_rule("spec-decode-flashinfer-piecewise", Severity.INFO)
def spec_decode_flashinfer_piecewise(ctx: PlacementContext) -> Iterator[Issue]:
    """Speculative decoding on FlashInfer off SM100: expect PIECEWISE graphs and a smaller
    KV pool (the health expectations are adjusted)."""
    profile = ctx.profile
    spec = profile.speculative
    if spec is None or not flashinfer_spec_downgrade(profile, ctx.node):
        return
    if profile.health.cudagraph_mode in ("FULL_AND_PIECEWISE", "FULL", "FULL_DECODE_ONLY"):
        return  # the error rule below reports it
    _, reason = attention_backend(profile, ctx.node)
    yield Issue(
        field="vllm.speculative.method", value=spec.method,
        message=(f"{spec.method} with the FlashInfer attention backend ({reason}) {ctx.where}, "
                 f"compute capability {ctx.node.primary_gpu.compute_capability}, not SM100: "
                 "vLLM downgrades CUDA graphs to PIECEWISE and the KV pool shrinks (GB10: "
                 "360k → 323k tokens); servefleet's health expectations are adjusted to "
                 "PIECEWISE and a smaller pool"),
        why=WHY_CUDAGRAPH_SPEC,
        fix=("nothing to do if this is intended; if the KV pool was tight, raise "
             "gpu_memory_utilization or lower max_num_seqs before turning speculation on"),
    )


@placement_rule("spec-decode-flashinfer-full-graphs-expected", Severity.ERROR)
def spec_decode_flashinfer_full_graphs_expected(ctx: PlacementContext) -> Iterator[Issue]:
    """The profile expects full CUDA graphs where spec decoding on FlashInfer forces
    PIECEWISE."""
    profile = ctx.profile
    expected = profile.health.cudagraph_mode
    if expected not in FULL_DECODE_MODES or not flashinfer_spec_downgrade(profile, ctx.node):
        return
    spec = profile.speculative
    assert spec is not None
    yield Issue(
        field="health.cudagraph_mode", value=expected,
        message=(f"{expected} is expected, but {spec.method} with FlashInfer {ctx.where} "
                 f"(SM {ctx.node.primary_gpu.compute_capability}, not SM100) makes vLLM set "
                 "cudagraph_mode=PIECEWISE: the health gate would fail every boot"),
        why=WHY_CUDAGRAPH_SPEC,
        fix=("set health.cudagraph_mode: PIECEWISE or remove it (servefleet derives it), or "
             "use an attention backend with UNIFORM_BATCH support"),
    )

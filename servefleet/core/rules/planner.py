"""KV-planner rules: ``validate`` refuses what ``plan`` would refuse or get wrong.

- the pinned ``config.json`` (``model.config``) must be readable and match its sha256;
- the planner must model it (no Mamba-2/SSM layers other than Gated DeltaNet, no sliding
  windows the config does not lay out (sliding layers named by ``layer_types`` or Gemma 3's
  pattern are planned), no MLA, no cross-layer KV sharing, a KV dtype it knows), see
  :mod:`servefleet.core.kvplan.modelconfig`;
- the weights' size must be known (the pool is what they leave);
- the profile's own pool on its node must hold one request of ``max_model_len``;
- a profile that ``extends`` another and serves another ``model.id`` must restate the
  parent's model facts instead of inheriting them silently.

These rules read the pinned ``config.json`` (the planner's only input file); nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from servefleet.core.engines.vllm import VLLM, vllm_settings
from servefleet.core.errors import ServefleetError
from servefleet.core.models import Profile
from servefleet.core.project import PROFILES_DIR
from servefleet.core.rules.base import (
    Issue,
    PlacementContext,
    ProfileContext,
    Severity,
    placement_rule,
    profile_rule,
)

VLLM_ONLY = (VLLM.name,)
WHY_PLAN = ("servefleet plan and tune predict the KV pool from the pinned config.json "
            "(docs/planner.md); what the planner does not model it refuses rather than "
            "plan wrongly")
WHY_WEIGHTS = ("vLLM vllm/v1/worker/gpu_worker.py determine_available_memory(): the KV pool "
               "gets total × gpu_memory_utilization minus the weights ('Model loading took X "
               "GiB') and the profiling peak")
MODEL_FACTS = ("revision", "architecture", "hybrid_gdn", "native_context", "weights_gib",
               "quant_format", "kv_bytes_per_token", "config", "fp8_lm_head", "tokenizer",
               "source")
"""``model.*`` fields that describe one checkpoint: wrong for another ``model.id``."""
ENGINE_FACTS = {"vllm": ("reasoning_parser", "tool_call_parser", "speculative", "hf_overrides"),
                "llamacpp": ("gguf",)}
"""Engine settings tied to the checkpoint (its parsers, its MTP heads, its file)."""


def _repin(profile: Profile) -> str | None:
    """The ``servefleet models pin`` command that pins ``profile``'s checkpoint."""
    from servefleet.core.modelpin.spec import pin_command

    return pin_command(profile)


def _split(error: ServefleetError) -> tuple[str, str]:
    """A planner refusal (``what; fix``) as (message, fix)."""
    text = " ".join(str(error).split())
    message, _, fix = text.rpartition("; ")
    return (message, fix) if message else (text, "fix the file the message names")


def _pinned(ctx: ProfileContext | PlacementContext) -> Any:
    """The pinned facts of the profile, or ``None`` when unpinned, unreadable or refused
    (the profile rules below say why)."""
    from servefleet.core.kvplan.modelconfig import facts_for_profile

    if ctx.root is None or ctx.profile.model.config is None:
        return None
    try:
        return facts_for_profile(ctx.root / PROFILES_DIR, ctx.profile)
    except ServefleetError:
        return None


@profile_rule("model-config-pin", Severity.ERROR, engines=VLLM_ONLY)
def model_config_pin(ctx: ProfileContext) -> Iterator[Issue]:
    """The pinned config.json cannot be read or does not match model.config.sha256."""
    from servefleet.core.kvplan.modelconfig import read_pinned

    ref = ctx.profile.model.config
    if ref is None or ctx.root is None:
        return
    repin = _repin(ctx.profile)
    try:
        _, digest = read_pinned(ctx.root / PROFILES_DIR, ref.file)
    except ServefleetError as error:
        message, fix = _split(error)
        yield Issue(field="model.config.file", value=ref.file, message=message,
                    why=WHY_PLAN, fix=fix + (f", or pin it again: {repin}" if repin else ""))
        return
    if digest == ref.sha256:
        return
    yield Issue(
        field="model.config.sha256", value=ref.sha256,
        message=(f"{ref.sha256} does not match profiles/{ref.file}, whose sha256 is {digest}: "
                 "plan and tune refuse to predict the KV pool from a file that changed "
                 "under its pin"),
        why=WHY_PLAN,
        fix=(f"if profiles/{ref.file} is the checkpoint's own config.json (compare it with the "
             f"repository's at the served revision), set model.config.sha256: {digest}; "
             "otherwise restore the file"
             + (f" (`{repin}` writes the checkpoint's own bytes again and pins them)"
                if repin else "")))


@profile_rule("model-config-not-plannable", Severity.ERROR, engines=VLLM_ONLY)
def model_config_not_plannable(ctx: ProfileContext) -> Iterator[Issue]:
    """The KV planner refuses the pinned config.json or the profile's KV settings."""
    from servefleet.core.kvplan.modelconfig import load_pinned
    from servefleet.core.kvplan.predict import profile_layout

    ref = ctx.profile.model.config
    if ref is None or ctx.root is None:
        return
    try:
        facts = load_pinned(ctx.root / PROFILES_DIR, ref.file, ref.sha256)
    except ServefleetError as error:
        if "(model.config.sha256)" in str(error) or "cannot read" in str(error):
            return  # model-config-pin says so
        message, fix = _split(error)
        yield Issue(field="model.config.file", value=ref.file, message=message,
                    why=WHY_PLAN, fix=fix)
        return
    try:
        profile_layout(facts, ctx.profile)
    except ServefleetError as error:
        message, fix = _split(error)
        yield Issue(field="vllm.kv_cache_dtype",
                    value=vllm_settings(ctx.profile).kv_cache_dtype or "auto",
                    message=message, why=WHY_PLAN, fix=fix)


@profile_rule("model-encoder-not-modelled", Severity.WARNING, engines=VLLM_ONLY)
def model_encoder_not_modelled(ctx: ProfileContext) -> Iterator[Issue]:
    """A multimodal checkpoint served with its encoders: the cold plan leaves them out."""
    from servefleet.core.kvplan.predict import unmodelled_encoders

    facts = _pinned(ctx)
    if facts is None:
        return
    why_not = unmodelled_encoders(facts, ctx.profile)
    if why_not is None:
        return
    assert ctx.profile.model.config is not None
    yield Issue(
        field="vllm.language_model_only", value=False,
        message=(f"profiles/{ctx.profile.model.config.file} has {', '.join(facts.encoders)}: "
                 + why_not.split(": ", 1)[1]),
        why=("vLLM vllm/v1/worker/gpu_model_runner.py profile_run(): the multimodal encoder "
             "and its cache are profiled before determine_available_memory() sizes the KV "
             "pool"),
        fix=("set vllm.language_model_only: true where the node serves text only; otherwise "
             "read the cold plan as an upper bound until the first deploy records the pool"))


@placement_rule("model-weights-unknown", Severity.ERROR, engines=VLLM_ONLY)
def model_weights_unknown(ctx: PlacementContext) -> Iterator[Issue]:
    """model.weights_gib is not set: the KV pool and the memory fit cannot be judged."""
    if ctx.profile.model.weights_gib is not None:
        return
    repin = _repin(ctx.profile)
    pin_first = (f"run `{repin}`: it reads the weights' size from the hub and pins the "
                 "checkpoint's config.json; or " if repin else "")
    yield Issue(
        field="model.weights_gib", value=None,
        message=(f"the weights' size is not set for {ctx.profile.model.id} {ctx.where}: the KV "
                 "pool is what gpu_memory_utilization leaves after the weights, so plan and "
                 "tune cannot predict it (planned as weightless, an 8B checkpoint on an RTX "
                 "5090 showed 213k tokens where ~90k fit) and the memory rules cannot check "
                 "the fit"),
        why=WHY_WEIGHTS,
        fix=(pin_first + "set model.weights_gib to the checkpoint's safetensors total in GiB "
             "(the sum of its *.safetensors sizes; vLLM's 'Model loading took X GiB' once it "
             "booted)"))


@placement_rule("kv-pool-below-one-request", Severity.ERROR, engines=VLLM_ONLY)
def kv_pool_below_one_request(ctx: PlacementContext) -> Iterator[Issue]:
    """The profile's own predicted pool on its node cannot hold one max_model_len request."""
    from servefleet.core.kvplan.predict import predict

    profile, node = ctx.profile, ctx.node
    if node.simulated or node.sim is not None or profile.model.weights_gib is None:
        return  # a simulated node's CPU build is given its KV space; weights: rule above
    facts = _pinned(ctx)
    if facts is None:
        return
    try:
        found = predict(facts, profile, node)
    except ServefleetError:
        return  # model-config-not-plannable says why
    pool = found.pool
    if pool.max_concurrency >= 1:
        return
    yield Issue(
        field="vllm.max_model_len", value=pool.max_model_len,
        message=(f"{pool.max_model_len:,} tokens do not fit one request {ctx.where}: the "
                 f"planner's pool is {pool.kv_cache_tokens:,} tokens "
                 f"({pool.max_concurrency:.2f}× max_model_len; "
                 f"{max(found.available_kv_gib, 0):.2f} GiB KV at gpu_memory_utilization "
                 f"{found.utilization:g}, {found.how}); vLLM stops at boot with 'To serve at "
                 "least one request with the models's max seq len … KV cache is needed, which "
                 "is larger than the available KV cache memory'"),
        why=("vLLM vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory(); the pool "
             "as servefleet plan predicts it (docs/planner.md)"),
        fix=(f"raise vllm.gpu_memory_utilization (servefleet tune {profile.name} --node "
             f"{node.name} --target-concurrency 1 finds the least that fits), lower "
             "max_model_len, or use a smaller kv_cache_dtype (fp8)"))


def _section(own: dict[str, Any], name: str) -> dict[str, Any]:
    value = own.get(name)
    return value if isinstance(value, dict) else {}


def _inherited(profile: Profile, parent: Profile, own: dict[str, Any]) -> list[str]:
    """The parent's model facts ``profile`` takes over without stating them itself."""
    found = []
    own_model = _section(own, "model")
    for name in MODEL_FACTS:
        if getattr(parent.model, name) not in (None, False) and name not in own_model:
            found.append(f"model.{name}")
    for section, names in ENGINE_FACTS.items():
        settings = getattr(parent, section, None)
        if settings is None or getattr(profile, section, None) is None:
            continue
        own_section = _section(own, section)
        found.extend(f"{section}.{name}" for name in names
                     if getattr(settings, name, None) not in (None, False)
                     and name not in own_section)
    return found


@profile_rule("extends-keeps-model-facts", Severity.ERROR)
def extends_keeps_model_facts(ctx: ProfileContext) -> Iterator[Issue]:
    """A profile that extends another but serves another model.id inherits the parent's
    model facts (architecture, pinned config, weights, parsers)."""
    own, parent, profile = ctx.own, ctx.parent, ctx.profile
    if own is None or parent is None or parent.model.id == profile.model.id:
        return
    inherited = _inherited(profile, parent, dict(own))
    if not inherited:
        return
    yield Issue(
        field="model.id", value=profile.model.id,
        message=(f"{profile.model.id} replaces {parent.name}'s {parent.model.id} but inherits "
                 f"its model facts {', '.join(inherited)}: they describe {parent.model.id}, "
                 "so the KV plan, the memory rules and the parsers would judge the wrong "
                 "checkpoint"),
        why=("extends merges every field of the parent (servefleet.core.project); a model's "
             "facts do not carry over to another checkpoint"),
        fix=(f"restate {', '.join(inherited)} in {ctx.file} for {profile.model.id} (null for "
             "what it lacks, e.g. model.config: null when its config.json is not pinned), or "
             "write the profile without extends"))

"""Predict a vLLM profile's KV pool on a node before it boots.

Budget (vLLM ``request_memory``/``determine_available_memory``): the engine may take
``total × gpu_memory_utilization``; the KV pool gets what weights, the activation peak,
non-torch allocations and (from 0.20) the CUDA-graph estimate leave. Weights come from the
profile; the rest is either *calibrated* from a measured run of the same model on the node
(``non_kv = total × util − weights − available_kv``, worked back from its printed pool) or
*modelled* cold from what drives it (:mod:`servefleet.core.kvplan.reserve`). ``total`` is
the memory CUDA reports (``Gpu.cuda_total_gib``: 121.69 GiB on a GB10, not its 128 GB).
"""

from __future__ import annotations

from dataclasses import dataclass

from servefleet.core.engines import engine_of
from servefleet.core.engines.vllm import vllm_settings
from servefleet.core.errors import ConfigError
from servefleet.core.kvplan.cpu import KV_BYTES_FLAG, explicit_kv_bytes
from servefleet.core.kvplan.modelconfig import ModelFacts
from servefleet.core.kvplan.pool import GIB, PoolFigures, PoolLayout, bytes_for, figures, layout
from servefleet.core.kvplan.reserve import (
    Reserve,
    ReserveInputs,
    default_batch,
    estimate,
    inputs_for,
)
from servefleet.core.models import Node, Profile
from servefleet.core.rules.facts import gpu_memory_utilization, weights_gib

UMA_SAFE_HEADROOM_GIB = 8.0
"""Host memory a GB10 keeps for the OS, page cache and containers (vLLM DGX Spark guide)."""


@dataclass(frozen=True)
class Calibration:
    """A measured boot of the same model on the node."""

    profile: Profile
    """The profile that booted."""
    kv_cache_tokens: int
    """The ``GPU KV cache size`` it printed."""
    source: str
    """Where the figure came from (baseline file, day), for messages."""


@dataclass(frozen=True)
class Prediction:
    """A profile's memory and KV pool on one node."""

    total_gib: float
    utilization: float
    weights_gib: float
    non_kv_gib: float
    """Activation peak + non-torch + CUDA-graph estimate."""
    available_kv_gib: float
    layout: PoolLayout
    pool: PoolFigures
    calibrated: bool
    reserve: Reserve | None
    """The modelled reserve (cold predictions only)."""
    how: str
    """How the budget was obtained, one clause."""
    host_headroom_gib: float | None
    """Unified memory: what the host keeps after the engine's share (``None`` otherwise)."""

    def summary(self) -> str:
        """``KV pool ≈ 1.08M tokens, concurrency at 131,072 ≈ 8.2×``."""
        return (f"KV pool ≈ {_tokens(self.pool.kv_cache_tokens)} tokens, concurrency at "
                f"{self.pool.max_model_len:,} ≈ {self.pool.max_concurrency:.1f}×")


def _tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.2f}M"
    if n >= 10_000:
        return f"{n / 1e3:.0f}k"
    return f"{n:,}"


def _settings(profile: Profile) -> tuple[float, int, int]:
    vllm = vllm_settings(profile)
    util = gpu_memory_utilization(profile)
    max_len = vllm.max_model_len or profile.model.native_context or 0
    return util, max_len, vllm.tensor_parallel_size or 1


QUANTIZED_ELSEWHERE = ("fp8", "nvfp4", "mxfp4", "int8", "int4")
"""``model.quant_format`` values whose checkpoints may keep their quantization (and its KV
cache scheme) in ``hf_quant_config.json`` (ModelOpt ≤ 0.29) rather than in config.json."""


def check_kv_quant_known(facts: ModelFacts, profile: Profile) -> None:
    """Refuse ``--kv-cache-dtype auto`` on a quantized checkpoint whose pinned config.json
    carries no ``quantization_config``: vLLM then reads ``hf_quant_config.json``, whose
    ``quantization.kv_cache_quant_algo`` (FP8 on many NVFP4 exports) decides the KV element
    size under ``auto``, and the planner does not see that file."""
    kv = vllm_settings(profile).kv_cache_dtype or "auto"
    fmt = profile.model.quant_format
    if kv != "auto" or facts.has_quantization_config or fmt not in QUANTIZED_ELSEWHERE:
        return
    raise ConfigError(
        f"{facts.source}: field 'quantization_config' is not set while model.quant_format is "
        f"{fmt} and vllm.kv_cache_dtype is auto: vLLM then takes the checkpoint's "
        "hf_quant_config.json as its quantization config, and its "
        "quantization.kv_cache_quant_algo (FP8 on many NVFP4 exports) makes the KV cache fp8 "
        "under auto, which the planner cannot see; set vllm.kv_cache_dtype explicitly (fp8 "
        "when hf_quant_config.json says kv_cache_quant_algo FP8, else bfloat16), or pin the "
        "checkpoint's config.json that carries its quantization_config")


HYBRID_OFF_FLAGS = {
    "--disable-hybrid-kv-cache-manager": "--disable-hybrid-kv-cache-manager",
    "--kv-transfer-config": "a KV connector (--kv-transfer-config)",
    "--kv-events-config": "KV cache events (--kv-events-config)",
}
"""``vllm.extra_args`` that turn vLLM's hybrid KV-cache manager off (``VllmConfig``: a KV
connector or KV events disable it), and how to say so."""


def hybrid_manager_off(profile: Profile) -> str:
    """Why the hybrid KV-cache manager is off for ``profile`` (empty: it is on)."""
    for arg in vllm_settings(profile).extra_args:
        flag = arg.partition("=")[0]
        if flag in HYBRID_OFF_FLAGS and not arg.endswith("=false"):
            return f"{HYBRID_OFF_FLAGS[flag]} in vllm.extra_args"
    return ""


HYBRID_PREFIX_CACHING_SINCE = (0, 28)
"""From here ``vllm serve`` turns prefix caching on by default for hybrid (Gated-DeltaNet,
Mamba) models, which puts their state in mamba cache mode ``align`` (more state blocks per
request). Up to 0.27 ``_set_default_chunked_prefill_and_prefix_caching_args`` keeps it off
for them: in 0.25.1 ``ModelConfig.is_prefix_caching_supported`` says no for hybrids, in
0.26.0 it says yes but ``EngineArgs`` still excludes ``is_hybrid`` (both wheels read; the
real 0.26.0 boot of Qwen3.6's text model on an H200 prints ``enable_prefix_caching=False``
and its pool is reproduced with mode ``none``). vllm-project/vllm#50991 ("[Mamba] enable
prefix cache by default", merged 2026-08-04) drops the exclusion; vllm-project/vllm-metal#651
records it as the 0.28.0 default."""


def profile_layout(facts: ModelFacts, profile: Profile, node: Node | None = None) -> PoolLayout:
    """The pool layout of ``profile``'s flags (prefix caching default: on, for hybrid models
    from :data:`HYBRID_PREFIX_CACHING_SINCE`) on
    ``node`` (its default ``max_num_batched_tokens`` bounds sliding-window groups; without a
    node, the profile's value or 8192)."""
    check_kv_quant_known(facts, profile)
    vllm = vllm_settings(profile)
    spec = vllm.speculative
    prefix = vllm.enable_prefix_caching
    if prefix is None:
        prefix = not facts.hybrid or profile.version >= HYBRID_PREFIX_CACHING_SINCE
    batched = vllm.max_num_batched_tokens or 8192
    if node is not None:
        batched = default_batch(profile, node)[0]
    off = hybrid_manager_off(profile)
    return layout(facts, kv_dtype=vllm.kv_cache_dtype, tp=vllm.tensor_parallel_size or 1,
                  num_spec=spec.num_speculative_tokens if spec else 0,
                  mtp=bool(spec and spec.is_mtp), prefix_caching=bool(prefix),
                  version=profile.version, max_num_batched_tokens=batched,
                  concurrent_batches=1 if vllm.async_scheduling is False else 2,
                  hybrid_manager=not off, hybrid_off_why=off)


def measured_available_gib(facts: ModelFacts, calibration: Calibration,
                           node: Node | None = None) -> float:
    """The KV memory a measured pool implies (its printed tokens, worked back)."""
    profile = calibration.profile
    _, max_len, _ = _settings(profile)
    lay = profile_layout(facts, profile, node)
    return bytes_for(lay, max_model_len=max_len, version=profile.version,
                     tokens=calibration.kv_cache_tokens) / GIB


def predict(facts: ModelFacts, profile: Profile, node: Node,
            calibration: Calibration | None = None, *,
            reserve_inputs: ReserveInputs | None = None) -> Prediction:
    """Predict ``profile``'s pool on ``node``; calibrated when a measured run is given, else
    modelled cold (``reserve_inputs``: precomputed, for solvers that vary the utilization)."""
    util, max_len, _ = _settings(profile)
    gpu = node.primary_gpu
    total = gpu.cuda_total_gib
    explicit = explicit_kv_bytes(profile)
    if explicit is None:  # the pool is what the weights leave: unknown weights, no pool
        _require_weights(profile)
        if calibration is not None:
            _require_weights(calibration.profile)
    weights = _weights(profile)
    reserve = None
    if calibration is not None:
        base_util, _, _ = _settings(calibration.profile)
        available = measured_available_gib(facts, calibration, node)
        non_kv = total * base_util - _weights(calibration.profile) - available
        how = (f"calibrated on {calibration.source}: {calibration.kv_cache_tokens:,} tokens "
               f"→ {available:.2f} GiB KV, {non_kv:.2f} GiB activations/graphs")
        calibrated = True
    else:
        reserve = estimate(reserve_inputs or inputs_for(facts, profile, node))
        non_kv = reserve.total
        how = (f"modelled cold (no measured run on {node.name}) against "
               f"{gpu.memory_basis()}: {reserve.describe()}")
        unmodelled = unmodelled_encoders(facts, profile)
        if unmodelled:
            how += f"; {unmodelled}"
        calibrated = False
    available = total * util - weights - non_kv
    if explicit is not None:  # vLLM takes this budget as it is, whatever the utilization
        available = explicit / GIB
        how = f"{KV_BYTES_FLAG}={explicit:,} in vllm.extra_args: the KV budget as it is"
    lay = profile_layout(facts, profile, node)
    pool = figures(lay, max(available, 0.0) * GIB, max_len, profile.version)
    headroom = None
    if node.unified_memory:
        host = node.host_memory_gib or gpu.memory_gib
        headroom = host - total * util
    return Prediction(total_gib=total, utilization=util, weights_gib=weights, non_kv_gib=non_kv,
                      available_kv_gib=available, layout=lay, pool=pool, calibrated=calibrated,
                      reserve=reserve, how=how, host_headroom_gib=headroom)


def unmodelled_encoders(facts: ModelFacts, profile: Profile) -> str | None:
    """What a cold prediction leaves out for a multimodal checkpoint served with its
    encoders (``None``: none, or ``vllm.language_model_only``)."""
    if not facts.encoders or vllm_settings(profile).language_model_only:
        return None
    if facts.vision is not None and facts.encoders == ("vision_config",):
        return None  # modelled: servefleet.core.kvplan.reserve.vision_encoder
    names = " and ".join(key.removesuffix("_config") for key in facts.encoders)
    return (f"the {names} encoder is not modelled: vLLM profiles it with its largest input "
            "item (a video for Qwen2.5-VL) before it sizes the pool and keeps an encoder cache "
            "beside it, so the pool will be smaller than planned (a vision-language MoE on two "
            "H100s printed 6-9% less); vllm.language_model_only leaves the encoder out, and "
            "a deploy's recorded pool calibrates later plans")


def with_settings(profile: Profile, **changes: object) -> Profile:
    """``profile`` with some vLLM settings changed (for solving)."""
    settings = vllm_settings(profile).model_copy(update=changes)
    return profile.model_copy(update={"vllm": settings})


def solve_utilization(facts: ModelFacts, profile: Profile, node: Node, *,
                      calibration: Calibration | None = None, tokens: int | None = None,
                      concurrency: float | None = None) -> tuple[float, Prediction]:
    """The smallest ``gpu_memory_utilization`` (0.01 steps) whose predicted pool reaches
    ``tokens`` or ``concurrency``; ``ValueError`` when even 0.99 does not."""
    inputs = None if calibration is not None else inputs_for(facts, profile, node)
    for hundredths in range(5, 100):
        util = hundredths / 100
        found = predict(facts, with_settings(profile, gpu_memory_utilization=util), node,
                        calibration, reserve_inputs=inputs)
        reached = (found.pool.kv_cache_tokens >= tokens if tokens is not None
                   else found.pool.max_concurrency >= (concurrency or 0))
        if reached:
            return util, found
    raise ValueError("not reachable below gpu_memory_utilization 1.0")


def _require_weights(profile: Profile) -> None:
    """Refuse a budget without the weights' size: the pool is what they leave."""
    if profile.model.weights_gib is None:
        from servefleet.core.modelpin.spec import pin_command

        repin = pin_command(profile)
        raise ConfigError(
            f"profiles/{profile.name}.yaml: field model.weights_gib is not set: the KV pool is "
            "what gpu_memory_utilization leaves after the weights, so without their size the "
            "pool cannot be predicted (planned as weightless it is overstated by the whole "
            "checkpoint); " + (f"run `{repin}` (it reads the size from the hub), or " if repin
                               else "")
            + "set model.weights_gib to the checkpoint's safetensors total in GiB "
            "(vLLM's 'Model loading took X GiB')")


def _weights(profile: Profile) -> float:
    """Weights per GPU, over the GPUs its engine splits them across."""
    return weights_gib(profile, engine_of(profile).gpu_count(profile))

"""Facts about engines and hardware that the rules and the health expectations rely on.

Everything version-dependent lives here as data, so a new vLLM release means editing a
table, not a rule. Versions are the numeric tuples of :func:`version_tuple`; a value is
refused only below the first version that *may* have it (the release after the last checked
wheel that lacked it), so an unchecked release in between is given the benefit of the doubt.
Sources are the released vLLM wheels (``vllm==X`` file paths) and upstream issues and PRs.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefleet.core.engines.base import vllm_settings
from servefleet.core.models import Node, Profile
from servefleet.core.models.profile import CudaGraphMode

Version = tuple[int, ...]


def dotted(version: Version) -> str:
    """``(0, 21)`` → ``0.21``."""
    return ".".join(str(p) for p in version)


def version_known(profile: Profile) -> bool:
    """Whether the profile's engine version could be parsed (``nightly`` cannot)."""
    return bool(profile.version)


def at_least(profile: Profile, version: Version) -> bool:
    """The profile's engine version is ``version`` or later (pre-releases count as the
    release they lead to: ``0.21.0rc1`` is 0.21)."""
    return profile.version >= version


# ------------------------------------------------------------------------ vLLM defaults

GPU_MEMORY_UTILIZATION_DEFAULTS: tuple[tuple[Version, float], ...] = ((0, 20), 0.92), ((), 0.9)
"""``--gpu-memory-utilization`` default, newest first (vllm 0.19.0 → 0.20.0
``vllm/config/cache.py``: 0.9 → 0.92)."""

CUDAGRAPH_DEFAULTS: tuple[tuple[Version, CudaGraphMode | None], ...] = (
    ((0, 11), "FULL_AND_PIECEWISE"),
    ((0, 10), "PIECEWISE"),
    ((), None),
)
"""Default ``cudagraph_mode``, newest first (vllm 0.10.2 / 0.11.0 ``vllm/config/
compilation.py``); before 0.10 vLLM used ``use_cudagraph`` booleans (no mode to expect)."""


def default_gpu_memory_utilization(profile: Profile) -> float:
    """The utilization vLLM uses when the profile leaves it unset."""
    return next(v for since, v in GPU_MEMORY_UTILIZATION_DEFAULTS if profile.version >= since)


def default_cudagraph_mode(profile: Profile) -> CudaGraphMode | None:
    """The CUDA-graph mode the version starts from before any downgrade."""
    return next(v for since, v in CUDAGRAPH_DEFAULTS if profile.version >= since)


def gpu_memory_utilization(profile: Profile) -> float:
    """The utilization in effect: explicit, else the version's default."""
    explicit = vllm_settings(profile).gpu_memory_utilization
    if explicit is not None:
        return explicit
    return default_gpu_memory_utilization(profile)


# ------------------------------------------------------------------------- KV-cache dtype

KV_DTYPE_SINCE: dict[str, tuple[Version, str]] = {
    "auto": ((), ""),
    "fp8": ((), ""),
    "fp8_e4m3": ((), ""),
    "fp8_e5m2": ((), ""),
    "fp8_inc": ((0, 9), "absent in 0.8.5, listed by 0.10.2"),
    "bfloat16": ((0, 11), "absent in 0.10.2, listed from 0.11.0"),
    "float16": ((0, 12), "absent in 0.11.0, listed by 0.21.0"),
    "fp8_ds_mla": ((0, 12), "absent in 0.11.0, listed by 0.21.0"),
    "int8_per_token_head": ((0, 12), "absent in 0.11.0, listed by 0.21.0"),
    "fp8_per_token_head": ((0, 12), "absent in 0.11.0, listed by 0.21.0"),
    "nvfp4": ((0, 12), "absent in 0.11.0, listed by 0.21.0"),
    "turboquant_k8v4": ((0, 20), "new in 0.20.0, vLLM PR #38479"),
    "turboquant_4bit_nc": ((0, 20), "new in 0.20.0, vLLM PR #38479"),
    "turboquant_k3v4_nc": ((0, 20), "new in 0.20.0, vLLM PR #38479"),
    "turboquant_3bit_nc": ((0, 20), "new in 0.20.0, vLLM PR #38479"),
    "nvfp4_ds_mla": ((0, 22), "absent in 0.21.0, listed by 0.33.0"),
    "octave_k3v4": ((0, 22), "absent in 0.21.0, listed by 0.33.0"),
    "octave_k3v3": ((0, 22), "absent in 0.21.0, listed by 0.33.0"),
    "octave_k3v3_compact": ((0, 22), "absent in 0.21.0, listed by 0.33.0"),
    "ultraquant_4bit": ((0, 22), "absent in 0.21.0, listed by 0.33.0"),
    "int4_per_token_head": ((0, 22), "absent in 0.21.0, listed by 0.33.0"),
    "nvfp4_4over6": ((0, 22), "absent in 0.21.0, listed by 0.33.0"),
}
"""First version that may accept each ``--kv-cache-dtype`` value (``CacheDType`` Literal in
``vllm/config/cache.py`` of the checked wheels), with the evidence."""

KV_DTYPE_SOURCE = "vLLM CacheDType, vllm/config/cache.py of the released wheels"

TURBOQUANT_SINCE: Version = (0, 20)
"""TurboQuant KV presets first ship in 0.20.0 (vLLM PR #38479)."""
TURBOQUANT_HYBRID_SINCE: Version = (0, 21)
"""0.20.0 rejects hybrid models ("TurboQuant KV cache is not supported for hybrid");
vLLM PR #39931 (hybrid support) ships in 0.21.0."""
TURBOQUANT_RESERVATION_SINCE: Version = (0, 25)
"""From 0.25.0 ``TurboQuantMetadataBuilder._reserve_workspace()`` reserves the
continuation-prefill buffers before the workspace is locked; 0.21–0.24 do not (0.24 not
checked), so long prompts crash there (vLLM #41565, #41726, #43357) unless PR #40798's
overlay adds the reservation."""

CAP_TURBOQUANT_HYBRID = "turboquant-hybrid"
"""Capability name of vLLM PR #39931 (TurboQuant on hybrid models)."""
PR_TURBOQUANT_HYBRID = 39931
CAP_TURBOQUANT_WORKSPACE = "turboquant-workspace-reservation"
"""Capability name of vLLM PR #40798 (TurboQuant workspace reserved before the lock)."""
PR_TURBOQUANT_WORKSPACE = 40798
CAP_FP8_LM_HEAD = "fp8-lm-head-dispatch"
"""Capability name of the compressed-tensors FP8 lm_head dispatch overlay."""


def is_turboquant(kv_dtype: str | None) -> bool:
    """Whether a KV dtype is a TurboQuant preset."""
    return bool(kv_dtype) and str(kv_dtype).startswith("turboquant_")


KV_BYTES_FACTOR: dict[str, float] = {
    "auto": 1.0, "float16": 1.0, "bfloat16": 1.0,
    "fp8": 0.5, "fp8_e4m3": 0.5, "fp8_e5m2": 0.5, "fp8_inc": 0.5, "fp8_ds_mla": 0.5,
    "fp8_per_token_head": 0.52, "int8_per_token_head": 0.52, "int4_per_token_head": 0.27,
    "nvfp4": 0.29, "nvfp4_4over6": 0.29, "nvfp4_ds_mla": 0.29,
    # Bytes per head per token (K+V) at head_dim 256 over the bf16 1024 (vllm 0.21.0
    # turboquant/config.py TQ_PRESETS, slot_size_aligned).
    "turboquant_k8v4": 388 / 1024, "turboquant_4bit_nc": 262 / 1024,
    "turboquant_k3v4_nc": 230 / 1024, "turboquant_3bit_nc": 198 / 1024,
    "octave_k3v4": 0.23, "octave_k3v3": 0.2, "octave_k3v3_compact": 0.19,
    "ultraquant_4bit": 0.26,
}
"""KV bytes relative to 16-bit storage, for memory estimates (approximate where not cited)."""

LLAMACPP_CACHE_FACTOR: dict[str, float] = {
    "f32": 2.0, "f16": 1.0, "bf16": 1.0, "q8_0": 34 / 64, "q4_0": 18 / 64, "q4_1": 20 / 64,
    "iq4_nl": 18 / 64, "q5_0": 22 / 64, "q5_1": 24 / 64,
}
"""llama.cpp cache types relative to f16 (GGML block sizes: 32 values + scale)."""


# --------------------------------------------------------------------------- quantization

QUANTIZATION_METHODS: dict[Version, frozenset[str]] = {
    (0, 21): frozenset({
        "awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8",
        "modelopt_mixed", "gguf", "gptq_marlin", "awq_marlin", "gptq", "humming",
        "compressed-tensors", "bitsandbytes", "experts_int8", "quark", "moe_wna16", "torchao",
        "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "cpu_awq", "online",
        "fp8_per_tensor", "fp8_per_block", "int8_per_channel_weight_only", "mxfp8",
    }),
}
"""``--quantization`` choices per checked minor version (vllm 0.21.0
``vllm/model_executor/layers/quantization/__init__.py``). Versions without a checked list
are not judged: methods come and go between releases."""


def quantization_methods(profile: Profile) -> tuple[Version, frozenset[str]] | None:
    """The checked method list for the profile's minor version, if there is one."""
    minor = profile.version[:2]
    methods = QUANTIZATION_METHODS.get(minor)
    return (minor, methods) if methods is not None else None


# ------------------------------------------------------------ models and speculative methods

@dataclass(frozen=True)
class FeatureFact:
    """The vLLM versions that have one engine feature (an architecture, a method)."""

    since: Version
    """First release that has it."""
    source: str
    """Where that comes from."""
    removed: Version | None = None
    """First release without it again (``None``: still there)."""


ARCHITECTURE_SINCE: dict[str, FeatureFact] = {
    "Qwen3ForCausalLM": FeatureFact(
        (0, 8, 4), "Qwen3 support from vLLM 0.8.4 (facebookresearch/matrix#20; axolotl PR "
        "2583 bumps to 0.8.5 for it)"),
    "Qwen3MoeForCausalLM": FeatureFact(
        (0, 8, 4), "Qwen3 support from vLLM 0.8.4 (facebookresearch/matrix#20)"),
    "Qwen3NextForCausalLM": FeatureFact(
        (0, 10, 2), "Qwen3-Next arrived with vLLM 0.10.2 (vllm PR 24526; vllm-ascend PR 2919 "
        "tested on v0.10.2)"),
    "Qwen3_5MoeForConditionalGeneration": FeatureFact(
        (0, 17), "vLLM 0.16.0 refuses it ('Model architectures "
        "[\'Qwen3_5MoeForConditionalGeneration\'] are not supported for now', "
        "runpod-workers/worker-vllm#279); Qwen3.5 support is in release v0.17.0"),
    "Qwen3_5ForConditionalGeneration": FeatureFact(
        (0, 17), "Qwen3.5 support is in vLLM release v0.17.0 (runpod-workers/worker-vllm#279)"),
}
"""``model.architecture`` values by the first vLLM release that serves them; an
architecture not listed is not judged."""

SPEC_METHOD_SINCE: dict[str, FeatureFact] = {
    "qwen3_next_mtp": FeatureFact(
        (0, 10, 2), "added with Qwen3-Next in vLLM 0.10.2 (vllm PR 24526)"),
    "mtp": FeatureFact(
        (0, 11), "the generic method, with every MTP name an alias of it, from 0.11.0 "
        "(vllm==0.11.0:vllm/config/speculative.py)"),
    "qwen3_5_mtp": FeatureFact(
        (0, 17), "alias added with Qwen3.5 in 0.17.0 (vllm==0.17.0:vllm/config/speculative.py)"),
    "medusa": FeatureFact(
        (), "removed from SpeculativeMethod in 0.33.0 (vllm==0.33.0:vllm/config/speculative.py)",
        removed=(0, 33)),
}
"""``vllm.speculative.method`` values by the vLLM releases that accept them; a method not
listed is not judged."""


# --------------------------------------------------------------------------- flags, env

@dataclass(frozen=True)
class FlagFact:
    """When a ``vllm serve`` flag first appears."""

    since: Version
    """First checked wheel that has the flag."""
    note: str
    """Evidence, and what to use before it."""


FLAG_SINCE: dict[str, FlagFact] = {
    "kv-cache-memory-bytes": FlagFact((0, 10, 2), "absent in 0.8.5, first seen in 0.10.2"),
    "attention-backend": FlagFact(
        (0, 13), "absent in 0.11.0, first seen in 0.13.0; older images use the "
        "VLLM_ATTENTION_BACKEND environment variable"),
    "optimization-level": FlagFact(
        (0, 13), "first seen in 0.13.0; in 0.11 and earlier -O means --compilation-config"),
    "default-chat-template-kwargs": FlagFact(
        (0, 15), "absent in 0.13.0, first seen in 0.15.0"),
    "language-model-only": FlagFact((0, 17), "absent in 0.15.0, first seen in 0.17.0"),
    "reasoning-config": FlagFact((0, 19), "absent in 0.17.0, first seen in 0.19.0"),
}
"""``vllm serve`` flags by first checked release (grep of ``vllm/engine/arg_utils.py`` and
``vllm/entrypoints/openai/cli_args.py`` in each wheel)."""

THINKING_BUDGET_SINCE: Version = (0, 19)
"""The per-request ``thinking_token_budget`` first appears in 0.19.0
(``vllm/sampling_params.py``)."""

FIELD_FLAGS: dict[str, str] = {
    "default_chat_template_kwargs": "default-chat-template-kwargs",
    "language_model_only": "language-model-only",
    "attention_backend": "attention-backend",
}
"""Typed profile fields whose flag is version-dependent."""


@dataclass(frozen=True)
class EnvFact:
    """An engine environment variable that exists only in some versions."""

    since: Version | None
    """First version that reads it (``None``: always did)."""
    removed: Version | None
    """First version that no longer reads it (``None``: still read)."""
    note: str
    """Evidence, and the replacement."""


ENV_FACTS: dict[str, EnvFact] = {
    "VLLM_ATTENTION_BACKEND": EnvFact(
        None, (0, 17), "gone from vllm/envs.py by 0.17.0; use vllm.attention_backend"),
    "VLLM_USE_V1": EnvFact(
        None, (0, 13), "removed from vllm/envs.py by 0.13.0; V1 is the only engine"),
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": EnvFact(
        (0, 19), None, "absent in 0.17.0, read from 0.19.0 (default 1 from 0.20.0)"),
}
"""Environment variables vLLM reads only in some versions (``vllm/envs.py`` per wheel)."""

SECRET_SOURCE = ("the stack secret servefleet:apiKey, passed through the node's 0600 env file "
                 "and never on the command line")

VLLM_MANAGED_FLAGS: dict[str, str] = {
    "model": "model.id", "served-model-name": "model.served_name",
    "revision": "model.revision", "host": "the node (servefleet binds 0.0.0.0)",
    "port": "the stack's port",
    "api-key": SECRET_SOURCE,
    "gpu-memory-utilization": "vllm.gpu_memory_utilization",
    "max-model-len": "vllm.max_model_len", "max-num-seqs": "vllm.max_num_seqs",
    "max-num-batched-tokens": "vllm.max_num_batched_tokens",
    "kv-cache-dtype": "vllm.kv_cache_dtype",
    "enable-chunked-prefill": "vllm.enable_chunked_prefill",
    "enable-prefix-caching": "vllm.enable_prefix_caching",
    "async-scheduling": "vllm.async_scheduling",
    "speculative-config": "vllm.speculative", "sc": "vllm.speculative",
    "tensor-parallel-size": "vllm.tensor_parallel_size", "tp": "vllm.tensor_parallel_size",
    "dtype": "vllm.dtype", "quantization": "vllm.quantization", "q": "vllm.quantization",
    "reasoning-parser": "vllm.reasoning_parser", "tool-call-parser": "vllm.tool_call_parser",
    "enable-auto-tool-choice": "vllm.enable_auto_tool_choice",
    "default-chat-template-kwargs": "vllm.default_chat_template_kwargs",
    "generation-config": "vllm.generation_config", "hf-overrides": "vllm.hf_overrides",
    "trust-remote-code": "vllm.trust_remote_code",
    "attention-backend": "vllm.attention_backend",
    "language-model-only": "vllm.language_model_only", "enforce-eager": "vllm.enforce_eager",
}
"""``vllm serve`` flags servefleet renders from typed fields (flag → the field to use).
``--no-<flag>`` twins (argparse ``BooleanOptionalAction``) count as the flag."""

LLAMACPP_MANAGED_FLAGS: dict[str, str] = {
    "model": "llamacpp.gguf", "alias": "model.served_name", "ctx-size": "llamacpp.ctx_size",
    "parallel": "llamacpp.parallel", "gpu-layers": "llamacpp.gpu_layers",
    "n-gpu-layers": "llamacpp.gpu_layers", "flash-attn": "llamacpp.flash_attn",
    "cache-type-k": "llamacpp.cache_type_k", "cache-type-v": "llamacpp.cache_type_v",
    "batch-size": "llamacpp.batch_size", "ubatch-size": "llamacpp.ubatch_size",
    "jinja": "llamacpp.jinja", "reasoning-budget": "llamacpp.reasoning_budget",
    "host": "llamacpp.host", "port": "the stack's port", "metrics": "llamacpp.metrics",
    "cache-prompt": "llamacpp.cache_prompt", "seed": "llamacpp.seed",
    "api-key": SECRET_SOURCE, "api-key-file": SECRET_SOURCE,
}
"""``llama-server`` flags servefleet renders from typed fields."""


def flag_name(arg: str) -> str:
    """The canonical flag of an extra argument: ``--max_num_seqs=8`` → ``max-num-seqs``,
    ``--no-enable-prefix-caching`` → ``enable-prefix-caching``,
    ``--speculative-config.method=mtp`` → ``speculative-config``.

    vLLM rewrites ``_`` to ``-`` before the first ``.`` (``FlexibleArgumentParser``)."""
    name = arg.partition("=")[0].lstrip("-")
    name = name.split(".", 1)[0].replace("_", "-")
    return name


def negated(name: str) -> str | None:
    """``no-enable-prefix-caching`` → ``enable-prefix-caching``; else ``None``."""
    return name[3:] if name.startswith("no-") else None


# ---------------------------------------------------------------- speculative decoding

ASYNC_INCOMPATIBLE_SPEC_METHODS = frozenset({"ngram", "suffix"})
"""Methods outside EAGLE/MTP/draft-model/ngram_gpu: explicit ``--async-scheduling`` raises
with them (vllm 0.21.0 ``vllm/config/vllm.py``)."""


def spec_on(profile: Profile) -> bool:
    """Speculative decoding configured."""
    return profile.speculative is not None


def mtp_on(profile: Profile) -> bool:
    """Multi-token prediction configured."""
    spec = profile.speculative
    return spec is not None and spec.is_mtp


def chunked_prefill_on(profile: Profile) -> bool:
    """Chunked prefill in effect: explicit, or the V1 default for generative models
    (vllm 0.21.0 ``arg_utils.py _set_default_chunked_prefill_and_prefix_caching_args``)."""
    return vllm_settings(profile).enable_chunked_prefill is not False


def has_capability(profile: Profile, capability: str, pr: int | None = None) -> bool:
    """Whether the image or a patch overlay provides ``capability`` (or carries PR ``pr``)."""
    if capability in profile.image.provides or profile.patch_provides(capability):
        return True
    return pr is not None and any(p.pr == pr for p in profile.patches)


# ------------------------------------------------------------------------------ hardware

ARCH_PLATFORM = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
"""Node CPU architecture (``uname -m``) → OCI image platform."""

FP8_MIN_SM: tuple[int, int] = (8, 9)
"""Native FP8 tensor cores: Ada (8.9), Hopper (9.0) and Blackwell."""
NVFP4_MIN_SM: tuple[int, int] = (10, 0)
"""NVFP4 (E2M1 with FP8 block scales) needs Blackwell: SM 10.x, 11.x or 12.x."""
SM100_MAJOR = 10
"""Data-centre Blackwell family (B200/GB200): the only one where FlashInfer reports
UNIFORM_BATCH CUDA-graph support (TRTLLM attention; vllm 0.21.0
``vllm/utils/flashinfer.py supports_trtllm_attention``)."""

FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                           "fp8_per_token_head"})
NVFP4_KV_DTYPES = frozenset({"nvfp4", "nvfp4_4over6", "nvfp4_ds_mla"})
FP8_QUANTIZATIONS = frozenset({"fp8", "fbgemm_fp8", "fp8_per_tensor", "fp8_per_block"})
NVFP4_QUANTIZATIONS = frozenset({"modelopt_fp4"})


def is_sm100(node: Node) -> bool:
    """Whether the node's GPU is in the SM100 family (compute capability 10.x)."""
    return node.primary_gpu.sm[0] == SM100_MAJOR


def attention_backend(profile: Profile, node: Node) -> tuple[str, str]:
    """The attention backend vLLM will most likely use on ``node``, and why.

    Explicit settings win. Otherwise vLLM 0.21's CUDA priority puts FLASHINFER first only on
    SM10x and FLASH_ATTN first elsewhere (``vllm/platforms/cuda.py``); FlashAttention 2 has
    no FP8 KV cache outside Hopper's FA3, so an FP8 KV cache elsewhere lands on FlashInfer
    (seen on GB10 with ``fp8_e4m3``: "Same FLASHINFER attention backend").
    """
    settings = vllm_settings(profile)
    if settings.attention_backend:
        return settings.attention_backend.upper(), "set in vllm.attention_backend"
    env = profile.env.get("VLLM_ATTENTION_BACKEND")
    if env:
        return env.upper(), "set in env.VLLM_ATTENTION_BACKEND"
    kv = settings.kv_cache_dtype
    if is_turboquant(kv):
        return "TURBOQUANT", f"kv_cache_dtype {kv} selects the TurboQuant backend"
    if is_sm100(node):
        return "FLASHINFER", "vLLM prefers FlashInfer on SM10x"
    if kv in FP8_KV_DTYPES and node.primary_gpu.sm[0] != 9:
        return "FLASHINFER", (f"assumed: FlashAttention has no {kv} KV cache on SM "
                              f"{node.primary_gpu.compute_capability}, so vLLM picks FlashInfer")
    return "FLASH_ATTN", "vLLM's default on CUDA outside SM10x"


def flashinfer_spec_downgrade(profile: Profile, node: Node) -> bool:
    """Speculative decoding with FlashInfer off SM100: vLLM turns FULL decode graphs into
    PIECEWISE (``resolve_cudagraph_mode_and_sizes``, vllm 0.21.0 compilation.py)."""
    # Speculative settings exist only in a vLLM profile.
    if not spec_on(profile) or vllm_settings(profile).enforce_eager:
        return False
    backend, _ = attention_backend(profile, node)
    return backend == "FLASHINFER" and not is_sm100(node)


WHY_CUDAGRAPH_SPEC = ("vLLM compilation.py resolve_cudagraph_mode_and_sizes: FlashInfer reports "
                      "UNIFORM_SINGLE_TOKEN_DECODE off SM100")

# --------------------------------------------------------------------------------- memory

RUNTIME_OVERHEAD_GIB = 3.0
"""Non-weight, non-KV memory of a vLLM engine per GPU: activation peak at
max_num_batched_tokens, non-torch allocations and the CUDA-graph estimate. Measured on an
RTX 5090: 0.95 × 32 GiB − 21.96 GiB weights − 5.48 GiB KV ≈ 3 GiB (NVFP4 model card)."""
LLAMACPP_OVERHEAD_GIB = 1.0
"""llama.cpp compute buffers; ``--fit`` keeps a 1024 MiB margin by default."""
TIGHT_HEADROOM = 0.10
"""Less than this share of an engine's budget left after weights, overhead and the
minimal KV pool is "tight"."""
UMA_OS_RESERVE_GIB = 8.0
"""Memory a unified-memory node keeps for the OS, page cache and container runtime."""
UMA_MAX_UTILIZATION_SUM = 0.9
"""Above this summed utilization a unified-memory node has too little left for the OS:
vLLM measures free memory there from the host (``psutil`` available memory,
vllm ``utils/mem_utils.py``) and refuses to start when it is short."""
MTP_WEIGHTS_GIB = 0.79
"""Extra weights MTP loads for Qwen3.6-35B-A3B-FP8 (seed 001: 35.02 GiB vs 34.23 GiB)."""
MTP_KV_SHRINK = 0.10
"""MTP shrinks the KV pool by about this share (GB10: 360k → 323k tokens)."""
TIGHT_KV_SHARE = 0.25
"""A KV pool under this share of the engine's budget is tight for turning MTP on."""
GIB = 1024**3


def weights_gib(profile: Profile, gpus: int | None) -> float:
    """Weights per GPU, with MTP heads when MTP is on; ``gpus``: the GPUs the engine splits
    them over (its engine's ``gpu_count``; ``None``: one). The caller asks the engine: the
    engines' modules read these facts, so the facts never ask the registry."""
    weights = profile.model.weights_gib or 0.0
    spec = profile.speculative
    if spec is not None and spec.is_mtp:
        weights += MTP_WEIGHTS_GIB
    return weights / (gpus or 1)

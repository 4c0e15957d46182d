"""Resolving ``vllm serve`` arguments into the engine's effective settings.

Mirrors the decisions vLLM makes between parsing and loading: defaults that depend on
the device, speculative-decoding method aliases, the attention backend, the
CUDA-graph mode and its downgrades. A rejection here is raised as ``EngineError``
carrying the exception vLLM raises, so the caller can print it the way vLLM does.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from .catalog import ModelSpec, lookup
from .node import Node
from .vllm_cli import quantization_methods
from .vllm_versions import VersionTuple

MTP_ALIASES = (
    "deepseek_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "ernie_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "qwen3_next_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "hy_v3_mtp",
    "gemma4_mtp",
)
# Methods whose drafter runs on the GPU, so async scheduling stays on.
ASYNC_OK_METHODS = ("eagle", "eagle3", "mtp", "draft_model", "ngram_gpu", "dflash")
NO_MODEL_METHODS = ("ngram", "ngram_gpu", "suffix", "extract_hidden_states", "mtp")

VALID_BACKENDS = (
    "FLASH_ATTN",
    "FLASH_ATTN_DIFFKV",
    "TRITON_ATTN",
    "ROCM_ATTN",
    "ROCM_AITER_MLA",
    "ROCM_AITER_TRITON_MLA",
    "ROCM_AITER_FA",
    "ROCM_AITER_MLA_SPARSE",
    "XPU_MLA_SPARSE",
    "TORCH_SDPA",
    "FLASHINFER",
    "FLASHINFER_MLA",
    "TOKENSPEED_MLA",
    "FLASHINFER_MLA_SPARSE",
    "TRITON_MLA",
    "CUTLASS_MLA",
    "FLASHMLA",
    "FLASHMLA_SPARSE",
    "FLASH_ATTN_MLA",
    "NO_ATTENTION",
    "FLEX_ATTENTION",
    "ROCM_AITER_UNIFIED_ATTN",
    "CPU_ATTN",
    "TURBOQUANT",
    "CUSTOM",
)
BACKEND_CLASSES = {
    "FLASH_ATTN": "FlashAttentionBackend",
    "FLASHINFER": "FlashInferBackend",
    "TRITON_ATTN": "TritonAttentionBackend",
    "FLEX_ATTENTION": "FlexAttentionBackend",
    "TURBOQUANT": "TurboQuantAttentionBackend",
}
# AttentionCGSupport levels.
ALWAYS, UNIFORM_BATCH, UNIFORM_SINGLE_TOKEN_DECODE, NEVER = 3, 2, 1, 0
CG_SUPPORT_NAMES = {3: "ALWAYS", 2: "UNIFORM_BATCH", 1: "UNIFORM_SINGLE_TOKEN_DECODE", 0: "NEVER"}


class EngineError(Exception):
    """A rejection as vLLM raises it: exception type, message, and where it surfaces."""

    def __init__(self, exc_type: str, message: str, where: str = "api", site: str = "") -> None:
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message
        self.where = where
        self.site = site


def _pydantic(model: str, message: str, input_repr: str) -> EngineError:
    text = (
        f"1 validation error for {model}\n"
        f"  Value error, {message} [type=value_error, input_value={input_repr}, "
        "input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"
    )
    return EngineError("pydantic_core._pydantic_core.ValidationError", text)


@dataclass
class Resolved:
    """The engine's effective settings."""

    version: VersionTuple
    version_str: str
    node: Node
    model_arg: str
    model: ModelSpec
    served_names: list[str]
    host: str | None
    port: int
    api_keys: list[str]
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    kv_cache_dtype: str
    kv_cache_memory_bytes: int | None
    tensor_parallel_size: int
    dtype: str
    quantization: str | None
    spec_method: str | None
    spec_method_given: str | None
    num_spec_tokens: int
    mtp: bool
    async_scheduling: bool
    attention_backend: str
    backend_selected_by_user: bool
    backend_candidates: list[str]
    flash_attn_version: int | None
    configured_cudagraph_mode: str
    cudagraph_mode: str
    cudagraph_downgrade: str | None
    compile_mode: int
    enforce_eager: bool
    language_model_only: bool
    mamba_ssm_bytes: int
    revision: str | None
    trust_remote_code: bool
    generation_config: str
    enable_auto_tool_choice: bool
    tool_call_parser: str | None
    reasoning_parser: str
    default_chat_template_kwargs: dict[str, Any]
    hf_overrides: Any
    disable_log_stats: bool
    warnings: list[tuple[str, str]] = field(default_factory=list)

    @property
    def served_name(self) -> str:
        """The first served name (``/v1/models`` id and metrics label)."""
        return self.served_names[0]


def _default_batch(node: Node, version: VersionTuple) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) defaults of ``vllm serve``.

    A GB10 gets the small tier in every release: before 0.33 because vLLM reads the total
    from NVML, which reports none for unified memory (the 0.13.0 and 0.25.1 sources; the real
    0.13.0 GB10 boot runs ``max_num_batched_tokens=2048``), from 0.33 by name."""
    mem = node.memory_gib
    is_a100 = "A100" in node.gpu_name
    if node.capability == (12, 1):
        return 256, 2048
    if version >= (0, 33, 0) and mem >= 160:
        return 1024, 16384
    if mem >= 70 and not is_a100:
        return 1024, 8192
    return 256, 2048


def _cg_support(backend: str, node: Node, fa_version: int | None) -> int:
    if backend == "FLASHINFER":
        return UNIFORM_BATCH if node.capability[0] == 10 else UNIFORM_SINGLE_TOKEN_DECODE
    if backend == "FLASH_ATTN":
        return ALWAYS if fa_version == 3 else UNIFORM_BATCH
    if backend == "FLEX_ATTENTION":
        return NEVER
    return UNIFORM_BATCH


def _auto_backends(kv_dtype: str, node: Node) -> list[str]:
    """Valid decoder backends in priority order (vLLM's CUDA platform rules)."""
    sm100 = node.capability[0] == 10
    order = (
        ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"]
        if sm100
        else ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT"]
    )
    if kv_dtype.startswith("turboquant_"):
        return ["TURBOQUANT"]
    valid = [b for b in order if b != "TURBOQUANT"]
    if kv_dtype not in ("auto", "bfloat16", "float16"):
        # FlashAttention takes a quantized KV cache only with FA3 (Hopper); Flex never.
        valid = [b for b in valid if b != "FLEX_ATTENTION"]
        if node.capability != (9, 0):
            valid = [b for b in valid if b != "FLASH_ATTN"]
    return valid


def resolve(
    args: argparse.Namespace,
    version: VersionTuple,
    version_str: str,
    node: Node,
    env: dict[str, str],
) -> Resolved:
    """Apply vLLM's defaults and checks; raise ``EngineError`` where vLLM would raise."""
    model_arg: str = args.model
    spec = lookup(model_arg)
    warnings: list[tuple[str, str]] = []
    input_repr = f"ArgsKwargs((), {{'model': {model_arg!r}, ...}})"

    quant = args.quantization
    if quant is not None:
        methods = quantization_methods(version)
        if quant not in methods:
            raise _pydantic(
                "ModelConfig",
                f"Unknown quantization method: {quant}. Must be one of {methods}.",
                input_repr,
            )
        if spec.quantization and quant != spec.quantization and not quant.endswith("_marlin"):
            raise _pydantic(
                "ModelConfig",
                f"Quantization method specified in the model config ({spec.quantization}) does "
                f"not match the quantization method specified in the `quantization` argument "
                f"({quant}).",
                input_repr,
            )
    quant = quant or spec.quantization

    dtype = args.dtype
    if dtype in ("half", "float16") and spec.dtype == "bfloat16":
        warnings.append(("model_cast", "Casting torch.bfloat16 to torch.float16."))
        dtype = "float16"
    elif dtype in ("auto",):
        dtype = spec.dtype

    native = spec.max_position_embeddings
    max_model_len = args.max_model_len
    if max_model_len is None:
        max_model_len = native
    elif max_model_len == -1:
        max_model_len = native  # refined after profiling; the stand-in keeps the native length
    elif max_model_len > native:
        msg = (
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={native} or model_max_length=None in "
            "model's config.json)."
        )
        warning = (
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
            "relative position encoding (RoPE), positions exceeding derived_max_model_len lead "
            "to nan. If the model uses absolute position encoding, positions exceeding "
            "derived_max_model_len will cause a CUDA array out-of-bounds error."
        )
        if env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").lower() in ("1", "true"):
            warnings.append(("model_long", f"{msg} {warning}"))
        else:
            raise _pydantic(
                "ModelConfig",
                f"{msg} To allow overriding this maximum, set the env "
                f"var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {warning}",
                input_repr,
            )

    world = int(args.tensor_parallel_size) * int(getattr(args, "pipeline_parallel_size", 1) or 1)
    # Across nodes (--nnodes) each node holds its share of the world.
    world //= max(1, int(getattr(args, "nnodes", 1) or 1))
    gpus = int(env.get("STANDIN_GPU_COUNT", "") or 1)
    if world > gpus:
        raise _pydantic(
            "ParallelConfig",
            f"World size ({world}) is larger than the number of available GPUs ({gpus}) in this "
            "node. If this is intentional and you are using:\n- ray, set "
            "'--distributed-executor-backend ray'.\n- multiprocessing, set '--nnodes' "
            "appropriately.",
            f"ArgsKwargs((), {{'tensor_parallel_size': {args.tensor_parallel_size}, ...}})",
        )

    kv_dtype = args.kv_cache_dtype
    if kv_dtype.startswith("turboquant_") and spec.is_hybrid and version < (0, 21, 0):
        raise EngineError(
            "NotImplementedError",
            "TurboQuant KV cache is not supported for hybrid (attention + Mamba) models. "
            "Boundary layer protection requires uniform attention layers.",
        )

    # Speculative decoding.
    spec_cfg = args.speculative_config
    spec_method = None
    spec_given = None
    num_spec = 0
    if spec_cfg is not None:
        if not isinstance(spec_cfg, dict):
            raise _pydantic(
                "SpeculativeConfig", "Input should be a valid dictionary", repr(spec_cfg)
            )
        spec_given = spec_cfg.get("method")
        spec_method = spec_given
        num_spec = int(spec_cfg.get("num_speculative_tokens") or 0)
        if spec_method in MTP_ALIASES:
            warnings.append(
                ("spec_deprecated", f"method `{spec_method}` is deprecated and replaced with mtp.")
            )
            spec_method = "mtp"
        if spec_method is None and spec_cfg.get("model"):
            spec_method = "draft_model"
        if num_spec and spec_method not in NO_MODEL_METHODS and not spec_cfg.get("model"):
            raise _pydantic(
                "SpeculativeConfig",
                "num_speculative_tokens was provided but without speculative model.",
                f"ArgsKwargs((), {spec_cfg!r})",
            )
        if spec_method == "mtp" and num_spec > 1:
            warnings.append(
                (
                    "spec_warn",
                    "Enabling num_speculative_tokens > 1 will run multiple times of "
                    "forward on same MTP layer,which may result in lower acceptance rate",
                )
            )
    mtp = spec_method == "mtp" and spec.mtp_layers > 0

    # Scheduler defaults.
    seqs_default, tokens_default = _default_batch(node, version)
    user_seqs = args.max_num_seqs is not None
    user_tokens = args.max_num_batched_tokens is not None
    max_num_seqs = args.max_num_seqs if user_seqs else seqs_default
    mnbt = args.max_num_batched_tokens if user_tokens else tokens_default
    perf = getattr(args, "performance_mode", "balanced")
    if perf == "throughput":
        max_num_seqs = max_num_seqs if user_seqs else max_num_seqs * 2
        mnbt = mnbt if user_tokens else mnbt * 2
    chunked = args.enable_chunked_prefill if args.enable_chunked_prefill is not None else True
    if not user_tokens:
        if not chunked:
            mnbt = max(mnbt, max_model_len)
        mnbt = min(mnbt, max_num_seqs * max_model_len)
    if not user_seqs:
        max_num_seqs = min(max_num_seqs, mnbt)
    if args.enable_prefix_caching is not None:
        prefix = bool(args.enable_prefix_caching)
    else:
        prefix = not spec.is_hybrid or version >= (0, 26, 0)

    # Asynchronous scheduling (automatic from 0.15).
    async_arg = getattr(args, "async_scheduling", None)
    if async_arg is True and spec_method in ("ngram", "suffix"):
        raise _pydantic(
            "VllmConfig",
            f"Currently, async scheduling is only supported with EAGLE/MTP"
            f" kind of speculative decoding, but got {spec_method}.",
            input_repr,
        )
    if async_arg is None:
        async_sched = version >= (0, 15, 0) and (
            spec_method is None or spec_method in ASYNC_OK_METHODS
        )
    else:
        async_sched = bool(async_arg)

    # Attention backend.
    fa_version: int | None = None
    user_backend = args.attention_backend
    if user_backend is not None and user_backend.lower() != "auto":
        name = user_backend.upper()
        if name not in VALID_BACKENDS:
            raise _pydantic(
                "AttentionConfig",
                f"Unknown attention backend: '{name}'. Valid "
                f"options are: {', '.join(VALID_BACKENDS)}",
                f"ArgsKwargs((), {{'backend': {user_backend!r}}})",
            )
        backend, by_user, candidates = name, True, [name]
    else:
        candidates = _auto_backends(kv_dtype, node)
        backend, by_user = candidates[0], False
    if backend == "FLASH_ATTN":
        fa_version = 3 if node.capability == (9, 0) and not kv_dtype.startswith("turboquant") else 2

    # CUDA graphs and compilation.
    cc = args.compilation_config if isinstance(args.compilation_config, dict) else {}
    opt_level = str(getattr(args, "optimization_level", 2))
    eager = bool(args.enforce_eager) or opt_level == "0"
    mode = cc.get("cudagraph_mode")
    compile_mode = int(cc.get("mode", 3)) if str(cc.get("mode", 3)).isdigit() else 3
    if eager:
        configured = "NONE"
        compile_mode = 0
    elif isinstance(mode, str) and mode.upper() in (
        "NONE",
        "PIECEWISE",
        "FULL",
        "FULL_DECODE_ONLY",
        "FULL_AND_PIECEWISE",
    ):
        configured = mode.upper()
    elif opt_level == "1":
        configured = "PIECEWISE"
    else:
        configured = "FULL_AND_PIECEWISE"
    final = configured
    downgrade: str | None = None
    support = min(
        _cg_support(backend, node, fa_version), UNIFORM_BATCH if spec.is_hybrid else ALWAYS
    )
    backend_cls = BACKEND_CLASSES.get(backend, f"{backend.title().replace('_', '')}Backend")
    if final in ("FULL_AND_PIECEWISE", "FULL") and support == NEVER:
        downgrade = (
            f"CUDAGraphMode.{final} is not supported with {backend_cls} backend (support: "
            f"AttentionCGSupport.NEVER); setting cudagraph_mode=PIECEWISE because "
            "attention is compiled piecewise"
        )
        final = "PIECEWISE"
    elif (
        final in ("FULL_AND_PIECEWISE", "FULL", "FULL_DECODE_ONLY")
        and num_spec > 0
        and support < UNIFORM_BATCH
    ):
        downgrade = (
            f"CUDAGraphMode.{final} is not supported with spec-decode for attention "
            f"backend {backend_cls} (support: AttentionCGSupport."
            f"{CG_SUPPORT_NAMES[support]}); setting cudagraph_mode=PIECEWISE"
        )
        final = "PIECEWISE"

    mamba_bytes = 4
    if args.mamba_ssm_cache_dtype in ("float16", "bfloat16"):
        mamba_bytes = 2

    served = list(args.served_model_name) if args.served_model_name else [model_arg]
    api_keys = list(args.api_key) if args.api_key else []
    if not api_keys and env.get("VLLM_API_KEY"):
        api_keys = [env["VLLM_API_KEY"]]
    chat_kwargs = args.default_chat_template_kwargs or {}
    return Resolved(
        version=version,
        version_str=version_str,
        node=node,
        model_arg=model_arg,
        model=spec,
        served_names=served,
        host=args.host,
        port=args.port,
        api_keys=api_keys,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=prefix,
        kv_cache_dtype=kv_dtype,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        tensor_parallel_size=args.tensor_parallel_size,
        dtype=dtype,
        quantization=quant,
        spec_method=spec_method,
        spec_method_given=spec_given,
        num_spec_tokens=num_spec,
        mtp=mtp,
        async_scheduling=async_sched,
        attention_backend=backend,
        backend_selected_by_user=by_user,
        backend_candidates=candidates,
        flash_attn_version=fa_version,
        configured_cudagraph_mode=configured,
        cudagraph_mode=final,
        cudagraph_downgrade=downgrade,
        compile_mode=compile_mode,
        enforce_eager=eager,
        language_model_only=bool(args.language_model_only),
        mamba_ssm_bytes=mamba_bytes,
        revision=args.revision,
        trust_remote_code=bool(args.trust_remote_code),
        generation_config=args.generation_config,
        enable_auto_tool_choice=bool(args.enable_auto_tool_choice),
        tool_call_parser=args.tool_call_parser,
        reasoning_parser=args.reasoning_parser or "",
        default_chat_template_kwargs=chat_kwargs if isinstance(chat_kwargs, dict) else {},
        hf_overrides=args.hf_overrides,
        disable_log_stats=bool(getattr(args, "disable_log_stats", False)),
        warnings=warnings,
    )


def placeholder_vllm_dir() -> str | None:
    """Where the installed (placeholder) vllm package lives, without importing it."""
    import importlib.util

    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        return None
    return next(iter(found.submodule_search_locations))


def installed_vllm_version() -> str | None:
    """``vllm.__version__`` of the installed package (read from its ``__init__.py``)."""
    import re

    where = placeholder_vllm_dir()
    if where is None:
        return None
    try:
        with open(os.path.join(where, "__init__.py"), encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    match = re.search(r"__version__\s*=\s*[\"']([^\"']+)[\"']", text)
    return match.group(1) if match else None


def tq_workspace_reserved() -> bool:
    """The installed ``turboquant_attn.py`` reserves the workspace before the lock.

    That is the code PR #40798 adds (``TurboQuantMetadataBuilder._reserve_workspace``
    with the continuation-prefill reservation); vLLM 0.25+ ships it too.
    """
    where = placeholder_vllm_dir()
    if where is None:
        return False
    path = os.path.join(where, "v1", "attention", "backends", "turboquant_attn.py")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return False
    return "def _reserve_workspace(self)" in text and "reserve_continuation_prefill" in text


def tq_continuation_call_line() -> int | None:
    """Line of the workspace request in ``_continuation_prefill`` of the installed file."""
    where = placeholder_vllm_dir()
    if where is None:
        return None
    path = os.path.join(where, "v1", "attention", "backends", "turboquant_attn.py")
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except OSError:
        return None
    inside = False
    for number, line in enumerate(lines, start=1):
        if line.strip().startswith("def _continuation_prefill"):
            inside = True
        elif inside and line.strip().startswith("def "):
            return None
        elif inside and "current_workspace_manager().get_simultaneous(" in line:
            return number
    return None

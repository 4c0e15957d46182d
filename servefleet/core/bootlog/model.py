"""What a boot log proves: the ``logs parse`` contract and the facts health checks use.

:class:`BootFacts` holds the contract of ``servefleet logs parse --json`` (see DESIGN.md)
as typed fields, plus per-engine extras and, for every fact, the log lines that prove it.
:meth:`BootFacts.to_json_dict` gives the contract keys exactly, with everything else under
``extra``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Engine = Literal["vllm", "llama.cpp", "sglang"]
Outcome = Literal["ready", "failed", "incomplete"]

#: The keys of ``logs parse --json``, in the order they are printed.
CONTRACT_KEYS: tuple[str, ...] = (
    "engine", "engine_version", "outcome", "failure_reason", "kv_cache_tokens",
    "max_concurrency", "max_concurrency_at_tokens", "cudagraph_mode", "attention_backend",
    "model_load_gib", "weights_load_seconds", "architecture", "spec_decode",
    "kv_cache_mib", "n_ctx", "n_parallel", "gpu_layers_offloaded", "device_name",
    "flash_attn",
)


class FailureClass(StrEnum):
    """Why a boot failed, as a small closed set (most specific first in :data:`PRIORITY`)."""

    TURBOQUANT_CONTINUATION_PREFILL_ASSERTION = "turboquant_continuation_prefill_assertion"
    """TurboQuant's locked workspace is too small for ``_continuation_prefill``
    (vLLM issues #41565/#41726; fixed by PR #40798)."""
    MAX_MODEL_LEN_EXCEEDS_KV_CACHE = "max_model_len_exceeds_kv_cache"
    """One request of ``max_model_len`` tokens does not fit in the KV cache."""
    KV_CACHE_OOM = "kv_cache_oom"
    """No memory left for the KV cache (including an out-of-memory error while it is
    allocated)."""
    CUDAGRAPH_CAPTURE_FAILED = "cudagraph_capture_failed"
    """The engine died while capturing CUDA graphs."""
    INVALID_ARGUMENTS = "invalid_arguments"
    """The engine refused its command line before starting (argparse's ``PROG: error:
    unrecognized arguments`` / ``invalid choice``, exit 2; llama.cpp's ``error: invalid
    argument``)."""
    MODEL_DOWNLOAD_OR_AUTH = "model_download_or_auth"
    """The model could not be fetched: 401/403, gated or missing repository, bad id."""
    UNSUPPORTED_QUANTIZATION_OR_DTYPE = "unsupported_quantization_or_dtype"
    """The quantization method or dtype is unknown or not supported on this GPU."""
    ATTENTION_BACKEND_UNSUPPORTED = "attention_backend_unsupported"
    """The requested attention backend cannot serve this configuration."""
    CUDA_OOM = "cuda_oom"
    """A device out-of-memory error outside KV-cache allocation."""
    GPU_RUNTIME_ERROR = "gpu_runtime_error"
    """A CUDA/ROCm runtime error (invalid kernel image, illegal address, hardware fault)."""
    MODEL_LOAD_FAILED = "model_load_failed"
    """The weights file could not be read (llama.cpp: bad GGUF, missing tensor)."""
    OTHER = "other"
    """A fatal error that is none of the above; ``failure_reason`` quotes it."""
    ENGINE_CORE_DIED = "engine_core_died"
    """The engine process died and the log names no more specific cause."""


#: Rank of each class when several appear in one failure: the lowest wins, so the root
#: cause beats the follow-up "Engine core initialization failed".
PRIORITY: dict[FailureClass, int] = {cls: rank for rank, cls in enumerate(FailureClass)}


class Evidence(BaseModel):
    """One log line that proves a fact."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    line: int
    """1-based physical line number in the log (lines counted by newline)."""
    text: str
    """The line without ANSI codes and docker prefixes; long lines are cut around the
    proving part and marked with ``…``."""


class SpecDecodeMetrics(BaseModel):
    """Acceptance figures summed over vLLM's periodic ``SpecDecoding metrics`` lines."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lines: int
    """How many metrics lines the log holds."""
    mean_acceptance_length_first: float | None
    """Mean acceptance length of the first line (includes the bonus token)."""
    mean_acceptance_length_last: float | None
    """Mean acceptance length of the last line."""
    accepted_tokens: int
    """Accepted draft tokens, summed over all lines."""
    drafted_tokens: int
    """Drafted tokens, summed over all lines."""
    acceptance_rate: float | None
    """accepted_tokens / drafted_tokens, rounded to 4 places; None before any draft."""
    per_position_acceptance_last: tuple[float, ...]
    """Per-position acceptance rates of the last line that states them."""


class VllmExtra(BaseModel):
    """vLLM facts beyond the contract."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine_generation: Literal["v0", "v1"] | None
    """``v0`` for the old LLMEngine (0.5.x; KV capacity in blocks), ``v1`` otherwise."""
    available_kv_cache_gib: float | None
    """``Available KV cache memory: X GiB`` of the first worker; negative before a failure."""
    gpu_blocks: int | None
    """V0 ``# GPU blocks: N``."""
    cpu_blocks: int | None
    """V0 ``# CPU blocks: N``."""
    kv_cache_device: str | None
    """Device named in front of ``KV cache size`` (``GPU``; 0.31+ may name others)."""
    kv_cache_tokens_basis: Literal["blocks", "max_concurrency"] | None
    """How ``kv_cache_tokens`` was computed: from free blocks (up to 0.20) or as
    max_concurrency × max_model_len (0.21+); None when the version does not tell."""
    max_model_len: int | None
    """``Using max model len N``."""
    graph_capture_seconds: int | None
    """``Graph capturing finished in N secs``."""
    graph_capture_gib: float | None
    """Memory the capture took (can be negative: real vLLM output)."""
    init_engine_seconds: float | None
    """``init engine (profile, create kv cache, warmup model) took X``."""
    compilation_seconds: float | None
    """The ``(compilation: X s)`` part of the init-engine line (0.20+)."""
    engine_init_completed: bool | None
    """Whether the init-engine line was printed; None for V0, which never prints it."""
    cudagraph_mode_source: Literal["config", "downgrade", "eager", "capture_progress"] | None
    """Which statement set ``cudagraph_mode``."""
    moe_default_config_warning: bool
    """``Using default MoE config. Performance might be sub-optimal!`` was printed."""
    moe_config_device_name: str | None
    """``device_name=`` of the missing tuned MoE config file (e.g. ``NVIDIA_GB10``)."""
    async_scheduling: bool | None
    """``Asynchronous scheduling is enabled/disabled``."""
    mtp_detected: bool
    """``Detected MTP model`` (the drafter shares the target's weights)."""
    spec_decode_method: str | None
    """``method`` of the speculative config (``mtp``, ``dflash``, ``eagle3``...)."""
    draft_architecture: str | None
    """The drafter's ``Resolved architecture``."""
    drafter_weights_load_seconds: float | None
    """``Loading weights took`` of the drafter."""
    mean_acceptance_length_first: float | None
    """Mean acceptance length of the first ``SpecDecoding metrics`` line."""
    spec_decode_metrics: SpecDecodeMetrics | None
    """All ``SpecDecoding metrics`` lines summed up."""


class SglangExtra(BaseModel):
    """SGLang facts beyond the contract."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kv_cache_allocated_tokens: tuple[int, ...] | None
    """``#tokens`` of each ``KV Cache is allocated`` line (one per pool) of the first rank."""
    kv_cache_dtype: str | None
    """KV-cache dtype as SGLang prints it (``torch.float8_e4m3fn``)."""
    context_len: int | None
    """``context_len=`` of the final capacity line."""
    max_running_requests: int | None
    """``max_running_requests=`` of the final capacity line."""
    weights_mem_gb: float | None
    """``mem usage=`` of the first ``Load weight end`` line (GB as SGLang prints)."""
    cuda_graph_captured: bool | None
    """A CUDA-graph capture finished; False when disabled in server_args or when a capture
    began and the log ends (or the server dies) before it finished."""
    cuda_graph_capture_seconds: float | None
    """Elapsed time of the first finished capture."""
    spec_decode_algorithm: str | None
    """``speculative_algorithm`` of server_args (``DFLASH``, ``EAGLE``...)."""
    draft_architecture: str | None
    """``type=`` of the second ``Load weight end`` line when speculative decoding is on."""


class LlamaCppExtra(BaseModel):
    """llama.cpp (llama-server) facts beyond the contract."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    build: str | None
    """Build as printed: ``b8680-15f786e65`` (build_info) or ``8179 (ecbcb7ea9)``."""
    kv_cache_mib_parts: tuple[float, ...] | None
    """Each ``llama_kv_cache: size = X MiB`` (two for iSWA models); their sum is
    ``kv_cache_mib``."""
    n_ctx_seq: int | None
    """Context per sequence/slot."""
    flash_attn_setting: str | None
    """Flash attention as configured, with the auto decision: ``auto -> enabled``."""
    recurrent_state_mib: float | None
    """``llama_memory_recurrent: size = X MiB`` (hybrid models; not part of the KV cache)."""
    model_loaded: bool
    """``model loaded`` was printed."""


class BootFacts(BaseModel):
    """Everything a boot log states about a deployment (null = the log does not say)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Engine | None
    """Engine that wrote the log (detected from the content unless forced)."""
    engine_version: str | None
    """Version as logged (vLLM ``0.20.0``, SGLang ``0.5.11+05fb6a52``, llama.cpp build)."""
    outcome: Outcome
    """``ready``, ``failed`` (fatal error or process death) or ``incomplete`` (neither)."""
    failure_reason: str | None
    """The line that proves the failure (the root-cause exception where there is one)."""
    kv_cache_tokens: int | None
    """vLLM ``KV cache size: N tokens``; SGLang ``max_total_num_tokens``."""
    max_concurrency: float | None
    """vLLM ``Maximum concurrency for ... : X x``."""
    max_concurrency_at_tokens: int | None
    """The tokens-per-request of that line (= max_model_len)."""
    cudagraph_mode: str | None
    """Effective vLLM CUDA-graph mode (last stated; an explicit downgrade wins)."""
    attention_backend: str | None
    """Decoder attention backend (vLLM upper case, SGLang as SGLang spells it)."""
    model_load_gib: float | None
    """vLLM ``Model loading took X GiB`` (V0: ``Loading model weights took X GB``)."""
    weights_load_seconds: float | None
    """First ``Loading weights took`` (vLLM) / ``Load weight end. elapsed`` (SGLang)."""
    architecture: str | None
    """Model class (``Resolved architecture``, SGLang ``type=``)."""
    spec_decode: bool | None
    """Speculative decoding configured."""
    kv_cache_mib: float | None
    """llama.cpp: sum of the KV-cache ``size =`` lines."""
    n_ctx: int | None
    """llama.cpp total context (``llama_context: n_ctx``)."""
    n_parallel: int | None
    """llama.cpp slots."""
    gpu_layers_offloaded: str | None
    """llama.cpp ``offloaded 41/41 layers to GPU`` as ``41/41``."""
    device_name: str | None
    """llama.cpp device the model was loaded on."""
    flash_attn: bool | None
    """llama.cpp flash attention in effect (auto resolved)."""
    failure_class: FailureClass | None
    """Class of the failure (None unless ``outcome`` is ``failed``)."""
    extra: VllmExtra | SglangExtra | LlamaCppExtra | None
    """Engine-specific facts."""
    evidence: dict[str, tuple[Evidence, ...]]
    """Per fact name (contract or extra key, plus ``outcome``), the lines that prove it."""

    def to_json_dict(self) -> dict[str, Any]:
        """The ``logs parse --json`` object: the contract keys, then ``extra``."""
        out: dict[str, Any] = {key: getattr(self, key) for key in CONTRACT_KEYS}
        extra: dict[str, Any] = {"failure_class": self.failure_class}
        if self.extra is not None:
            extra.update(self.extra.model_dump(mode="json"))
        extra["evidence"] = {
            name: [item.model_dump() for item in items] for name, items in self.evidence.items()
        }
        out["extra"] = extra
        return out

    def extra_dict(self) -> dict[str, Any]:
        """Extras as plain data (empty when the engine is unknown)."""
        return {} if self.extra is None else self.extra.model_dump(mode="json")

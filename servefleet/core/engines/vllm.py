"""vLLM (``vllm/vllm-openai``): its flags, defaults, health check and boot expectations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servefleet.core.bootlog.model import BootFacts
from servefleet.core.engines.base import (
    EngineExpectations,
    FlagField,
    FlagPairs,
    bool_flag,
    compact_json,
    flatten,
    opt,
)
from servefleet.core.engines.base import vllm_settings as vllm_settings
from servefleet.core.metrics import VLLM_KV_USAGE, parse_vllm_metrics
from servefleet.core.models import Node, Profile, VllmSettings
from servefleet.core.models.profile import CudaGraphMode

ALL_INTERFACES = "0.0.0.0"
"""Engines run with host networking; they listen on every interface of the node."""

MODEL_FLAG = "--model"
"""Key of the model in ``engine_flags`` for vLLM (rendered as the positional argument)."""

# ``--optimization-level`` / ``-O<n>`` (0.13+): O0 no graphs, O1 PIECEWISE, O2/O3 full.
OPTIMIZATION_LEVEL_MODES: dict[str, CudaGraphMode] = {
    "0": "NONE", "1": "PIECEWISE", "2": "FULL_AND_PIECEWISE", "3": "FULL_AND_PIECEWISE",
}
CUDAGRAPH_MODES: tuple[CudaGraphMode, ...] = (
    "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE",
)


FLAG_FIELDS: tuple[FlagField, ...] = (
    FlagField("--revision", "model.revision"),
    FlagField("--served-model-name", "model.served_name"),
    FlagField("--gpu-memory-utilization", "gpu_memory_utilization", "float"),
    FlagField("--max-model-len", "max_model_len", "int"),
    FlagField("--max-num-seqs", "max_num_seqs", "int"),
    FlagField("--max-num-batched-tokens", "max_num_batched_tokens", "int"),
    FlagField("--kv-cache-dtype", "kv_cache_dtype"),
    FlagField("--enable-chunked-prefill", "enable_chunked_prefill", "bool"),
    FlagField("--enable-prefix-caching", "enable_prefix_caching", "bool"),
    FlagField("--async-scheduling", "async_scheduling", "bool"),
    FlagField("--speculative-config", "speculative", "json"),
    FlagField("--tensor-parallel-size", "tensor_parallel_size", "int", aliases=("-tp",)),
    FlagField("--dtype", "dtype"),
    FlagField("--quantization", "quantization", aliases=("-q",)),
    FlagField("--attention-backend", "attention_backend"),
    FlagField("--reasoning-parser", "reasoning_parser"),
    FlagField("--tool-call-parser", "tool_call_parser"),
    FlagField("--enable-auto-tool-choice", "enable_auto_tool_choice", "switch"),
    FlagField("--default-chat-template-kwargs", "default_chat_template_kwargs", "json"),
    FlagField("--generation-config", "generation_config"),
    FlagField("--hf-overrides", "hf_overrides", "json"),
    FlagField("--trust-remote-code", "trust_remote_code", "switch"),
    FlagField("--language-model-only", "language_model_only", "switch"),
    FlagField("--enforce-eager", "enforce_eager", "switch"),
)
"""Every flag :func:`_pairs` renders from a field, in its order (``--host``/``--port`` come
from the deployment, the model from ``model.id`` as the positional argument)."""


def _pairs(profile: Profile, settings: VllmSettings, port: int | None) -> FlagPairs:
    pairs: FlagPairs = []
    opt(pairs, "--revision", profile.model.engine_revision)
    opt(pairs, "--served-model-name", profile.model.served_name)
    if port is not None:
        opt(pairs, "--host", ALL_INTERFACES)
        opt(pairs, "--port", port)
    opt(pairs, "--gpu-memory-utilization", settings.gpu_memory_utilization)
    opt(pairs, "--max-model-len", settings.max_model_len)
    opt(pairs, "--max-num-seqs", settings.max_num_seqs)
    opt(pairs, "--max-num-batched-tokens", settings.max_num_batched_tokens)
    opt(pairs, "--kv-cache-dtype", settings.kv_cache_dtype)
    bool_flag(pairs, "--enable-chunked-prefill", settings.enable_chunked_prefill)
    bool_flag(pairs, "--enable-prefix-caching", settings.enable_prefix_caching)
    bool_flag(pairs, "--async-scheduling", settings.async_scheduling)
    if settings.speculative is not None:
        spec = settings.speculative.model_dump(mode="json", exclude_none=True)
        # num_speculative_tokens is always present: vLLM needs it explicitly for MTP.
        opt(pairs, "--speculative-config", compact_json(spec))
    opt(pairs, "--tensor-parallel-size", settings.tensor_parallel_size)
    opt(pairs, "--dtype", settings.dtype)
    opt(pairs, "--quantization", settings.quantization)
    opt(pairs, "--attention-backend", settings.attention_backend)
    opt(pairs, "--reasoning-parser", settings.reasoning_parser)
    opt(pairs, "--tool-call-parser", settings.tool_call_parser)
    # Plain booleans default to off in vLLM; only the 'on' state is a flag worth rendering.
    if settings.enable_auto_tool_choice:
        pairs.append(("--enable-auto-tool-choice", None))
    if settings.default_chat_template_kwargs is not None:
        opt(pairs, "--default-chat-template-kwargs",
            compact_json(settings.default_chat_template_kwargs))
    opt(pairs, "--generation-config", settings.generation_config)
    if settings.hf_overrides is not None:
        opt(pairs, "--hf-overrides", compact_json(settings.hf_overrides))
    if settings.trust_remote_code:
        pairs.append(("--trust-remote-code", None))
    if settings.language_model_only:
        pairs.append(("--language-model-only", None))
    if settings.enforce_eager:
        pairs.append(("--enforce-eager", None))
    # thinking_token_budget is a per-request field clients send, not a server flag.
    return pairs


def mode_from_extra_args(profile: Profile) -> tuple[CudaGraphMode, str] | None:
    """A CUDA-graph mode forced through ``extra_args``: ``--compilation-config.cudagraph_mode=X``
    or ``--optimization-level=N``. The last one wins, as in argparse."""
    from servefleet.core.rules.facts import flag_name  # see VllmEngine.expectations

    found: tuple[CudaGraphMode, str] | None = None
    for arg in vllm_settings(profile).extra_args:
        flag, _, value = arg.partition("=")
        name = flag_name(arg)
        value = value.strip().strip("'\"").upper()
        if name == "compilation-config" and flag.endswith(".cudagraph_mode"):
            mode = next((m for m in CUDAGRAPH_MODES if m == value), None)
            if mode is not None:
                found = (mode, f"{arg} in vllm.extra_args")
        elif name == "optimization-level" and value in OPTIMIZATION_LEVEL_MODES:
            found = (OPTIMIZATION_LEVEL_MODES[value], f"{arg} in vllm.extra_args")
    return found


def without_speculation(profile: Profile) -> Profile:
    """``profile`` with speculative decoding off."""
    settings = vllm_settings(profile).model_copy(update={"speculative": None})
    return profile.model_copy(update={"vllm": settings})


@dataclass(frozen=True)
class VllmEngine:
    """vLLM: the only engine here that spans nodes and whose KV pool is planned."""

    name: str = "vllm"
    display_name: str = "vLLM"
    settings_field: str = "vllm"
    bootlog_reader: str = "vllm"
    spans_nodes: bool = True
    kv_planned: bool = True
    # vLLM serves a repository from the hub cache; its images have huggingface_hub.
    weights_kinds: tuple[str, ...] = ("snapshot",)
    metric_prefix: str = "vllm:"
    kv_usage_gauges: tuple[str, ...] = VLLM_KV_USAGE
    # Its image has `vllm bench serve`, the load generator `servefleet bench` runs.
    bench_in_engine: bool = True
    bench_api: tuple[str, str] = ("openai", "/v1/completions")
    version_path: str = "/version"
    version_key: str = "version"
    health_503: str = "vLLM answers 503 once its engine core is dead"
    flag_fields: tuple[FlagField, ...] = FLAG_FIELDS

    def settings(self, profile: Profile) -> VllmSettings | None:
        """The ``vllm:`` block."""
        return profile.vllm

    def extra_args(self, profile: Profile) -> list[str]:
        """``vllm.extra_args`` as written."""
        return list(vllm_settings(profile).extra_args)

    def flag_pairs(self, profile: Profile, port: int | None) -> FlagPairs:
        """vLLM's managed flags in their fixed order."""
        return _pairs(profile, vllm_settings(profile), port)

    def command(self, profile: Profile, pairs: FlagPairs, extra: list[str]) -> list[str]:
        """``[<model id>, --served-model-name, …]``: the model is positional; argparse takes
        ``--flag=value`` as written."""
        return [profile.model.id, *flatten(pairs), *extra]

    def positional_flags(self, profile: Profile) -> dict[str, str | None]:
        """The model id under ``--model``."""
        return {MODEL_FLAG: profile.model.id}

    def healthcheck(self, profile: Profile, port: int) -> list[str]:
        """python3 is in every vLLM image; curl is not guaranteed."""
        url = f"http://127.0.0.1:{port}/health"
        code = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"
        return ["CMD", "python3", "-c", code]

    def gpu_count(self, profile: Profile) -> int | None:
        """``tensor_parallel_size`` GPUs, else all."""
        return vllm_settings(profile).tensor_parallel_size or None

    def kv_cache_dtype(self, profile: Profile) -> str | None:
        """``vllm.kv_cache_dtype`` (``vllm:cache_config_info`` reports it)."""
        return vllm_settings(profile).kv_cache_dtype

    def quantization(self, profile: Profile) -> str | None:
        """``vllm.quantization`` (``--quantization``)."""
        return vllm_settings(profile).quantization

    def max_model_len(self, profile: Profile) -> int | None:
        """``vllm.max_model_len`` (``/v1/models`` reports it)."""
        return vllm_settings(profile).max_model_len

    def gpu_memory_utilization(self, profile: Profile) -> float | None:
        """Explicit, else the version's default (owned by :mod:`servefleet.core.rules.facts`)."""
        from servefleet.core.rules.facts import gpu_memory_utilization  # see expectations

        return gpu_memory_utilization(profile)

    def expectations(self, profile: Profile, node: Node) -> EngineExpectations:
        """Attention backend, CUDA-graph mode and, with speculative decoding, the smaller pool."""
        # Imported here: the rules render releases, and rendering asks this engine for its
        # flags, so the facts cannot be imported while the registry loads.
        from servefleet.core.project import profile_identity
        from servefleet.core.rules.facts import (
            MTP_KV_SHRINK,
            WHY_CUDAGRAPH_SPEC,
            attention_backend,
            default_cudagraph_mode,
            flashinfer_spec_downgrade,
            mtp_on,
        )

        notes: list[str] = []
        spec = profile.speculative
        backend, backend_reason = attention_backend(profile, node)
        notes.append(f"attention backend {backend}: {backend_reason}")
        derived = default_cudagraph_mode(profile)
        if derived is None:
            notes.append(f"vLLM {profile.engine_version} predates CUDA-graph modes (0.10); "
                         "the graph mode is not checked")
        else:
            notes.append(f"CUDA graphs start from {derived}, vLLM {profile.engine_version}'s "
                         "default (PIECEWISE in 0.10.x, FULL_AND_PIECEWISE from 0.11; "
                         "vllm/config/compilation.py)")
        mode = derived
        forced = mode_from_extra_args(profile)
        if forced is not None:
            mode = forced[0]
            notes.append(f"CUDA graphs forced to {mode} by {forced[1]}")
        if vllm_settings(profile).enforce_eager:
            mode = "NONE"
            notes.append("enforce_eager: no CUDA graphs, mode NONE")
        elif mode not in (None, "NONE", "PIECEWISE") and flashinfer_spec_downgrade(profile, node):
            assert spec is not None
            mode = "PIECEWISE"
            notes.append(
                f"speculative decoding ({spec.method}) on FlashInfer off SM100 (SM "
                f"{node.primary_gpu.compute_capability}): CUDA graphs fall back to PIECEWISE "
                f"({WHY_CUDAGRAPH_SPEC})")
        kv_smaller_than: str | None = None
        if spec is not None:
            kv_smaller_than = profile_identity(without_speculation(profile))
            extra = (f"MTP draft heads, padding layers, {mode} graphs" if mtp_on(profile)
                     else "draft state")
            notes.append(
                f"speculative decoding: the KV pool is expected smaller than the same profile "
                f"without it ({extra}; about {MTP_KV_SHRINK:.0%} on GB10: 360k → 323k tokens)")
        return EngineExpectations(cudagraph_mode=mode, attention_backend=backend,
                                  kv_smaller_than=kv_smaller_than, notes=tuple(notes))

    def nondeterminism(self, profile: Profile) -> str | None:
        """Speculative decoding accepts drafted tokens differently from run to run."""
        spec = profile.speculative
        if spec is None:
            return None
        return (f"not deterministic: speculative decoding ({spec.method}) accepts drafted "
                "tokens differently from run to run (vLLM + MTP: 4/12 tasks stable)")

    def instability(self, profile: Profile) -> str | None:
        """Speculative decoding accepts drafted tokens differently from run to run."""
        spec = profile.speculative
        if spec is None:
            return None
        kind = "MTP" if spec.is_mtp else spec.method
        return (f"speculative decoding ({kind}) is on: drafted tokens are accepted differently "
                "from run to run (vLLM + MTP: 4/12 tasks stable; stable with MTP off)")

    def kv_pool(self, facts: BootFacts) -> tuple[float, str] | None:
        """``GPU KV cache size: N tokens``."""
        return (float(facts.kv_cache_tokens), "tokens") if facts.kv_cache_tokens else None

    def metric_figures(self, text: str) -> dict[str, Any]:
        """From ``vllm:*``."""
        page = parse_vllm_metrics(text)
        return {"generation_tokens": page.generation_tokens, "prompt_tokens": page.prompt_tokens,
                "requests_running": page.requests_running,
                "requests_waiting": page.requests_waiting, "kv_usage": page.kv_cache_usage}


VLLM = VllmEngine()
"""The vLLM engine."""

"""llama.cpp's ``llama-server`` (``ghcr.io/ggml-org/llama.cpp``): flags and health check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servefleet.core.bootlog.model import BootFacts
from servefleet.core.engines.base import (
    EngineExpectations,
    FlagField,
    FlagPairs,
    bool_flag,
    extra_pairs,
    flatten,
    opt,
)
from servefleet.core.metrics import LLAMACPP_KV_USAGE, parse_llamacpp_metrics
from servefleet.core.models import LlamaCppSettings, Node, Profile


def llamacpp_settings(profile: Profile) -> LlamaCppSettings:
    """The ``llamacpp:`` block of a llama.cpp profile."""
    assert profile.llamacpp is not None, \
        f"profile {profile.name} runs {profile.engine}, not llama.cpp"
    return profile.llamacpp


FLAG_FIELDS: tuple[FlagField, ...] = (
    FlagField("-m", "gguf", aliases=("--model",), optional=False),
    FlagField("--alias", "model.served_name", aliases=("-a",)),
    FlagField("--host", "host", optional=False),
    FlagField("-c", "ctx_size", "int", aliases=("--ctx-size",)),
    FlagField("-np", "parallel", "int", aliases=("--parallel",)),
    FlagField("-ngl", "gpu_layers", "layers", aliases=("--gpu-layers", "--n-gpu-layers")),
    FlagField("-fa", "flash_attn", aliases=("--flash-attn",)),
    FlagField("-ctk", "cache_type_k", aliases=("--cache-type-k",)),
    FlagField("-ctv", "cache_type_v", aliases=("--cache-type-v",)),
    FlagField("-b", "batch_size", "int", aliases=("--batch-size",)),
    FlagField("-ub", "ubatch_size", "int", aliases=("--ubatch-size",)),
    FlagField("--jinja", "jinja", "bool"),
    FlagField("--reasoning-budget", "reasoning_budget", "int"),
    FlagField("--metrics", "metrics", "switch"),
    FlagField("-lv", "log_verbosity", "int", aliases=("--log-verbosity", "--verbosity")),
    FlagField("--cache-prompt", "cache_prompt", "bool"),
    FlagField("--seed", "seed", "int", aliases=("-s",)),
)
"""Every flag :func:`_pairs` renders from a field, in its order, with the long or short
spellings llama-server accepts for it (``--port`` comes from the deployment)."""


def _pairs(profile: Profile, settings: LlamaCppSettings, port: int | None) -> FlagPairs:
    pairs: FlagPairs = []
    opt(pairs, "-m", settings.gguf)
    opt(pairs, "--alias", profile.model.served_name)
    if port is not None:
        opt(pairs, "--host", settings.host)
        # Always explicit: newer builds default to 9931, older ones to 8080.
        opt(pairs, "--port", port)
    opt(pairs, "-c", settings.ctx_size)
    opt(pairs, "-np", settings.parallel)
    opt(pairs, "-ngl", settings.gpu_layers)
    opt(pairs, "-fa", settings.flash_attn)
    opt(pairs, "-ctk", settings.cache_type_k)
    opt(pairs, "-ctv", settings.cache_type_v)
    opt(pairs, "-b", settings.batch_size)
    opt(pairs, "-ub", settings.ubatch_size)
    bool_flag(pairs, "--jinja", settings.jinja)
    opt(pairs, "--reasoning-budget", settings.reasoning_budget)
    if settings.metrics:
        pairs.append(("--metrics", None))
    if settings.log_verbosity is not None:
        pairs.append(("-lv", str(settings.log_verbosity)))
    bool_flag(pairs, "--cache-prompt", settings.cache_prompt)
    opt(pairs, "--seed", settings.seed)
    return pairs


@dataclass(frozen=True)
class LlamaCppEngine:
    """llama.cpp: one node, no CUDA graphs or attention backend to expect, no KV planner."""

    name: str = "llama.cpp"
    display_name: str = "llama.cpp"
    settings_field: str = "llamacpp"
    bootlog_reader: str = "llama.cpp"
    spans_nodes: bool = False
    kv_planned: bool = False
    # No Python in llama.cpp's images: a GGUF file, fetched by curl.
    weights_kinds: tuple[str, ...] = ("file", "url")
    metric_prefix: str = "llamacpp:"
    kv_usage_gauges: tuple[str, ...] = LLAMACPP_KV_USAGE
    # Its image has no Python, so no `vllm bench serve`.
    bench_in_engine: bool = False
    # Its streamed /v1/completions puts `usage` into the chunk that finishes the choice,
    # which `vllm bench serve` reads as text only; /v1/chat/completions sends it apart, as
    # OpenAI does (seen on llama-server b11434).
    bench_api: tuple[str, str] = ("openai-chat", "/v1/chat/completions")
    version_path: str = "/props"
    version_key: str = "build_info"  # b8680-1a2b3c4
    flag_fields: tuple[FlagField, ...] = FLAG_FIELDS
    health_503: str = "still loading the model, or unavailable"

    def settings(self, profile: Profile) -> LlamaCppSettings | None:
        """The ``llamacpp:`` block."""
        return profile.llamacpp

    def extra_args(self, profile: Profile) -> list[str]:
        """``llamacpp.extra_args`` as written."""
        return list(llamacpp_settings(profile).extra_args)

    def flag_pairs(self, profile: Profile, port: int | None) -> FlagPairs:
        """llama-server's managed flags in their fixed order."""
        return _pairs(profile, llamacpp_settings(profile), port)

    def command(self, profile: Profile, pairs: FlagPairs, extra: list[str]) -> list[str]:
        """llama-server looks each argument up whole (``--threads=8`` is an invalid
        argument), so ``--flag=value`` from ``extra`` becomes two arguments."""
        return flatten([*pairs, *extra_pairs(extra)])

    def positional_flags(self, profile: Profile) -> dict[str, str | None]:
        """None: the GGUF is ``-m``."""
        return {}

    def healthcheck(self, profile: Profile, port: int) -> list[str]:
        """curl is in llama.cpp's images (python3 is not); asks the first listen address."""
        host = llamacpp_settings(profile).host.split(",")[0]
        if host in ("0.0.0.0", "::", "") or host.endswith(".sock"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return ["CMD", "curl", "-fsS", "-o", "/dev/null", f"http://{host}:{port}/health"]

    def gpu_count(self, profile: Profile) -> int | None:
        """All of the node's GPUs (layers are split with ``-ngl``)."""
        return None

    def kv_cache_dtype(self, profile: Profile) -> str | None:
        """Not checked: llama.cpp reports no KV dtype."""
        return None

    def quantization(self, profile: Profile) -> str | None:
        """None: the GGUF carries its own quantization."""
        return None

    def max_model_len(self, profile: Profile) -> int | None:
        """Not checked: ``/v1/models`` of llama-server states no context length."""
        return None

    def gpu_memory_utilization(self, profile: Profile) -> float | None:
        """Not a llama.cpp setting."""
        return None

    def expectations(self, profile: Profile, node: Node) -> EngineExpectations:
        """Nothing engine-specific: llama.cpp prints nothing about graphs or backends."""
        return EngineExpectations()

    def nondeterminism(self, profile: Profile) -> str | None:
        """Several slots or a reused prompt cache change outputs between identical requests."""
        settings = llamacpp_settings(profile)
        if settings.parallel != 1 or settings.cache_prompt is not False:
            return ("not deterministic: llama.cpp needs parallel 1 and cache_prompt false for "
                    "identical outputs (server README cache_prompt; PR #22224)")
        return None

    def instability(self, profile: Profile) -> str | None:
        """Several slots or the prompt cache change the batch, and so the float order."""
        settings = llamacpp_settings(profile)
        causes = []
        if settings.parallel != 1:
            causes.append(f"{settings.parallel or 'auto'} slots")
        if settings.cache_prompt is not False:
            causes.append("the prompt cache on")
        if not causes:
            return None
        return (f"llama.cpp with {' and '.join(causes)}: batch composition changes the "
                "floating-point order (server README cache_prompt; PR #22224); use "
                "parallel 1 and cache_prompt false")

    def kv_pool(self, facts: BootFacts) -> tuple[float, str] | None:
        """The KV buffer in MiB (logged at ``-lv 4``)."""
        return (facts.kv_cache_mib, "MiB") if facts.kv_cache_mib else None

    def metric_figures(self, text: str) -> dict[str, Any]:
        """From ``llamacpp:*`` (``--metrics``)."""
        page = parse_llamacpp_metrics(text)
        return {"generation_tokens": page.tokens_predicted, "prompt_tokens": page.prompt_tokens,
                "requests_running": page.requests_processing,
                "requests_waiting": page.requests_deferred, "kv_usage": page.kv_cache_usage}


LLAMACPP = LlamaCppEngine()
"""The llama.cpp engine."""

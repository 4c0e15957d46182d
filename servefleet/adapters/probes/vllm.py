"""vLLM's own probes: ``/version``, ``/metrics`` and the TurboQuant long prompt."""

from __future__ import annotations

import uuid

from servefleet.adapters.probes.client import EngineClient
from servefleet.adapters.probes.shared import _row, chat_payload, metrics_of
from servefleet.core.health_table import CheckRow, shown
from servefleet.core.metrics import parse_vllm_metrics
from servefleet.core.models import Profile
from servefleet.core.models.profile import version_tuple

LONG_PROMPT_TIMEOUT_SECONDS = 300.0
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
"""vLLM's default chunk size for the OpenAI server when the profile leaves it unset."""


def probe_version(client: EngineClient, engine_version: str) -> CheckRow:
    """``GET /version`` reports the profile's pinned engine version."""
    answer = client.get("/version")
    if answer.status != 200:
        return _row("GET /version", engine_version, answer.shown(), "fail", answer.shown())
    try:
        have = str(answer.json()["version"])
    except (ValueError, KeyError, TypeError):
        return _row("GET /version", engine_version, "no version in the answer", "fail",
                    answer.shown())
    if have == engine_version:
        return _row("GET /version", engine_version, have, "pass")
    same_release = version_tuple(have) == version_tuple(engine_version) != ()
    if same_release:
        # 0.21.0+cu130 and 0.21.0 are one release built differently.
        return _row("GET /version", engine_version, have, "pass",
                    f"{have} is release {engine_version} with a local build suffix")
    return _row("GET /version", engine_version, have, "fail",
                f"the image runs vLLM {have}, the profile pins {engine_version}: the image "
                "tag moved, or the profile's engine_version is wrong")


def probe_vllm_metrics(client: EngineClient, profile: Profile,
                       want_dtype: str | None = None) -> list[CheckRow]:
    """``GET /metrics``: KV usage, requests, the KV pool, spec-decode acceptance."""
    metrics = metrics_of(client.get("/metrics"), "200", parse_vllm_metrics)
    if isinstance(metrics, CheckRow):
        return [metrics]
    rows: list[CheckRow] = []
    usage = "-" if metrics.kv_cache_usage is None else f"{metrics.kv_cache_usage:.1%}"
    rows.append(_row("KV cache usage", "-", usage, "info"))
    rows.append(_row("requests running / waiting", "-",
                     f"{shown(metrics.requests_running)} / {shown(metrics.requests_waiting)}",
                     "info"))
    if metrics.kv_capacity_tokens is not None:
        rows.append(_row("KV blocks (cache_config_info)", "-",
                         f"{metrics.num_gpu_blocks:,} blocks x {metrics.block_size} = "
                         f"{metrics.kv_capacity_tokens:,} token slots", "info"))
    if metrics.cache_dtype is not None and want_dtype is not None:
        rows.append(_row("KV cache dtype", want_dtype, metrics.cache_dtype,
                         "pass" if metrics.cache_dtype == want_dtype else "fail",
                         f"vllm:cache_config_info cache_dtype={metrics.cache_dtype}"))
    spec = profile.speculative
    counters = metrics.spec_decode
    if spec is not None:
        if counters is None:
            rows.append(_row("speculative decoding", f"{spec.method} active",
                             "no spec-decode counters in /metrics", "fail",
                             "vLLM registers vllm:spec_decode_* only when speculative decoding "
                             "is configured: the engine runs without it"))
        else:
            rows.append(_row("speculative decoding", f"{spec.method} active",
                             counters.describe(), "pass"))
    elif counters is not None:
        rows.append(_row("speculative decoding", "off", f"on: {counters.describe()}", "warn",
                         "vllm:spec_decode_* counters are exposed although the profile has no "
                         "speculative config"))
    return rows


def long_prompt_tokens(profile: Profile) -> int | None:
    """Tokens of the continuation-prefill probe: more than one chunk
    (``max_num_batched_tokens``) and within ``max_model_len``; ``None`` when the profile
    does not use TurboQuant KV, or one chunk already holds the longest request."""
    settings = profile.vllm
    if settings is None or not (settings.kv_cache_dtype or "").startswith("turboquant"):
        return None
    chunk = settings.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    tokens = chunk + max(256, chunk // 4)
    if settings.max_model_len is not None:
        tokens = min(tokens, settings.max_model_len - 64)
    return tokens if tokens > chunk else None


def probe_long_prompt(client: EngineClient, profile: Profile) -> CheckRow | None:
    """TurboQuant KV: a prompt longer than one prefill chunk is answered. vLLM 0.21 locks
    TurboQuant's workspace after CUDA-graph capture, and the continuation prefill of such a
    prompt then asserts and kills the engine (issues #41565/#41726; PR #40798 fixes it)."""
    tokens = long_prompt_tokens(profile)
    if tokens is None:
        return None
    settings = profile.vllm
    assert settings is not None
    chunk = settings.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    # A fresh prefix each time, so the prefix cache cannot shorten the prefill.
    prompt = f"[{uuid.uuid4().hex}] Count the words: " + " ".join(["word"] * tokens)
    answer = client.post_json("/v1/chat/completions",
                              chat_payload(profile.model.served_name, prompt, 1),
                              LONG_PROMPT_TIMEOUT_SECONDS)
    fact = f"prompt > max_num_batched_tokens ({chunk:,})"
    expected = f"answered (~{tokens:,} prompt tokens)"
    if answer.status == 200:
        return _row(fact, expected, "answered", "pass")
    return _row(fact, expected, answer.shown(), "fail", answer.shown(),
                "a TurboQuant KV cache without the PR #40798 overlay fails the continuation "
                "prefill of prompts longer than one chunk (vLLM issues #41565/#41726)")


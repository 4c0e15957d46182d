"""HTTP probes of a running engine: does it serve what the profile says it should?

Every probe is one or a few short HTTP requests (stdlib ``urllib``, no proxies, short
timeouts) and returns :class:`~servefleet.core.health_table.CheckRow` rows. The endpoints
and metric names are those of the real engines (serving.md B and D.3):

vLLM
    ``GET /health`` (200; 503 once the engine core is dead), ``GET /v1/models`` (the served
    name with the profile's ``max_model_len``), ``GET /version`` (the profile's
    ``engine_version``), one short chat completion with thinking off that must return
    content, ``GET /metrics`` (KV-cache usage, running/waiting requests, the KV pool of
    ``vllm:cache_config_info``, spec-decode acceptance when speculative decoding is on), and
    for TurboQuant KV a prompt longer than ``max_num_batched_tokens``: the continuation
    prefill that crashes vLLM 0.21 without the PR #40798 overlay (issues #41565/#41726).
llama.cpp
    ``GET /health`` (``{"status":"ok"}``; 503 while loading), ``GET /v1/models`` (the
    alias), ``GET /props`` (``total_slots`` against ``parallel``, per-slot ``n_ctx`` against
    ``ctx_size``, ``build_info`` against ``engine_version``), ``GET /slots``, the chat
    completion, and ``GET /metrics`` (``llamacpp:*``) when the profile turns metrics on.

The opt-in determinism probe sends one prompt n times at temperature 0 with a fixed seed;
:func:`servefleet.core.determinism.judge_determinism` gives the verdict.

An API key (the profile's ``VLLM_API_KEY`` / ``LLAMA_API_KEY`` secret) goes only into the
``Authorization`` header; no probe puts a header, a key or a request body into a row.

**Layout.** :mod:`.client` sends the requests (:class:`EngineClient`), :mod:`.shared` holds
the probes both engines answer (``/health``, ``/v1/models``, chat, determinism),
:mod:`.vllm` and :mod:`.llamacpp` the engine-specific ones, :mod:`.engines` registers those
by engine name (the names of :data:`servefleet.core.engines.ENGINES`), and :mod:`.run` runs
them in order (:func:`run_probes`).
"""

from servefleet.adapters.probes.client import (
    API_KEY_SECRETS,
    GET_TIMEOUT_SECONDS,
    SHOWN_BODY,
    EngineClient,
    HttpAnswer,
    Send,
    urlopen,
)
from servefleet.adapters.probes.llamacpp import (
    BUILD_RE,
    probe_llamacpp_metrics,
    probe_props,
    probe_slots,
    props_facts,
)
from servefleet.adapters.probes.run import run_probes
from servefleet.adapters.probes.shared import (
    CHAT_MAX_TOKENS,
    CHAT_PROMPT,
    CHAT_TIMEOUT_SECONDS,
    DETERMINISM_MAX_TOKENS,
    DETERMINISM_PROMPT,
    DETERMINISM_RUNS,
    DETERMINISM_SEED,
    ProbeResults,
    chat_payload,
    determinism_outputs,
    probe_chat,
    probe_determinism,
    probe_health,
    probe_models,
)
from servefleet.adapters.probes.vllm import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    LONG_PROMPT_TIMEOUT_SECONDS,
    long_prompt_tokens,
    probe_long_prompt,
    probe_version,
    probe_vllm_metrics,
)

__all__ = [
    "API_KEY_SECRETS", "BUILD_RE", "CHAT_MAX_TOKENS", "CHAT_PROMPT", "CHAT_TIMEOUT_SECONDS",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS", "DETERMINISM_MAX_TOKENS", "DETERMINISM_PROMPT",
    "DETERMINISM_RUNS", "DETERMINISM_SEED", "GET_TIMEOUT_SECONDS", "LONG_PROMPT_TIMEOUT_SECONDS",
    "SHOWN_BODY", "EngineClient", "HttpAnswer", "ProbeResults", "Send", "chat_payload",
    "determinism_outputs", "long_prompt_tokens", "probe_chat", "probe_determinism",
    "probe_health", "probe_llamacpp_metrics", "probe_long_prompt", "probe_models",
    "probe_props", "probe_slots", "probe_version", "probe_vllm_metrics", "props_facts",
    "run_probes", "urlopen",
]

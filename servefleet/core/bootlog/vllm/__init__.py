"""vLLM boot-log rules: V0 (0.5.x) and V1 from 0.8 to 0.33.

Format history that matters here (reference/serving.md section C, FORMATS.md):

* ``GPU KV cache size: N tokens`` and ``Maximum concurrency for N tokens per request: Xx``
  are two lines up to 0.27, one line from 0.28, and from 0.31 the first word names the
  device (``"%s KV cache size: ..."``). From 0.21 the token figure is
  max_concurrency × max_model_len instead of a block count.
* ``Available KV cache memory`` is ``%.2f`` up to 0.13 and ``format_gib`` (``19.7``) later.
* ``Model loading took X GiB and Y seconds`` / ``... GiB memory and ...``; V0 prints
  ``Loading model weights took X GB`` and ``# GPU blocks: N, # CPU blocks: M``.
* ``init engine (...) took X seconds`` up to 0.19; ``took X s (compilation: Y s — ...)``
  (with an em dash) from 0.20.
* CUDA-graph mode: an int enum in the 0.10/0.11 config dump, ``<CUDAGraphMode.NAME: ...>``
  later; explicit downgrades (``setting cudagraph_mode=PIECEWISE``) override the config.

:data:`RULES` is the table; :mod:`~servefleet.core.bootlog.vllm.state` holds what the log has
shown, :mod:`~servefleet.core.bootlog.vllm.facts` and
:mod:`~servefleet.core.bootlog.vllm.lifecycle` the handlers.
"""

from __future__ import annotations

from servefleet.core.bootlog.python_errors import (
    PYTHON_ERROR_RULES,
    PYTHON_SERVER_RULES,
    exception_line,
)
from servefleet.core.bootlog.rules import ALWAYS, BOOT, DYING, Rule, number
from servefleet.core.bootlog.vllm.facts import (
    api_version,
    architecture,
    async_scheduling,
    backend,
    banner_version,
    blocks,
    capture_progress,
    capture_started,
    concurrency,
    container_version,
    cudagraph_mode,
    drafter,
    eager,
    engine_init,
    first_value,
    forced_backend,
    graph_capture,
    headless,
    init_engine,
    kv_size,
    moe,
    mtp,
    spec_config,
    spec_metrics,
    weights,
)
from servefleet.core.bootlog.vllm.lifecycle import (
    died,
    engine_core,
    fatal,
    ready,
    server,
    shutdown,
    signal,
    supported_tasks,
)
from servefleet.core.bootlog.vllm.state import VllmState

__all__ = ["RULES", "VllmState"]

_NUM = "[0-9][0-9,]*"
_VERSION = "([0-9][A-Za-z0-9.+_-]*)"

RULES: tuple[Rule, ...] = (
    Rule("server version ", (f"vLLM API server version {_VERSION}",), api_version),
    Rule("  version ", (f"  version {_VERSION}",), banner_version),
    Rule("LLM engine (v", (f"Initializing an? (V[01] )?LLM engine \\(v{_VERSION}\\)",),
         engine_init),
    Rule("vLLM Version ", (f"vLLM Version {_VERSION}",), container_version),
    Rule("KV cache size: ", (f"([A-Za-z][A-Za-z0-9 +]*) KV cache size: ({_NUM}) tokens",),
         kv_size, once=("kv_cache_tokens",)),
    Rule("Maximum concurrency for ",
         (f"Maximum concurrency for ({_NUM}) tokens per request: ([0-9.]+)x",), concurrency,
         once=("max_concurrency",)),
    Rule("Available KV cache memory: ", ("Available KV cache memory: (-?[0-9.]+) ?GiB",),
         first_value("available_kv_cache_gib", float), once=("available_kv_cache_gib",)),
    Rule("# GPU blocks: ", ("# GPU blocks: ([0-9]+), # CPU blocks: ([0-9]+)",), blocks,
         once=("gpu_blocks",)),
    Rule("Model loading took ", ("Model loading took (-?[0-9.]+) ?Gi?B",),
         first_value("model_load_gib", float), once=("model_load_gib",)),
    Rule("Loading model weights took ", ("Loading model weights took (-?[0-9.]+) ?Gi?B",),
         first_value("model_load_gib", float), once=("model_load_gib",)),
    Rule("Loading weights took ", ("Loading weights took ([0-9.]+) ?s",), weights),
    Rule("Loading drafter model", ("Loading drafter model",), drafter),
    Rule("Graph capturing finished in ",
         ("Graph capturing finished in ([0-9]+) secs?(, took (-?[0-9.]+) GiB)?",),
         graph_capture),
    Rule("init engine (profile",
         ("init engine \\(profile, create kv cache, warmup model\\) took ([0-9.]+) s",
          "\\(compilation: ([0-9.]+) s"), init_engine, once=("init_engine_seconds",)),
    Rule("Using max model len ", ("Using max model len ([0-9]+)",),
         first_value("max_model_len", number), once=("max_model_len",)),
    Rule("Resolved architecture: ", ("Resolved architecture: ([A-Za-z0-9_]+)",),
         architecture),
    Rule("cudagraph_mode",
         ('"cudagraph_mode": ?(\\[[0-9, ]*\\]|[0-9]+|null)',
          "'cudagraph_mode': <CUDAGraphMode\\.([A-Z_]+)",
          "'cudagraph_mode': '([A-Za-z_]+)'",
          "[Ss]etting cudagraph_mode( to |=)([A-Za-z_]+)"), cudagraph_mode,
         BOOT | DYING),
    Rule("Cudagraph is disabled under eager mode", ("Cudagraph is disabled under eager mode",),
         eager),
    Rule("Enforce eager set", ("Enforce eager set",), eager),
    Rule("No cudagraph will be used", ("No cudagraph will be used",), eager),
    Rule("Capturing CUDA graphs (",
         ("Capturing CUDA graphs \\(([a-z -]+), ([A-Z_]+)\\)",), capture_progress),
    Rule("Capturing CUDA graph shapes", ("Capturing CUDA graph shapes",), capture_started),
    Rule("Capturing the model for CUDA graphs", ("Capturing the model for CUDA graphs",),
         capture_started),
    Rule(" backend",
         ("Using (.+) backend on V1 engine",
          "Using ([A-Z][A-Z0-9_]*) attention backend out of",
          "Using AttentionBackendEnum\\.([A-Z0-9_]+) backend\\.",
          "^Using ([A-Za-z][A-Za-z0-9_ -]*) backend\\.$"), backend),
    Rule("Forcing ", ("Forcing ([A-Z][A-Z0-9_]*) backend",), forced_backend),
    Rule("Using default MoE config",
         ("Using default MoE config", "device_name=([A-Za-z0-9_-]+)"), moe,
         once=("moe_default_config_warning",)),
    Rule("Asynchronous scheduling is ", ("Asynchronous scheduling is (enabled|disabled)",),
         async_scheduling),
    Rule("Detected MTP model", ("Detected MTP model",), mtp),
    Rule("speculative_config",
         ("speculative_config'?[=:] ?(None|SpeculativeConfig\\(|\\{)",
          "SpeculativeConfig\\(method='([A-Za-z0-9_]+)'",
          "'speculative_config': \\{[^}]*'method': '([A-Za-z0-9_]+)'"), spec_config),
    Rule("SpecDecoding metrics",
         ("Mean acceptance length: ([0-9.]+)", "Accepted: ([0-9]+) tokens",
          "Drafted: ([0-9]+) tokens", "Per-position acceptance rate: ([0-9., ]+)"),
         spec_metrics, ALWAYS),
    Rule("Application startup complete", ("Application startup complete",), ready),
    Rule("Uvicorn running on ", ("Uvicorn running on ",), ready),
    Rule("upported_tasks: ", ("Supported_tasks: ",), supported_tasks),
    Rule("upported tasks: ", ("Supported tasks: ",), supported_tasks),
    Rule("Starting vLLM ", ("Starting vLLM (API )?server",), server),
    Rule("headless multiproc executor",
         (f"Launching vLLM \\(v{_VERSION}\\) headless multiproc executor",), headless),
    # Engine-core messages: "EngineCore failed to start." (boot), "EngineCore encountered a
    # fatal error." (0.9+ serving), "EngineCore hit an exception: Traceback ..." (<= 0.8).
    # One anchor on the header's end finds them all.
    Rule("] EngineCore ", ("EngineCore (failed to start|encountered a fatal error|hit an "
                           "exception)",), engine_core, ALWAYS),
    Rule("WorkerProc hit an exception", ("WorkerProc hit an exception",), fatal, BOOT | DYING),
    Rule("WorkerProc failed to start", ("WorkerProc failed to start",), fatal,
         BOOT | DYING),
    Rule("died unexpectedly", ("died unexpectedly",), died, ALWAYS),
    Rule("Shutting down", ("Shutting down",), shutdown, ALWAYS),
    # uvicorn prints "Shutting down" first; these two only matter outside serving.
    Rule("Application shutdown complete", ("Application shutdown complete",), shutdown,
         BOOT | DYING),
    Rule("SIGTERM", ("SIGTERM",), signal, BOOT | DYING),
    # An exception that kills a serving engine without an engine-core message first (the
    # scanner does not look for "Error" while serving).
    Rule("Workspace is locked", ("Workspace is locked but allocation from",), exception_line,
         ALWAYS),
    *PYTHON_SERVER_RULES,
    *PYTHON_ERROR_RULES,
)

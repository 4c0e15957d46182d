"""How far a boot in progress got, from the facts its log has stated so far (pure).

A vLLM boot states its steps in this order (every V1 log of the shared fixtures, 0.10 to
0.25): ``Loading weights took`` / ``Model loading took`` (weights loaded), ``Available KV
cache memory`` and ``GPU KV cache size`` (memory profiled, pool sized), ``Graph capturing
finished`` (CUDA graphs captured) and ``init engine … took`` (engine up), then the API
server starts and ``Application startup complete.`` means ready. llama-server prints
``model loaded`` before ``server is listening``. So the phase a boot is *in* is the step
after the last one it finished.
"""

from __future__ import annotations

from servefleet.core.bootlog.model import BootFacts, LlamaCppExtra, SglangExtra, VllmExtra

STARTING = "starting"
LOADING_WEIGHTS = "loading weights"
PROFILING = "profiling"
GRAPHS = "capturing CUDA graphs"
API_SERVER = "starting the API server"
READY = "ready"
FAILED = "failed"

BOOT_PHASES: tuple[str, ...] = (STARTING, LOADING_WEIGHTS, PROFILING, GRAPHS, API_SERVER,
                                READY)
"""The phases of a boot, in order."""


def boot_phase(facts: BootFacts) -> str:
    """The phase the boot of ``facts`` is in: one of :data:`BOOT_PHASES`, or ``failed``."""
    if facts.outcome == "ready":
        return READY
    if facts.outcome == "failed":
        return FAILED
    extra = facts.extra
    if isinstance(extra, LlamaCppExtra):
        return API_SERVER if extra.model_loaded else LOADING_WEIGHTS
    engine_up = False
    if isinstance(extra, VllmExtra):
        engine_up = bool(extra.engine_init_completed) or extra.graph_capture_seconds is not None
    elif isinstance(extra, SglangExtra):
        engine_up = bool(extra.cuda_graph_captured)
    if engine_up:
        return API_SERVER
    if facts.kv_cache_tokens is not None or (
            isinstance(extra, VllmExtra) and (extra.available_kv_cache_gib is not None
                                              or extra.gpu_blocks is not None)):
        return GRAPHS
    if facts.weights_load_seconds is not None or facts.model_load_gib is not None:
        return PROFILING
    if facts.engine is not None:
        return LOADING_WEIGHTS
    return STARTING

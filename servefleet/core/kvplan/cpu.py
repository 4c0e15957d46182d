"""The KV pool of vLLM's CPU build (what a simulated node runs), from the served model's
``config.json`` and the KV space it is given.

On the CPU build the KV budget is not what memory is left after weights and activations:
it is exactly the space asked for (vLLM 0.32.0 ``vllm/platforms/cpu.py``: the environment
variable ``VLLM_CPU_KVCACHE_SPACE`` in whole GiB becomes ``cache_config.kv_cache_memory_bytes``
and, when set, wins over ``--kv-cache-memory-bytes``; ``vllm/v1/worker/cpu_worker.py``
``determine_available_memory`` returns that size as it is). The block size is 128 tokens
(``cache_config.block_size = 128`` unless given). Layout and reported tokens then follow
the same rules as on a GPU (:mod:`servefleet.core.kvplan.pool`).

Measured: the recorded CPU boots at 1 GiB (tests/core/bootlog/data/vllm-cpu-real) and the
rows of :data:`servefleet.core.kvplan.accuracy.CPU_ROWS`.
"""

from __future__ import annotations

from servefleet.core.engines import engine_of
from servefleet.core.engines.vllm import vllm_settings
from servefleet.core.kvplan.modelconfig import ModelFacts
from servefleet.core.kvplan.pool import GIB, PoolFigures, PoolLayout, bytes_for, figures, layout
from servefleet.core.models import Profile

CPU_BLOCK_SIZE = 128
"""vLLM's cache block on the CPU platform (``vllm/platforms/cpu.py``)."""
KV_BYTES_FLAG = "--kv-cache-memory-bytes"
"""vLLM's flag for an explicit KV budget in bytes (GPU and CPU alike)."""
CPU_KV_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
"""KV dtypes the CPU build stores smaller than the model dtype; anything else (TurboQuant
included: the recorded boot with ``turboquant_4bit_nc`` got the bf16 pool) is ``auto``."""


def explicit_kv_bytes(profile: Profile) -> int | None:
    """``--kv-cache-memory-bytes=N`` in ``vllm.extra_args`` (the last one wins), if any."""
    found = None
    # A vLLM flag: llama-server refuses it, so no other engine's profile carries it.
    for arg in engine_of(profile).extra_args(profile):
        flag, sep, value = arg.partition("=")
        if flag == KV_BYTES_FLAG and sep and value.strip().isdigit():
            found = int(value.strip())
    return found


def cpu_layout(facts: ModelFacts, profile: Profile, version: tuple[int, ...],
               fp8_kv: bool = True) -> PoolLayout:
    """The pool layout of ``profile``'s flags on the CPU build (``fp8_kv``: the machine
    keeps an FP8 KV cache; without AVX-512 or AMX it keeps the model dtype)."""
    settings = vllm_settings(profile)
    dtype = CPU_KV_DTYPES.get(settings.kv_cache_dtype or "auto", "auto") if fp8_kv \
        else "auto"
    return layout(facts, kv_dtype=dtype, version=version, dense_block_size=CPU_BLOCK_SIZE,
                  prefix_caching=bool(settings.enable_prefix_caching))


def cpu_budget(profile: Profile, env_space_gib: int | None) -> tuple[int, str]:
    """The KV bytes the CPU build gets and where they come from: the environment's
    ``VLLM_CPU_KVCACHE_SPACE`` wins over the flag, as in vLLM."""
    flag = explicit_kv_bytes(profile)
    if env_space_gib is not None:
        return env_space_gib * GIB, f"VLLM_CPU_KVCACHE_SPACE={env_space_gib} GiB"
    if flag is not None:
        return flag, f"{KV_BYTES_FLAG}={flag:,} ({flag / GIB:.2f} GiB)"
    raise ValueError("the CPU build sizes its pool from VLLM_CPU_KVCACHE_SPACE or "
                     f"{KV_BYTES_FLAG}; neither is set")


def max_len(facts: ModelFacts, profile: Profile) -> int:
    """``max_model_len``: the profile's, else the served model's own limit."""
    return vllm_settings(profile).max_model_len or facts.max_position_embeddings or 0


def cpu_pool(facts: ModelFacts, profile: Profile, version: tuple[int, ...],
             kv_bytes: int, fp8_kv: bool = True) -> PoolFigures:
    """What the CPU build prints for ``kv_bytes`` of KV space."""
    return figures(cpu_layout(facts, profile, version, fp8_kv), kv_bytes,
                   max_len(facts, profile), version)


def solve_kv_bytes(facts: ModelFacts, profile: Profile, version: tuple[int, ...], *,
                   tokens: int | None = None, concurrency: float | None = None,
                   fp8_kv: bool = True) -> int:
    """The least KV space (whole MiB, so the flag reads well) whose CPU pool reaches
    ``tokens`` (as printed) or ``concurrency``."""
    lay = cpu_layout(facts, profile, version, fp8_kv)
    need = bytes_for(lay, max_model_len=max_len(facts, profile), version=version,
                     tokens=tokens, concurrency=concurrency)
    mib = 1024 * 1024
    return -(-need // mib) * mib

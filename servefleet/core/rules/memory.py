"""Memory rules: does the engine fit its GPU share, and do a node's engines fit together.

The estimate is deliberately simple: weights (split by tensor parallelism) + a runtime
overhead + the smallest KV pool the profile accepts (one ``max_model_len`` request, or the
health gate's ``min_kv_cache_tokens``, whichever is larger) against the engine's budget
(``gpu_memory_utilization × memory`` per GPU for vLLM; the whole device for llama.cpp).
The KV part needs ``model.kv_bytes_per_token``; without it only weights and overhead count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from servefleet.core.engines import engine_of
from servefleet.core.engines.llamacpp import LLAMACPP, llamacpp_settings
from servefleet.core.engines.vllm import VLLM, vllm_settings
from servefleet.core.models import Node, Profile
from servefleet.core.rules.base import (
    Issue,
    NodeContext,
    Placement,
    PlacementContext,
    Severity,
    node_rule,
    placement_rule,
)
from servefleet.core.rules.facts import (
    GIB,
    KV_BYTES_FACTOR,
    LLAMACPP_CACHE_FACTOR,
    LLAMACPP_OVERHEAD_GIB,
    MTP_KV_SHRINK,
    RUNTIME_OVERHEAD_GIB,
    TIGHT_HEADROOM,
    TIGHT_KV_SHARE,
    UMA_MAX_UTILIZATION_SUM,
    UMA_OS_RESERVE_GIB,
    gpu_memory_utilization,
    mtp_on,
)

WHY_BUDGET = ("vLLM vllm/v1/worker/utils.py request_memory(): the engine may take "
              "ceil(total × gpu_memory_utilization) and the KV pool gets what weights and "
              "activations leave")
WHY_UMA = ("vLLM vllm/utils/mem_utils.py: on unified memory free memory is the host's "
           "available memory (psutil), so the OS and other engines compete; vLLM DGX Spark "
           "guide: leave headroom")


@dataclass(frozen=True)
class MemoryEstimate:
    """One engine's memory, per GPU, in GiB."""

    budget: float
    """What the engine may take (utilization × memory; the device for llama.cpp)."""
    budget_text: str
    """How the budget was computed, for messages."""
    weights: float
    """Weights per GPU."""
    overhead: float
    """Activations, CUDA graphs, non-torch allocations."""
    kv: float
    """The smallest acceptable KV pool per GPU (0 when the per-token size is unknown)."""
    kv_tokens: int
    """Tokens that smallest pool holds."""

    @property
    def need(self) -> float:
        """Weights + overhead + minimal KV."""
        return self.weights + self.overhead + self.kv

    @property
    def headroom(self) -> float:
        """Budget left after the need (negative: does not fit)."""
        return self.budget - self.need

    def breakdown(self) -> str:
        """``34.9 GiB weights + 3 GiB runtime + 1.3 GiB KV (131072 tokens) = 39.2 GiB``."""
        kv = f" + {self.kv:.1f} GiB KV ({self.kv_tokens} tokens)" if self.kv > 0 else ""
        return (f"{self.weights:.1f} GiB weights + {self.overhead:g} GiB runtime{kv} = "
                f"{self.need:.1f} GiB against {self.budget_text} = {self.budget:.1f} GiB")


def _vllm_estimate(profile: Profile, node: Node, weights: float) -> MemoryEstimate:
    """vLLM takes ``gpu_memory_utilization`` of each of its tensor-parallel GPUs."""
    gpu = node.primary_gpu
    per_token = profile.model.kv_bytes_per_token
    settings = vllm_settings(profile)
    util = gpu_memory_utilization(profile)
    tp = settings.tensor_parallel_size or 1
    tokens = max(settings.max_model_len or 0, profile.health.min_kv_cache_tokens or 0)
    factor = KV_BYTES_FACTOR.get(settings.kv_cache_dtype or "auto", 1.0)
    kv = tokens * per_token * factor / GIB / tp if per_token else 0.0
    return MemoryEstimate(
        budget=util * gpu.cuda_total_gib, budget_text=f"{util:g} × {gpu.memory_basis()}",
        weights=weights / tp, overhead=RUNTIME_OVERHEAD_GIB, kv=kv, kv_tokens=tokens)


def _llamacpp_estimate(profile: Profile, node: Node, weights: float) -> MemoryEstimate:
    """llama.cpp may use all of every visible GPU; its context sizes the cache."""
    gpu = node.primary_gpu
    per_token = profile.model.kv_bytes_per_token
    settings = llamacpp_settings(profile)
    tokens = settings.ctx_size or profile.model.native_context or 0
    factor = (LLAMACPP_CACHE_FACTOR.get(settings.cache_type_k or "f16", 1.0)
              + LLAMACPP_CACHE_FACTOR.get(settings.cache_type_v or "f16", 1.0)) / 2
    split = node.gpu_count  # llama.cpp splits layers over every visible GPU
    kv = tokens * per_token * factor / GIB / split if per_token else 0.0
    return MemoryEstimate(
        budget=gpu.cuda_total_gib, budget_text=f"{gpu.name} {gpu.cuda_total_gib:g} GiB",
        weights=weights / split, overhead=LLAMACPP_OVERHEAD_GIB, kv=kv, kv_tokens=tokens)


ESTIMATES: dict[str, Callable[[Profile, Node, float], MemoryEstimate]] = {
    VLLM.name: _vllm_estimate,
    LLAMACPP.name: _llamacpp_estimate,
}
"""Each engine's memory model (by engine name), given the weights in GiB."""


def estimate(profile: Profile, node: Node) -> MemoryEstimate | None:
    """The engine's memory need and budget per GPU; ``None`` without ``model.weights_gib``."""
    weights = profile.model.weights_gib
    if weights is None:
        return None
    return ESTIMATES[profile.engine](profile, node, weights)


def _budget_field(profile: Profile) -> tuple[str, object]:
    engine = engine_of(profile)
    # An engine with a utilization setting is budgeted by it; another by its weights.
    util = engine.gpu_memory_utilization(profile)
    if util is not None:
        return f"{engine.settings_field}.gpu_memory_utilization", util
    return "model.weights_gib", profile.model.weights_gib


@placement_rule("memory-does-not-fit", Severity.ERROR)
def memory_does_not_fit(ctx: PlacementContext) -> Iterator[Issue]:
    """Weights + runtime + the minimal KV pool exceed the engine's memory budget."""
    found = estimate(ctx.profile, ctx.node)
    if found is None or found.headroom >= 0:
        return
    field, value = _budget_field(ctx.profile)
    yield Issue(
        field=field, value=value,
        message=(f"{value} does not fit {ctx.where}: {found.breakdown()}; vLLM stops with "
                 "'… KV cache is needed, which is larger than the available KV cache memory' "
                 "or runs out of memory loading weights"),
        why=WHY_BUDGET,
        fix=("raise gpu_memory_utilization, lower max_model_len or min_kv_cache_tokens, use a "
             "smaller KV dtype or checkpoint, or raise tensor_parallel_size"),
    )


@placement_rule("memory-headroom-tight", Severity.WARNING)
def memory_headroom_tight(ctx: PlacementContext) -> Iterator[Issue]:
    """Less than 10% of the engine's budget left after weights, runtime and minimal KV."""
    found = estimate(ctx.profile, ctx.node)
    if found is None or found.headroom < 0 or found.headroom >= TIGHT_HEADROOM * found.budget:
        return
    field, value = _budget_field(ctx.profile)
    yield Issue(
        field=field, value=value,
        message=(f"{value} leaves {found.headroom:.1f} GiB ({found.headroom / found.budget:.0%}) "
                 f"of headroom {ctx.where}: {found.breakdown()}; a larger activation peak or "
                 "CUDA-graph estimate will not fit"),
        why=WHY_BUDGET,
        fix=("leave at least 10% headroom: raise gpu_memory_utilization or lower "
             "max_model_len / max_num_batched_tokens"),
    )


@placement_rule("mtp-tight-kv-unified-memory", Severity.WARNING)
def mtp_tight_kv_unified_memory(ctx: PlacementContext) -> Iterator[Issue]:
    """MTP on a unified-memory node (GB10) whose KV pool is already a small slice."""
    profile = ctx.profile
    if not mtp_on(profile) or not ctx.node.unified_memory:
        return
    found = estimate(profile, ctx.node)
    if found is None:
        return
    pool = found.budget - found.weights - found.overhead
    if pool >= TIGHT_KV_SHARE * found.budget:
        return
    field, value = _budget_field(profile)
    yield Issue(
        field=field, value=value,
        message=(f"{value} leaves about {max(pool, 0):.1f} GiB for the KV pool {ctx.where} "
                 f"(under {TIGHT_KV_SHARE:.0%} of the {found.budget:.1f} GiB budget), and MTP "
                 f"costs about {MTP_KV_SHRINK:.0%} more (extra heads, padding layers, PIECEWISE "
                 "graphs: 360k → 323k tokens on GB10)"),
        why="Qwen3.6 MTP measurement on DGX Spark (GB10): MTP's memory impact is a tax",
        fix="raise gpu_memory_utilization or lower max_num_seqs before turning MTP on",
    )


def largest_booting_utilization(boot_free_gib: float, cuda_total_gib: float) -> float:
    """The largest ``gpu_memory_utilization`` (0.01 steps) whose request fits the free
    memory at boot."""
    hundredths = int(boot_free_gib / cuda_total_gib * 100 + 1e-9)
    while hundredths > 0 and hundredths / 100 * cuda_total_gib > boot_free_gib:
        hundredths -= 1
    return hundredths / 100


@placement_rule("startup-memory-exceeds-boot-free", Severity.ERROR, engines=(VLLM.name,))
def startup_memory_exceeds_boot_free(ctx: PlacementContext) -> Iterator[Issue]:
    """vLLM asks for more than the node can free at boot: its startup check refuses."""
    profile, gpu = ctx.profile, ctx.node.primary_gpu
    if gpu.boot_free_gib is None:
        return
    util = gpu_memory_utilization(profile)
    need = util * gpu.cuda_total_gib
    if need <= gpu.boot_free_gib:
        return
    best = largest_booting_utilization(gpu.boot_free_gib, gpu.cuda_total_gib)
    explicit = "" if vllm_settings(profile).gpu_memory_utilization is not None \
        else " (vLLM's default)"
    source = f" ({gpu.memory_source})" if gpu.memory_source else ""
    yield Issue(
        field="vllm.gpu_memory_utilization", value=util,
        message=(f"{util:g}{explicit} asks for {need:.1f} GiB ({util:g} × "
                 f"{gpu.cuda_total_gib:g} GiB as CUDA reports it) {ctx.where}, but "
                 f"{ctx.node.name} frees at most {gpu.boot_free_gib:g} GiB at boot{source}: "
                 "vLLM stops with 'Free memory on device … is less than desired GPU memory "
                 f"utilization'. The largest utilization that boots is {best:g}"),
        why=("vLLM vllm/v1/worker/utils.py request_memory(): startup needs free memory ≥ "
             "total × gpu_memory_utilization; on a GB10 free memory is the host's available "
             "memory and caps near 102 GiB of 121.69 (vllm-project/recipes PR 632: vLLM's "
             "default 0.92 OOMs at startup)"),
        fix=(f"set vllm.gpu_memory_utilization to {best:g} or less (servefleet tune finds the "
             "least that reaches your pool); if the node frees more, measure it with "
             f"`servefleet probe {ctx.node.name}` and raise boot_free_gib in its inventory"),
    )


# ------------------------------------------------------------------------- node scope


def _share(placement: Placement, node: Node) -> tuple[float, str] | None:
    """The fraction of the node's GPU memory a deployment takes, and how it was known."""
    profile = placement.profile
    util = engine_of(profile).gpu_memory_utilization(profile)
    if util is not None:  # the engine's own setting (vLLM), else the memory estimate
        explicit = vllm_settings(profile).gpu_memory_utilization is not None
        return util, f"{placement.deployment.name} {util:g}" + ("" if explicit else " (default)")
    found = estimate(profile, node)
    if found is None:
        return None
    share = found.need / node.primary_gpu.cuda_total_gib
    return share, f"{placement.deployment.name} ~{share:.2f} (llama.cpp estimate)"


def _shares(ctx: NodeContext) -> tuple[float, list[str]]:
    total, parts = 0.0, []
    for placement in ctx.placements:
        share = _share(placement, ctx.node)
        if share is not None:
            total += share[0]
            parts.append(share[1])
    return total, parts


@node_rule("node-utilization-over-one", Severity.ERROR)
def node_utilization_over_one(ctx: NodeContext) -> Iterator[Issue]:
    """The engines on one node ask for more than all of its GPU memory together."""
    if len(ctx.placements) < 2:
        return
    total, parts = _shares(ctx)
    if total <= 1.0 + 1e-9:
        return
    yield Issue(
        file=ctx.stack_file, field=f"servefleet:profiles.{ctx.node.name}", value=round(total, 3),
        message=(f"the deployments on {ctx.node.name} ask for {total:.2f} of its GPU memory "
                 f"together ({' + '.join(parts)}): the later engine fails with 'Free memory on "
                 "device … is less than desired GPU memory utilization'"),
        why=WHY_BUDGET,
        fix=("lower gpu_memory_utilization in the profiles so the sum stays below 1.0, or "
             "move a deployment to another node"),
    )


@node_rule("unified-memory-os-headroom", Severity.WARNING)
def unified_memory_os_headroom(ctx: NodeContext) -> Iterator[Issue]:
    """On unified memory the engines leave too little for the OS (vLLM checks host RAM)."""
    node = ctx.node
    if not node.unified_memory or not ctx.placements:
        return
    total, parts = _shares(ctx)
    pool = node.primary_gpu.memory_gib
    left = pool - total * node.primary_gpu.cuda_total_gib
    if total <= UMA_MAX_UTILIZATION_SUM + 1e-9 and left >= UMA_OS_RESERVE_GIB:
        return
    yield Issue(
        file=ctx.stack_file, field=f"servefleet:profiles.{node.name}", value=round(total, 3),
        message=(f"the deployments on {node.name} take {total:.2f} of its {pool:g} GiB unified "
                 f"memory ({' + '.join(parts)}), leaving {max(left, 0):.1f} GiB for the OS, "
                 "page cache and containers; vLLM measures free memory from the host there and "
                 "refuses to start when it is short"),
        why=WHY_UMA,
        fix=(f"keep the summed gpu_memory_utilization at or below {UMA_MAX_UTILIZATION_SUM} and "
             f"at least {UMA_OS_RESERVE_GIB:g} GiB free (set it explicitly; 0.92 is vLLM's "
             "default from 0.20)"),
    )

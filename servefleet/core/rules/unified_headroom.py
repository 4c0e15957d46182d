"""Unified-memory safety: a GB10 engine whose predicted footprint leaves the host too little.

On unified memory vLLM takes ``total × gpu_memory_utilization`` out of the same pool the
OS, page cache and other containers live in; too little left has wedged hosts (vLLM issues
46307, 56824). The footprint is the KV planner's prediction: the engine's requested share,
of which weights, activations/graphs and the KV pool are itemised.
"""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines import engine_of
from servefleet.core.engines.vllm import VLLM
from servefleet.core.rules.base import Issue, PlacementContext, Severity, placement_rule
from servefleet.core.rules.facts import gpu_memory_utilization, weights_gib

UMA_REFUSE_GIB = 4.0
"""Below this the host is expected to wedge (issues 46307, 56824)."""
UMA_WARN_GIB = 8.0
"""vLLM DGX Spark guide: leave headroom for the OS, page cache and containers."""
WHY = ("vLLM issues 46307 and 56824: unified-memory sizing that resets hosts; vLLM measures "
       "free memory from the host on GB10 (vllm/utils/mem_utils.py)")


def _footprint(ctx: PlacementContext) -> tuple[float, float, str] | None:
    """(host headroom GiB, engine share GiB, how) for a vLLM profile on a unified node."""
    node, profile = ctx.node, ctx.profile
    if not node.unified_memory:
        return None
    total = node.primary_gpu.cuda_total_gib
    host = node.host_memory_gib or node.primary_gpu.memory_gib
    util = gpu_memory_utilization(profile)
    share = total * util
    # Neighbours without a utilization setting (llama.cpp) are not counted, as before.
    shares = (engine_of(p.profile).gpu_memory_utilization(p.profile) for p in ctx.neighbours)
    others = sum(total * share for share in shares if share is not None)
    weights = weights_gib(profile, engine_of(profile).gpu_count(profile))
    how = (f"KV planner: {util:g} × {total:g} GiB = {share:.1f} GiB ({weights:.1f} GiB weights "
           f"; activations, CUDA graphs and the KV pool take the rest)"
           + (f" + {others:.1f} GiB for the other engines" if others else ""))
    return host - share - others, share, how


@placement_rule("unified-memory-host-wedge", Severity.ERROR, engines=(VLLM.name,))
def unified_memory_host_wedge(ctx: PlacementContext) -> Iterator[Issue]:
    """The predicted engine footprint leaves the unified-memory host under 4 GiB."""
    found = _footprint(ctx)
    if found is None or found[0] >= UMA_REFUSE_GIB:
        return
    util = gpu_memory_utilization(ctx.profile)
    yield Issue(field="vllm.gpu_memory_utilization", value=util,
                message=(f"{util:g} {ctx.where} leaves the host {found[0]:.1f} GiB of unified "
                         f"memory (under {UMA_REFUSE_GIB:g} GiB): {found[2]}"),
                why=WHY,
                fix=(f"lower gpu_memory_utilization until the host keeps {UMA_WARN_GIB:g} GiB "
                     "(servefleet tune PROFILE --node NODE --target-kv-tokens N finds the least "
                     "that reaches your pool)"))


@placement_rule("unified-memory-host-headroom-near", Severity.WARNING,
                engines=(VLLM.name,))
def unified_memory_host_headroom_near(ctx: PlacementContext) -> Iterator[Issue]:
    """The predicted footprint leaves the unified-memory host between 4 and 8 GiB."""
    found = _footprint(ctx)
    if found is None or not UMA_REFUSE_GIB <= found[0] < UMA_WARN_GIB:
        return
    util = gpu_memory_utilization(ctx.profile)
    yield Issue(field="vllm.gpu_memory_utilization", value=util,
                message=(f"{util:g} {ctx.where} leaves the host only {found[0]:.1f} GiB of "
                         f"unified memory: {found[2]}"),
                why=WHY,
                fix=(f"keep at least {UMA_WARN_GIB:g} GiB for the host: lower "
                     "gpu_memory_utilization"))

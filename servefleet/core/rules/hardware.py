"""Rules on a profile placed on a node's hardware: GPU generation, CPU arch, GPU count."""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines import engine_of
from servefleet.core.engines.vllm import VLLM, vllm_settings
from servefleet.core.rules.base import Issue, PlacementContext, Severity, placement_rule
from servefleet.core.rules.facts import (
    ARCH_PLATFORM,
    FP8_KV_DTYPES,
    FP8_MIN_SM,
    FP8_QUANTIZATIONS,
    NVFP4_KV_DTYPES,
    NVFP4_MIN_SM,
    NVFP4_QUANTIZATIONS,
)


def _format_uses(ctx: PlacementContext, formats: frozenset[str], kv: frozenset[str],
                 methods: frozenset[str]) -> list[tuple[str, str]]:
    """The profile fields that ask for a number format: (field, value)."""
    profile = ctx.profile
    uses: list[tuple[str, str]] = []
    if profile.model.quant_format in formats:
        uses.append(("model.quant_format", str(profile.model.quant_format)))
    engine = engine_of(profile)
    kv_dtype, method = engine.kv_cache_dtype(profile), engine.quantization(profile)
    if kv_dtype in kv:
        uses.append((f"{engine.settings_field}.kv_cache_dtype", str(kv_dtype)))
    if method in methods:
        uses.append((f"{engine.settings_field}.quantization", str(method)))
    return uses


@placement_rule("nvfp4-needs-blackwell", Severity.ERROR)
def nvfp4_needs_blackwell(ctx: PlacementContext) -> Iterator[Issue]:
    """NVFP4 weights or KV cache on a GPU older than Blackwell (compute capability 10.0)."""
    gpu = ctx.node.primary_gpu
    if gpu.sm >= NVFP4_MIN_SM:
        return
    for field, value in _format_uses(ctx, frozenset({"nvfp4"}), NVFP4_KV_DTYPES,
                                     NVFP4_QUANTIZATIONS):
        yield Issue(
            field=field, value=value,
            message=(f"{value} needs a Blackwell GPU (compute capability ≥ 10.0), but "
                     f"{ctx.where} has {gpu.name} (SM {gpu.compute_capability})"),
            why=("NVFP4 (E2M1 + FP8 block scales) tensor cores exist only on Blackwell "
                 "(SM100/SM120)"),
            fix=("place this profile on a Blackwell node in the stack file, or use an FP8 "
                 "or INT8 (W8A16) checkpoint here"),
        )


@placement_rule("fp8-needs-sm89", Severity.ERROR)
def fp8_needs_sm89(ctx: PlacementContext) -> Iterator[Issue]:
    """FP8 weights or FP8 KV cache on a GPU older than Ada/Hopper (compute capability 8.9)."""
    gpu = ctx.node.primary_gpu
    if gpu.sm >= FP8_MIN_SM:
        return
    for field, value in _format_uses(ctx, frozenset({"fp8"}), FP8_KV_DTYPES, FP8_QUANTIZATIONS):
        yield Issue(
            field=field, value=value,
            message=(f"{value} needs native FP8 (compute capability ≥ 8.9: Ada, Hopper, "
                     f"Blackwell), but {ctx.where} has {gpu.name} (SM {gpu.compute_capability})"),
            why="FP8 E4M3/E5M2 tensor cores arrive with SM 8.9; vLLM's FP8 kernels need them",
            fix=("place this profile on an SM ≥ 8.9 node, or use a W8A16/INT8 checkpoint and "
                 "kv_cache_dtype: auto here"),
        )


@placement_rule("image-platform-mismatch", Severity.ERROR)
def image_platform_mismatch(ctx: PlacementContext) -> Iterator[Issue]:
    """The image is not published for the node's CPU architecture (GB10 is aarch64)."""
    image = ctx.profile.image
    platform = ARCH_PLATFORM[ctx.node.arch]
    if platform in image.platforms:
        return
    yield Issue(
        field="image.platforms", value=list(image.platforms),
        message=(f"{', '.join(image.platforms)}: the image {image.ref} has no {platform} build "
                 f"but {ctx.where} is {ctx.node.arch}; the container fails with 'exec format "
                 "error'"),
        why=("docker pulls the manifest entry for the host's platform; DGX Spark (GB10) is "
             "aarch64 and needs linux/arm64 (vLLM release tags are multi-arch)"),
        fix=(f"pin a multi-arch or {platform} image (image.ref, image.digest, image.platforms), "
             "or place the profile on a node of a listed architecture"),
    )


@placement_rule("tensor-parallel-exceeds-gpus", Severity.ERROR, engines=(VLLM.name,))
def tensor_parallel_exceeds_gpus(ctx: PlacementContext) -> Iterator[Issue]:
    """tensor_parallel_size larger than the node's GPU count."""
    vllm = vllm_settings(ctx.profile)
    if vllm.tensor_parallel_size is None:
        return
    tp, count = vllm.tensor_parallel_size, ctx.node.gpu_count
    if tp <= count:
        return
    yield Issue(
        field="vllm.tensor_parallel_size", value=tp,
        message=(f"{tp} GPUs per engine, but {ctx.where} has {count} GPU"
                 f"{'s' if count != 1 else ''}: vLLM cannot create {tp} workers"),
        why="vLLM tensor parallelism runs one worker per GPU (vllm/engine/arg_utils.py -tp)",
        fix=f"set vllm.tensor_parallel_size to at most {count}, place the profile on a "
            "node with more GPUs, or span nodes with servefleet:multiNode "
            "(nodes: [NODE, NODE])",
    )

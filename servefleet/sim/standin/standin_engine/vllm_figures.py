"""The stand-in's own arithmetic for vLLM's memory figures.

A simplified model of how vLLM sizes its KV pool (the structure of vLLM's
``determine_available_memory`` and KV-cache grouping, with a handful of constants
fitted to the operators' measurements):

* budget = ``gpu_memory_utilization`` x total memory;
* minus the weights ("Model loading took"), the profiled activation peak (grows with
  ``max_num_batched_tokens``), non-torch memory and the CUDA-graph estimate;
* what is left is cut into KV blocks. Hybrid models (full attention + Gated
  DeltaNet) align the attention block to the recurrent-state page and share blocks
  across layer groups, so the pool in tokens depends on the KV dtype, speculative
  tokens, prefix caching (``align`` mode) and ``max_model_len``.

Calibration: Qwen3.6-35B-A3B-FP8 on a 128 GiB GB10 at utilization 0.45, fp8 KV,
131072 context, 32 sequences, 16384 batched tokens, prefix caching on, gives
360,512 tokens (vLLM 0.19/0.20 wording) and 323,456 tokens with MTP (2 speculative
tokens), the figures of the reference fleet's notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .catalog import ModelSpec
from .node import GIB, Node
from .vllm_versions import VersionTuple

# Non-torch memory (CUDA context, NCCL/cuBLAS workspaces); larger under unified memory.
NON_TORCH_GIB_UNIFIED = 0.6
NON_TORCH_GIB_DISCRETE = 0.35
# CUDA-graph pool estimate by mode (measured 0.74 GiB for FULL_AND_PIECEWISE on a GB10).
CUDAGRAPH_GIB = {
    "FULL_AND_PIECEWISE": 0.74,
    "FULL": 0.62,
    "FULL_DECODE_ONLY": 0.55,
    "PIECEWISE": 0.11,
    "NONE": 0.0,
}
# Alignment of hybrid attention blocks (minimum kernel block size).
HYBRID_ALIGN = 16
DENSE_BLOCK_SIZE = 16


# Bytes per head per token (K+V) of the TurboQuant presets, as a function of head size.
def _tq_slot(preset: str, head_dim: int) -> int:
    half = head_dim // 2
    three_eighths = 3 * head_dim // 8
    return {
        "turboquant_k8v4": head_dim + half + 4,
        "turboquant_4bit_nc": (half + 2) + (half + 4),
        "turboquant_k3v4_nc": (three_eighths + 2) + (half + 4),
        "turboquant_3bit_nc": (three_eighths + 2) + (three_eighths + 4),
    }[preset]


def kv_bytes_per_token_per_layer(dtype: str, kv_heads: int, head_dim: int) -> int:
    """Bytes one token takes in one attention layer's KV cache, per rank."""
    if dtype.startswith("turboquant_"):
        return kv_heads * _tq_slot(dtype, head_dim)
    if dtype in ("fp8_per_token_head", "int8_per_token_head"):
        return kv_heads * 2 * head_dim + 2 * kv_heads * 4
    if dtype == "nvfp4":
        return kv_heads * 2 * (head_dim // 2 + head_dim // 16)
    if dtype.startswith("fp8"):
        return kv_heads * 2 * head_dim
    return kv_heads * 2 * head_dim * 2


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


@dataclass(frozen=True)
class ServeSettings:
    """The resolved engine settings the figures depend on."""

    model: ModelSpec
    """Catalog entry."""
    node: Node
    """The GPU."""
    version: VersionTuple
    """Emulated vLLM release."""
    gpu_memory_utilization: float
    """Fraction of total memory for this instance."""
    max_model_len: int
    """Context length."""
    kv_cache_dtype: str
    """Resolved KV dtype name (``auto`` = model dtype)."""
    num_spec_tokens: int
    """Speculative tokens (0: no speculative decoding)."""
    mtp: bool
    """The drafter is the model's own MTP heads."""
    enable_prefix_caching: bool
    """Prefix caching (``align`` mode for hybrid models)."""
    max_num_batched_tokens: int
    """Tokens per scheduler step (profiling batch)."""
    max_num_seqs: int
    """Concurrent sequences."""
    tensor_parallel_size: int
    """Ranks; the node's memory is per rank."""
    language_model_only: bool
    """Vision tower skipped."""
    cudagraph_mode: str
    """Final CUDA-graph mode."""
    mamba_ssm_bytes: int
    """Bytes per temporal-state element."""
    kv_cache_memory_bytes: int | None
    """User-fixed KV pool."""
    revision: str | None
    """Checkpoint branch."""
    tq_workspace_reserved: bool
    """The PR #40798 reservation is in the installed code (TurboQuant only)."""
    kv_shrink: float = 0.0
    """Fraction of the pool lost to a ``kv_small`` fault."""
    force_no_memory: bool = False
    """``kv_oom`` fault: the budget comes out negative."""


@dataclass(frozen=True)
class KvFigures:
    """Everything the boot log states about memory."""

    weights_gib: float
    """Target model weights."""
    drafter_gib: float
    """MTP heads loaded for speculative decoding."""
    requested_bytes: int
    """util x total."""
    activation_bytes: int
    """Profiled activation peak."""
    non_torch_bytes: int
    """Non-torch allocations."""
    cudagraph_bytes: int
    """CUDA-graph memory estimate."""
    tq_reserve_bytes: int
    """TurboQuant workspace reserved before capture (overlay present)."""
    available_bytes: int
    """"Available KV cache memory" (negative when the weights do not fit)."""
    block_size: int
    """Tokens per KV block."""
    attn_page_bytes: int
    """Bytes per block per attention layer."""
    mamba_page_bytes: int
    """Recurrent-state page before padding (0 for dense models)."""
    mamba_padding_pct: float | None
    """Padding added to the recurrent page, percent (None: none)."""
    padding_layers: int
    """Layers added to fill the last group."""
    padding_waste_pct: float
    """"may waste at most" percentage."""
    group_size: int
    """Layers per KV-cache group."""
    num_groups: int
    """KV-cache groups."""
    num_blocks: int
    """Blocks in the pool."""
    blocks_per_request: int
    """Blocks one request at max_model_len needs across groups."""
    needed_bytes: int
    """Memory one request at max_model_len needs."""

    @property
    def max_concurrency(self) -> float:
        """ "Maximum concurrency for N tokens per request"."""
        return self.num_blocks / self.blocks_per_request if self.blocks_per_request else 0.0

    def kv_tokens(self, version: VersionTuple, max_model_len: int) -> int:
        """ "GPU KV cache size: N tokens" (its meaning changed in vLLM 0.21)."""
        if version >= (0, 21, 0):
            return int(self.max_concurrency * max_model_len)
        return self.num_blocks // self.num_groups * self.block_size

    def estimated_max_model_len(self) -> int:
        """The longest context that would fit (for the "KV too small" error)."""
        if self.blocks_per_request <= 0 or self.num_blocks <= 0:
            return 0
        fixed = self.blocks_per_request - 1
        attn_blocks = max(0, self.num_blocks - fixed)
        return attn_blocks * self.block_size


def _group_layout(attn_layers: int, gdn_layers: int) -> tuple[int, int, int]:
    """(group_size, num_groups, padding_layers) of vLLM's uniform-page grouping."""
    counts = [c for c in (attn_layers, gdn_layers) if c > 0]
    low, high = min(counts), max(counts)
    group_size = high if high < 1.5 * low else low
    num_groups = sum(cdiv(c, group_size) for c in counts)
    padding = sum(cdiv(c, group_size) * group_size - c for c in counts)
    return group_size, num_groups, padding


def compute(s: ServeSettings) -> KvFigures:
    """Work out the memory figures for one boot."""
    model, node = s.model, s.node
    tp = max(1, s.tensor_parallel_size)
    weights = model.weights_for_revision(s.revision)
    if s.language_model_only:
        weights -= model.vision_gib
    weights /= tp
    drafter = (model.mtp_gib / tp) if (s.mtp and s.num_spec_tokens > 0) else 0.0

    requested = math.ceil(node.total_bytes * s.gpu_memory_utilization)
    non_torch = int((NON_TORCH_GIB_UNIFIED if node.unified else NON_TORCH_GIB_DISCRETE) * GIB)
    activation = int(
        model.activation_gib_per_1k_tokens * s.max_num_batched_tokens / 1024 * GIB / tp
    )
    cudagraph = int(CUDAGRAPH_GIB.get(s.cudagraph_mode, 0.0) * GIB)

    kv_heads = max(1, model.num_kv_heads // tp)
    attn_layers = model.num_attention_layers + (
        model.mtp_layers if s.mtp and s.num_spec_tokens else 0
    )
    bpt = kv_bytes_per_token_per_layer(s.kv_cache_dtype, kv_heads, model.head_dim)

    tq_reserve = 0
    if s.kv_cache_dtype.startswith("turboquant_") and s.tq_workspace_reserved:
        # Decode scratch for max_num_seqs plus, with chunked prefill, two fp16
        # continuation buffers as long as the context (the overlay's reservation).
        heads = max(1, model.num_attention_heads // tp)
        tq_reserve = s.max_num_seqs * heads * 32 * (model.head_dim + 1) * 4
        tq_reserve += 2 * kv_heads * max(0, s.max_model_len - 1) * model.head_dim * 2

    if s.kv_cache_memory_bytes is not None:
        available = s.kv_cache_memory_bytes
    else:
        available = (
            requested
            - int((weights + drafter) * GIB)
            - activation
            - non_torch
            - cudagraph
            - tq_reserve
        )
    if s.force_no_memory:
        available = -abs(int(0.012 * requested)) - int(0.35 * GIB)
    if s.kv_shrink > 0 and available > 0:
        available = int(available * (1.0 - s.kv_shrink))

    mamba_padding: float | None = None
    if model.hybrid is not None:
        h = model.hybrid
        conv = (
            ((h.head_k_dim * h.num_k_heads * 2 + h.head_v_dim * h.num_v_heads) // tp)
            * (h.conv_kernel - 1 + s.num_spec_tokens)
            * 2
        )
        temporal = (h.num_v_heads // tp) * h.head_v_dim * h.head_k_dim * s.mamba_ssm_bytes
        mamba_page = conv + temporal
        block_size = HYBRID_ALIGN * cdiv(mamba_page, HYBRID_ALIGN * bpt)
        page = block_size * bpt
        if page > mamba_page:
            mamba_padding = (page - mamba_page) / mamba_page * 100
        group_size, num_groups, padding = _group_layout(attn_layers, h.num_gdn_layers)
        gdn_groups = cdiv(h.num_gdn_layers, group_size)
        per_gdn = (2 if s.enable_prefix_caching else 1) + s.num_spec_tokens
        attn_blocks = cdiv(s.max_model_len, block_size) * cdiv(attn_layers, group_size)
        blocks_per_request = attn_blocks + gdn_groups * per_gdn
        waste = padding / h.num_gdn_layers * 100 if padding else 0.0
    else:
        mamba_page = 0
        block_size = DENSE_BLOCK_SIZE
        page = block_size * bpt
        group_size, num_groups, padding = attn_layers, 1, 0
        blocks_per_request = cdiv(s.max_model_len, block_size)
        waste = 0.0

    num_blocks = max(0, available) // page // group_size
    needed = blocks_per_request * page * group_size
    return KvFigures(
        weights_gib=weights,
        drafter_gib=drafter,
        requested_bytes=requested,
        activation_bytes=activation,
        non_torch_bytes=non_torch,
        cudagraph_bytes=cudagraph,
        tq_reserve_bytes=tq_reserve,
        available_bytes=available,
        block_size=block_size,
        attn_page_bytes=page,
        mamba_page_bytes=mamba_page,
        mamba_padding_pct=mamba_padding,
        padding_layers=padding,
        padding_waste_pct=waste,
        group_size=group_size,
        num_groups=num_groups,
        num_blocks=num_blocks,
        blocks_per_request=blocks_per_request,
        needed_bytes=needed,
    )


def capture_sizes(max_num_seqs: int, num_spec_tokens: int) -> tuple[list[int], list[int]]:
    """CUDA-graph capture sizes: (mixed/PIECEWISE, decode/FULL)."""
    base = [1, 2, 4, *range(8, 257, 8), *range(272, 513, 16)]
    step = 1 + num_spec_tokens
    largest_mixed = min(512, 2 * max_num_seqs * step)
    largest_full = min(256, max_num_seqs * step)
    mixed = [n for n in base if n <= largest_mixed and n % step == 0]
    full = [n for n in base if n <= largest_full and n % step == 0]
    return mixed or [step], full or [step]

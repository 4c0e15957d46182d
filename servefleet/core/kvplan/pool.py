"""vLLM's KV-pool arithmetic: page and block size, KV-cache groups, blocks per request, and
the two numbers the boot log prints, in the engine version's own meaning.

Follows vLLM 0.21.0 (same structure to 0.33.0): ``vllm/v1/kv_cache_interface.py`` (page
sizes), ``vllm/platforms/interface.py _align_hybrid_block_size`` (hybrid block size),
``vllm/v1/core/kv_cache_utils.py`` (grouping, ``num_blocks = avail // page // group_size``,
``max_concurrency`` and ``GPU KV cache size``). The reported token count changed meaning at
0.21.0: before, ``num_blocks // num_groups × block_size``; from 0.21.0,
``int(max_concurrency × max_model_len)``.

Full attention + sliding window (gpt-oss, Gemma 3), vLLM's hybrid KV-cache manager
(``_get_kv_cache_groups_uniform_page_size``): sliding and full layers have the same page, so
the block stays 16 tokens; layers are grouped by spec into groups of ``group_size`` layers
(the smaller count, or the larger when it is under 1.5 × the smaller; padding layers fill
the last group), every group shares the pool's ``num_blocks = avail // page // group_size``,
a full group needs ``cdiv(max_model_len, block)`` blocks per request and a sliding group
``cdiv(min(sliding_window − 1 + T, max_model_len), block) + 1``
(``SlidingWindowSpec.max_memory_usage_bytes``), where ``T`` is ``max_num_batched_tokens``
and, from 0.26.0, ``max_in_flight_tokens`` (two batches under async scheduling).
With the hybrid manager disabled (``--disable-hybrid-kv-cache-manager``, a KV connector or
KV events: ``unify_hybrid_kv_cache_specs``) every sliding layer is sized as full attention:
one group, the dense pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servefleet.core.errors import ConfigError
from servefleet.core.kvplan.modelconfig import ModelFacts

GIB = 1024**3
ALIGN = 16
"""Smallest kernel block size (FlashInfer [16, 32, 64]; FlashAttention with float32 state)."""
DENSE_BLOCK_SIZE = 16
"""vLLM's default cache block size for attention-only models on CUDA."""
TURBOQUANT_SLOT = {"turboquant_k8v4": 388, "turboquant_4bit_nc": 262, "turboquant_3bit_nc": 198}
"""Bytes per KV head per token (K and V together), ``TQFullAttentionSpec`` slot sizes."""
NEW_REPORT = (0, 21)
"""From this version ``GPU KV cache size`` is ``int(max_concurrency × max_model_len)``."""
IN_FLIGHT_SINCE = (0, 26)
"""From here a sliding group's per-request bound counts ``max_in_flight_tokens``
(``max_concurrent_batches × max_num_batched_tokens``, 2 batches under async scheduling)
instead of ``max_num_batched_tokens`` (vllm-project/vllm#47728): read in the 0.25.1 and
0.26.0 wheels (``SlidingWindowSpec.max_memory_usage_bytes``: one batch in 0.25.1, in-flight
tokens in 0.26.0) and reproduced to the token by two real 0.26.0 boots on an H200
(gpt-oss-20b's shapes, 2,477,616 tokens; Gemma 3 27B's, 234,148 tokens). Before 0.26 one
batch, which the 0.13 GB10 gpt-oss boot shows as well."""
SLIDING_SOURCE_ONLY = ("sliding-window sizing from vLLM source, checked against real boots: "
                       "gpt-oss (vLLM 0.13, GB10; 0.26.0, H200) and Gemma 3 (0.26.0, H200)")
"""What backs a sliding-window layout, said with every plan of one."""


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


def resolve_kv_dtype(facts: ModelFacts, kv_dtype: str | None) -> tuple[str, str]:
    """The cache dtype vLLM uses for ``--kv-cache-dtype`` (``None``: ``auto``) and, when the
    checkpoint decided it, why. Under ``auto`` a checkpoint that declares an FP8 KV cache
    (:class:`~servefleet.core.kvplan.modelconfig.KvQuant`) is cached in FP8, not in the model
    dtype; a declared KV quantization the planner does not model is refused."""
    dtype = kv_dtype or "auto"
    quant = facts.kv_quant
    if quant is None:
        return dtype, ""
    if dtype == "auto":
        if quant.dtype is None:
            raise ConfigError(
                f"{facts.source}: field {quant.where.split(':')[0]!r} is "
                f"{quant.where.split(': ', 1)[-1]}: a KV-cache quantization vLLM's "
                "--kv-cache-dtype auto does not resolve to a dtype the KV planner models "
                "(only an FP8 KV cache: ModelOpt kv_cache_quant_algo FP8, compressed-tensors "
                "kv_cache_scheme {num_bits: 8, type: float}); set vllm.kv_cache_dtype "
                "explicitly (fp8 or bfloat16) to plan it")
        return quant.dtype, (f"KV {quant.dtype} under --kv-cache-dtype auto: the checkpoint "
                             f"declares it ({quant.where})")
    if quant.method == "compressed-tensors" and dtype in ("bfloat16", "float16"):
        raise ConfigError(
            f"{facts.source}: field 'quantization_config.kv_cache_scheme' declares an FP8 KV "
            f"cache and vllm.kv_cache_dtype is {dtype}: vLLM's attention layer forced fp8 for "
            "compressed-tensors kv_cache_scheme whatever --kv-cache-dtype said (\"llm-compressor "
            "models need to set cache_dtype to fp8\"), later versions honour an explicit "
            "choice, so the element size depends on the build; set vllm.kv_cache_dtype to "
            "auto or fp8 (both cache in fp8) to plan it")
    return dtype, ""


def kv_bytes_per_token_layer(facts: ModelFacts, kv_dtype: str | None, tp: int = 1) -> int:
    """Bytes one token takes in one attention layer for ``--kv-cache-dtype`` (``auto``
    resolved by :func:`resolve_kv_dtype`)."""
    dtype, _ = resolve_kv_dtype(facts, kv_dtype)
    if facts.mla:
        return _mla_bytes_per_token_layer(facts, dtype)
    heads = max(1, facts.num_kv_heads // tp)
    if dtype == "auto":
        return heads * 2 * facts.head_dim * facts.dtype_bytes
    if dtype in ("bfloat16", "float16"):
        return heads * 2 * facts.head_dim * 2
    if dtype in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"):
        return heads * 2 * facts.head_dim
    if dtype in TURBOQUANT_SLOT:
        return heads * TURBOQUANT_SLOT[dtype]
    if dtype in ("int8_per_token_head", "fp8_per_token_head"):
        return heads * 2 * facts.head_dim + 2 * heads * 4
    raise ConfigError(f"vllm.kv_cache_dtype {dtype!r} is not modelled by the KV planner; "
                      "plan with auto, fp8 or turboquant_{k8v4,4bit_nc,3bit_nc}")


MLA_FP8_DS_BYTES = 656
"""``fp8_ds_mla``: 512 fp8 latent values, 4 float32 scales and 64 bf16 rope values a token
(``MLAAttentionSpec``)."""


def _mla_bytes_per_token_layer(facts: ModelFacts, dtype: str) -> int:
    """One token's MLA latent in one layer: ``kv_lora_rank + qk_rope_head_dim`` elements, no
    separate V, replicated on every tensor-parallel rank."""
    if dtype == "auto":
        return facts.head_dim * facts.dtype_bytes
    if dtype in ("bfloat16", "float16"):
        return facts.head_dim * 2
    if dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        return facts.head_dim
    if dtype == "fp8_ds_mla":
        return MLA_FP8_DS_BYTES
    raise ConfigError(f"vllm.kv_cache_dtype {dtype!r} with multi-head latent attention is not "
                      "modelled by the KV planner; plan with auto, fp8 or fp8_ds_mla")


def state_page_bytes(facts: ModelFacts, num_spec: int, tp: int = 1) -> int:
    """One state layer's state (conv + temporal), ``MambaSpec`` page size: Gated DeltaNet's,
    or Mamba-2's (:class:`~servefleet.core.kvplan.modelconfig.Mamba2Facts`; ``n_groups`` is
    widened to ``tp`` where it does not divide, ``extra_groups_for_head_shards``)."""
    mamba = facts.mamba2
    if mamba is not None:
        groups = mamba.n_groups if mamba.n_groups % tp == 0 else tp
        channels = (mamba.num_heads * mamba.head_dim + 2 * groups * mamba.state_size) // tp
        conv = channels * (mamba.conv_kernel - 1 + num_spec) * facts.dtype_bytes
        ssm = (mamba.num_heads // tp) * mamba.head_dim * mamba.state_size
        return conv + ssm * mamba.ssm_dtype_bytes
    gdn = facts.gdn
    assert gdn is not None
    conv_dim = (gdn.k_dim * gdn.num_k_heads * 2 + gdn.v_dim * gdn.num_v_heads) // tp
    conv = conv_dim * (gdn.conv_kernel - 1 + num_spec) * facts.dtype_bytes
    temporal = (gdn.num_v_heads // tp) * gdn.v_dim * gdn.k_dim * gdn.ssm_dtype_bytes
    return conv + temporal


@dataclass(frozen=True)
class PoolLayout:
    """How vLLM lays out the KV pool of one model with one set of flags."""

    block_size: int
    page_bytes: int
    """Bytes of one block of one layer (every layer the same size in hybrids)."""
    attention_layers: int
    state_layers: int
    group_size: int
    attention_groups: int
    state_groups: int
    state_blocks: int
    """Blocks one request holds per state group (1 + spec, or 2 + spec with prefix caching)."""
    mamba_mode: str
    kv_note: str = ""
    """Why the KV element size is what it is when the checkpoint decided it (an FP8 KV cache
    it declares, under ``--kv-cache-dtype auto``); empty otherwise."""
    sliding_layers: int = 0
    sliding_groups: int = 0
    sliding_window: int = 0
    in_flight_tokens: int = 0
    """``T`` of a sliding group's per-request bound (see the module docstring)."""
    sliding_note: str = ""
    """How sliding layers were sized (hybrid manager or as full attention), for messages."""
    state_kind: str = "GDN"
    """What the state layers are (``GDN`` or ``Mamba-2``), for messages."""

    @property
    def num_groups(self) -> int:
        return self.attention_groups + self.state_groups + self.sliding_groups

    @property
    def padding_layers(self) -> int:
        """Layers vLLM adds so every group has ``group_size`` layers ("Add N padding layers")."""
        if not self.state_layers and not self.sliding_layers:
            return 0
        return (self.num_groups * self.group_size - self.attention_layers - self.state_layers
                - self.sliding_layers)

    def sliding_blocks(self, max_model_len: int) -> int:
        """Blocks one request holds per sliding group (``SlidingWindowSpec``)."""
        if not self.sliding_groups:
            return 0
        tokens = min(self.sliding_window - 1 + self.in_flight_tokens, max_model_len)
        return cdiv(tokens, self.block_size) + 1

    @property
    def bytes_per_block_row(self) -> int:
        """Bytes that one pool block costs across the layers sharing it."""
        return self.page_bytes * self.group_size

    def blocks_per_request(self, max_model_len: int) -> int:
        """Blocks one ``max_model_len`` request needs across every group."""
        # Mamba cache mode "all" keeps a state block per attention block of the request.
        per_state = self.state_blocks + (cdiv(max_model_len, self.block_size)
                                         if self.mamba_mode == "all" else 0)
        return (self.attention_groups * cdiv(max_model_len, self.block_size)
                + self.state_groups * per_state
                + self.sliding_groups * self.sliding_blocks(max_model_len))

    def describe(self) -> str:
        """One line for notes: block, page, groups (and the KV dtype when the checkpoint
        chose it)."""
        note = f"; {self.kv_note}" if self.kv_note else ""
        if self.sliding_layers:
            pad = f", {self.padding_layers} padding layers" if self.padding_layers else ""
            return (f"block {self.block_size} tokens, {self.attention_layers} full-attention + "
                    f"{self.sliding_layers} sliding-window layers (window "
                    f"{self.sliding_window}) in {self.num_groups} groups of {self.group_size}"
                    f"{pad}, {self.page_bytes} B per layer block, a sliding group holds "
                    f"≤ window − 1 + {self.in_flight_tokens:,} tokens per request; "
                    f"{self.sliding_note}{note}")
        if not self.state_layers:
            sliding = f"; {self.sliding_note}" if self.sliding_note else ""
            return (f"block {self.block_size} tokens, {self.attention_layers} attention layers, "
                    f"{self.page_bytes} B per layer block{sliding}{note}")
        pad = f", {self.padding_layers} padding layers" if self.padding_layers else ""
        drafts = f" + {self.state_blocks}" if self.state_blocks else ""
        held = (f"a state block per attention block{drafts}" if self.mamba_mode == "all"
                else f"{self.state_blocks} state blocks")
        return (f"block {self.block_size} tokens, page {self.page_bytes:,} B, "
                f"{self.attention_layers} attention + {self.state_layers} {self.state_kind} "
                f"layers in {self.num_groups} groups of {self.group_size}{pad}, mamba cache "
                f"'{self.mamba_mode}' ({held} per group per request){note}")


def layout(facts: ModelFacts, *, kv_dtype: str | None, num_spec: int = 0, mtp: bool = False,
           prefix_caching: bool = False, tp: int = 1,
           version: tuple[int, ...] = (0, 21), dense_block_size: int = DENSE_BLOCK_SIZE,
           max_num_batched_tokens: int = 8192, concurrent_batches: int = 1,
           hybrid_manager: bool = True, hybrid_off_why: str = "",
           ) -> PoolLayout:
    """The pool layout of ``facts`` with these engine settings (``dense_block_size``: the
    platform's cache block for attention-only models; 16 on CUDA, 128 on the CPU build).
    For sliding-window models: ``max_num_batched_tokens`` and ``concurrent_batches`` (2 under
    async scheduling) bound a sliding group per request; ``hybrid_manager`` off
    (``hybrid_off_why`` says why) sizes every sliding layer as full attention."""
    per_token = kv_bytes_per_token_layer(facts, kv_dtype, tp)
    _, note = resolve_kv_dtype(facts, kv_dtype)
    # MTP draft layers are full-attention layers of the target model's KV pool.
    attention = facts.full_attention_layers + (facts.mtp_layers if mtp else 0)
    if facts.sliding and hybrid_manager:
        return _sliding_layout(facts, attention, per_token, note, version=version,
                               block=dense_block_size,
                               max_num_batched_tokens=max_num_batched_tokens,
                               concurrent_batches=concurrent_batches)
    if facts.sliding:  # unify_hybrid_kv_cache_specs: sliding layers become full attention
        return PoolLayout(
            block_size=dense_block_size, page_bytes=dense_block_size * per_token,
            attention_layers=attention + facts.sliding_layers, state_layers=0,
            group_size=attention + facts.sliding_layers, attention_groups=1, state_groups=0,
            state_blocks=0, mamba_mode="none", kv_note=note,
            sliding_note=(f"hybrid KV-cache manager off ({hybrid_off_why}): the "
                          f"{facts.sliding_layers} sliding-window layers are sized as full "
                          f"attention; {SLIDING_SOURCE_ONLY}"))
    if not facts.hybrid:
        return PoolLayout(block_size=dense_block_size, page_bytes=dense_block_size * per_token,
                          attention_layers=attention, state_layers=0, group_size=attention,
                          attention_groups=1, state_groups=0, state_blocks=0, mamba_mode="none",
                          kv_note=note)
    state = facts.linear_layers
    page = state_page_bytes(facts, num_spec, tp)
    small, large = min(attention, state), max(attention, state)
    group = large if large < 1.5 * small else small
    if prefix_caching and facts.mamba2 is not None:
        # Mamba-2 models support Mamba prefix caching (mode "all"): the attention block is
        # a multiple of the Mamba chunk (``_align_hybrid_block_size``), and a request keeps
        # one state block per attention block, plus its drafts.
        chunk = math.lcm(facts.mamba2.chunk_size, ALIGN)
        block = chunk * cdiv(cdiv(page, per_token), chunk)
        mode, state_blocks = "all", num_spec
    else:
        block = ALIGN * cdiv(page, ALIGN * per_token)
        mode = "align" if prefix_caching else "none"
        state_blocks = (2 if prefix_caching else 1) + num_spec
        if prefix_caching and version >= (0, 33):
            state_blocks += 1  # 0.33: one prefill checkpoint block per GDN group
    return PoolLayout(block_size=block, page_bytes=block * per_token, attention_layers=attention,
                      state_layers=state, group_size=group,
                      attention_groups=cdiv(attention, group), state_groups=cdiv(state, group),
                      state_blocks=state_blocks, mamba_mode=mode, kv_note=note,
                      state_kind=facts.state_kind)


def _sliding_layout(facts: ModelFacts, attention: int, per_token: int, note: str, *,
                    version: tuple[int, ...], block: int, max_num_batched_tokens: int,
                    concurrent_batches: int) -> PoolLayout:
    """Full + sliding-window groups of the hybrid KV-cache manager (module docstring)."""
    sliding = facts.sliding_layers
    small, large = min(attention, sliding), max(attention, sliding)
    group = large if large < 1.5 * small or not small else small
    in_flight = max_num_batched_tokens
    basis = f"T = max_num_batched_tokens {max_num_batched_tokens:,}"
    if version >= IN_FLIGHT_SINCE:
        in_flight *= max(concurrent_batches, 1)
        basis = (f"T = max_in_flight_tokens {in_flight:,} ({max(concurrent_batches, 1)} "
                 f"× {max_num_batched_tokens:,} batched tokens)")
    return PoolLayout(block_size=block, page_bytes=block * per_token,
                      attention_layers=attention, state_layers=0, group_size=group,
                      attention_groups=cdiv(attention, group), state_groups=0, state_blocks=0,
                      mamba_mode="none", kv_note=note, sliding_layers=sliding,
                      sliding_groups=cdiv(sliding, group),
                      sliding_window=facts.sliding_window or 0, in_flight_tokens=in_flight,
                      sliding_note=f"hybrid KV-cache manager, {basis}; {SLIDING_SOURCE_ONLY}")


@dataclass(frozen=True)
class PoolFigures:
    """What the boot log will print for a given KV budget."""

    num_blocks: int
    max_concurrency: float
    kv_cache_tokens: int
    """``GPU KV cache size`` in the engine version's meaning."""
    max_model_len: int


def reported_tokens(lay: PoolLayout, num_blocks: int, max_model_len: int,
                    version: tuple[int, ...]) -> int:
    """``GPU KV cache size`` for ``num_blocks`` in the meaning of ``version``."""
    if version >= NEW_REPORT:
        return int(num_blocks / lay.blocks_per_request(max_model_len) * max_model_len)
    return num_blocks // lay.num_groups * lay.block_size


@dataclass(frozen=True)
class ReportedMeaning:
    """What ``GPU KV cache size`` means in one engine version, and the same pool in the
    other meaning (the two differ for hybrid models)."""

    this: str
    other: str
    other_versions: str
    other_tokens: int


OLD_MEANING = "num_blocks // groups × block_size"
NEW_MEANING = "int(max_concurrency × max_model_len)"


def reported_meaning(lay: PoolLayout, pool: PoolFigures,
                     version: tuple[int, ...]) -> ReportedMeaning:
    """How ``version`` reports ``pool``, and what the versions on the other side of 0.21
    print for the very same blocks."""
    new = version >= NEW_REPORT
    other = (0, 20) if new else NEW_REPORT
    return ReportedMeaning(
        this=NEW_MEANING if new else OLD_MEANING, other=OLD_MEANING if new else NEW_MEANING,
        other_versions="before 0.21" if new else "0.21 and later",
        other_tokens=reported_tokens(lay, pool.num_blocks, pool.max_model_len, other))


def figures(lay: PoolLayout, available_bytes: float, max_model_len: int,
            version: tuple[int, ...]) -> PoolFigures:
    """The pool that ``available_bytes`` of KV memory gives."""
    blocks = max(0, int(available_bytes) // lay.page_bytes // lay.group_size)
    return PoolFigures(num_blocks=blocks,
                       max_concurrency=blocks / lay.blocks_per_request(max_model_len),
                       kv_cache_tokens=reported_tokens(lay, blocks, max_model_len, version),
                       max_model_len=max_model_len)


def bytes_for(lay: PoolLayout, *, max_model_len: int, version: tuple[int, ...],
              tokens: int | None = None, concurrency: float | None = None) -> int:
    """The least KV memory whose pool reaches ``tokens`` (as reported) or ``concurrency``."""
    per = lay.blocks_per_request(max_model_len)
    if concurrency is not None:
        blocks = cdiv(round(concurrency * per * 1000), 1000)
    else:
        assert tokens is not None
        if version >= NEW_REPORT:
            blocks = cdiv(tokens * per, max_model_len)
        else:
            blocks = cdiv(tokens, lay.block_size) * lay.num_groups
    while reported_tokens(lay, blocks, max_model_len, version) < (tokens or 0):
        blocks += 1
    return blocks * lay.bytes_per_block_row

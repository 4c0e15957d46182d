"""Model facts the KV pool depends on, read from a checkpoint's own ``config.json``.

Only what vLLM's KV-cache specs use: which layers are full attention and which are linear
(Gated DeltaNet) state, the KV heads and head dim, the GDN state shapes and dtype, the MTP
layers, and the KV-cache quantization the checkpoint declares (vLLM uses it under
``--kv-cache-dtype auto``). Multimodal configs keep the text tower under ``text_config``.

Sliding-window layers are modelled where the config says which layers slide:
``layer_types`` with ``sliding_attention`` and ``full_attention`` entries (gpt-oss, Gemma 3
as recent exports write it), or a Gemma 3 text config without them (its
``sliding_window_pattern``, 6 by default: every 6th layer global, as transformers'
``Gemma3TextConfig`` lays them out). gpt-oss's attention sinks are one learned logit per
head (``GptOssAttention.sinks``), not cached tokens: they change no KV spec.

What the planner does not model it refuses here, naming the file, the field and why, never
planning such a model as plain full attention: Mamba/SSM layers other than Gated DeltaNet
(Nemotron-H's ``hybrid_override_pattern``, Jamba's ``attn_layer_period``, ``ssm_state_size``
…), sliding windows whose layers the config does not lay out (``sliding_window`` in use
without ``layer_types``: Mistral-7B-v0.1, Gemma 2's ``interleaved_sliding_window``), sliding
layers beside Gated-DeltaNet layers, per-layer-type head shapes (Gemma 4's
``global_head_dim``/``num_global_key_value_heads``), DeepSeek sparse attention, chunked local
attention, and cross-layer KV sharing (``num_kv_shared_layers``). A multimodal checkpoint's
encoders (``vision_config``, ``audio_config``) are read, not refused: its text tower's
layout is right, and a cold prediction says it leaves out their profiling pass.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefleet.core.errors import ConfigError

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


@dataclass(frozen=True)
class GdnFacts:
    """Gated-DeltaNet (linear attention) layer shapes."""

    num_k_heads: int
    num_v_heads: int
    k_dim: int
    v_dim: int
    conv_kernel: int
    ssm_dtype_bytes: int
    """Bytes of the temporal state (``mamba_ssm_dtype``; float32 in Qwen3.5/3.6)."""


KV_FP8 = "fp8_e4m3"
"""vLLM's cache dtype for a checkpoint that declares an FP8 KV cache
(``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP``: ``fp8`` → ``fp8_e4m3``)."""


@dataclass(frozen=True)
class KvQuant:
    """The KV-cache quantization a checkpoint's ``quantization_config`` declares.

    Under ``--kv-cache-dtype auto`` vLLM caches in it, not in the model dtype: ModelOpt's
    ``kv_cache_quant_algo``/``kv_cache_scheme`` through ``resolve_kv_cache_dtype_string``
    (``vllm/utils/torch_utils.py``: ``FP8`` → ``fp8_e4m3``, anything else falls back to
    ``auto`` with a warning), compressed-tensors' ``kv_cache_scheme`` through the attention
    layer (``vllm/model_executor/layers/attention/attention.py``: "llm-compressor models need
    to set cache_dtype to fp8")."""

    method: str
    """``modelopt`` or ``compressed-tensors``."""
    where: str
    """The field and value, for messages: ``quantization_config.kv_cache_quant_algo: FP8``."""
    dtype: str | None
    """The cache dtype vLLM uses under ``auto`` (``fp8_e4m3``); ``None``: not modelled."""


@dataclass(frozen=True)
class ModelFacts:
    """What the KV pool of one model depends on."""

    source: str
    """Where the facts came from (file, sha256 prefix), for messages."""
    full_attention_layers: int
    linear_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    """Model dtype: the KV element size under ``--kv-cache-dtype auto``."""
    gdn: GdnFacts | None
    mtp_layers: int
    max_position_embeddings: int | None
    activation_bytes_per_token: int = 0
    """Activation bytes one batched token adds to vLLM's profiling peak: the fused-MoE
    intermediate caches (``top_k × 3 × moe_intermediate_size``, and ``3 ×`` the shared
    experts' width, which every token runs too; ``3 × intermediate_size`` for a dense MLP)
    plus four hidden-sized buffers, in the model dtype. 0: unknown."""
    kv_quant: KvQuant | None = None
    """The KV-cache quantization the checkpoint declares (``None``: none)."""
    has_quantization_config: bool = False
    """Whether the config carries a ``quantization_config`` at all (a ModelOpt checkpoint
    without one keeps it in ``hf_quant_config.json``, which vLLM reads instead)."""
    sliding_layers: int = 0
    """Sliding-window attention layers (``SlidingWindowSpec``); not counted in
    ``full_attention_layers``."""
    sliding_window: int | None = None
    """Their window in tokens (``sliding_window``)."""
    mla: bool = False
    """Multi-head latent attention (``kv_lora_rank``: DeepSeek-V2/V3, Kimi K2): one latent of
    :attr:`head_dim` = ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer, no
    separate V, shared by every head and every tensor-parallel rank (``MLAAttentionSpec``)."""
    architectures: tuple[str, ...] = ()
    """``architectures`` of the config (vLLM picks some defaults by architecture)."""
    hidden_activation_bytes_per_token: int = 0
    """The part of :attr:`activation_bytes_per_token` in hidden-sized buffers, which every
    tensor-parallel rank holds whole (the MLP's part is split across the ranks)."""
    encoders: tuple[str, ...] = ()
    """Top-level encoder configs (:data:`ENCODER_KEYS`) beside the text model: vLLM profiles
    such an encoder with its largest input item before it sizes the pool and keeps an
    encoder cache beside it, neither of which the planner models (``vllm.language_model_only``
    leaves the encoder out)."""
    vocab_size: int = 0
    """Rows of the output projection (``vocab_size``): vLLM's V1 runner profiles a sampler run
    over that many logits per sequence (:mod:`servefleet.core.kvplan.reserve`). 0: unknown."""
    moe: bool = False
    """Mixture-of-experts MLPs (``num_experts``/``num_local_experts``/``n_routed_experts``):
    vLLM keeps most such models on its V1 model runner
    (:func:`servefleet.core.kvplan.reserve.v2_model_runner`)."""

    @property
    def hybrid(self) -> bool:
        """Attention plus linear-attention state layers."""
        return self.linear_layers > 0 and self.gdn is not None

    @property
    def sliding(self) -> bool:
        """Full attention plus sliding-window layers (vLLM's hybrid KV-cache manager)."""
        return self.sliding_layers > 0


def _int(cfg: dict[str, Any], key: str, where: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where}: field {key!r} is {value!r}, not a non-negative integer; "
                          "use the checkpoint's own config.json")
    return value


NOT_PLANNABLE = ("remove model.config from the profile to deploy it without a KV "
                 "prediction (plan then says 'KV pool not predicted') and read the pool from "
                 "its first boot's 'GPU KV cache size'")
"""The nearest way out of a refusal: the planner cannot predict this model's pool."""

GDN_KEYS = ("linear_num_value_heads", "linear_num_key_heads")
"""Keys of the Gated-DeltaNet layout the planner models (Qwen3-Next, Qwen3.5/3.6)."""
SSM_KEYS = ("ssm_state_size", "state_size", "time_step_rank", "ssm_cfg", "n_groups",
            "mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_dt_rank",
            "mamba_num_heads", "mamba_head_dim", "mamba_n_heads", "mamba_d_head",
            "mamba_n_groups", "mamba_chunk_size")
"""Keys that give Mamba/SSM state layers away (Mamba, Mamba-2, Jamba, Nemotron-H, Bamba,
Zamba, Falcon-H1, Granite 4.0-H)."""
MAMBA_LAYOUT_KEYS = ("hybrid_override_pattern", "layers_block_type", "attn_layer_indices",
                     "attn_layer_period", "attn_layer_offset", "attn_type_list")
"""Keys that lay out attention among Mamba/SSM or linear layers other than GDN's."""


def _refuse(source: str, field: str, value: Any, reason: str) -> ConfigError:
    shown = value if not isinstance(value, str) or len(value) <= 60 else value[:57] + "..."
    return ConfigError(f"{source}: field {field!r} is {shown!r}: {reason}; {NOT_PLANNABLE}")


def _check_modelled(text: dict[str, Any], source: str) -> None:
    """Refuse what the planner does not model (see the module docstring)."""
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        raise _refuse(source, "hybrid_override_pattern", pattern, (
            f"a Mamba-2 hybrid (Nemotron-H: {pattern.count('M')} Mamba layers 'M', "
            f"{pattern.count('*')} attention layers '*'); vLLM keeps a Mamba-2 state "
            "(MambaSpec: conv + SSM state from mamba_num_heads, mamba_head_dim, "
            "ssm_state_size, n_groups) per Mamba layer, which the KV planner does not model "
            "(it models Gated-DeltaNet hybrids only), so planning it as num_hidden_layers "
            "attention layers would be wrong"))
    for key in MAMBA_LAYOUT_KEYS[1:]:
        if text.get(key) is not None:
            raise _refuse(source, key, text[key], (
                "attention interleaved with Mamba/SSM or linear-attention layers (Jamba-like "
                "layout); vLLM keeps a state per such layer (MambaSpec) that the KV planner "
                "does not model (it models Gated-DeltaNet hybrids only)"))
    if not any(key in text for key in GDN_KEYS):
        ssm = [key for key in SSM_KEYS if text.get(key) is not None] + sorted(
            key for key in text if key.startswith("mamba_") and key not in SSM_KEYS
            and text[key] is not None)
        if ssm:
            raise _refuse(source, ssm[0], text[ssm[0]], (
                "Mamba/SSM state layers without the Gated-DeltaNet layout "
                f"({', '.join(GDN_KEYS)}); vLLM keeps a state per SSM layer that the KV "
                "planner does not model"))
    shared = text.get("num_kv_shared_layers")
    if isinstance(shared, int) and shared > 0:
        raise _refuse(source, "num_kv_shared_layers", shared, (
            "cross-layer KV sharing (Gemma 3n): the last layers reuse earlier layers' KV and "
            "hold none of their own, which the KV planner does not model"))
    index = text.get("index_topk")
    if index is not None:
        raise _refuse(source, "index_topk", index, (
            "DeepSeek sparse attention (V3.2): beside the MLA latent every layer keeps an "
            "indexer key cache, which the KV planner does not model"))
    chunk = text.get("attention_chunk_size")
    if isinstance(chunk, int) and chunk > 0:
        raise _refuse(source, "attention_chunk_size", chunk, (
            "chunked local attention (Llama 4): those layers hold at most one chunk "
            "(ChunkedLocalAttentionSpec), which the KV planner does not model"))
    cross = text.get("cross_attention_layers")
    if cross:
        raise _refuse(source, "cross_attention_layers", cross, (
            "cross-attention layers (encoder KV, CrossAttentionSpec), which the KV planner "
            "does not model"))
    for key in PER_TYPE_HEAD_KEYS:
        if text.get(key) is not None:
            raise _refuse(source, key, text[key], (
                "full-attention layers with their own head shape (Gemma 4: "
                "global_head_dim, num_global_key_value_heads, attention_k_eq_v): their page "
                "differs from the sliding layers', and vLLM unifies the pages by growing the "
                "smaller layers' block size, which the KV planner does not model"))
    types = text.get("layer_types")
    window = text.get("sliding_window")
    interleaved = text.get("interleaved_sliding_window")
    if isinstance(types, list) and types:
        return  # the layer types decide
    if _gemma3_pattern(text) is not None:
        return  # Gemma 3's layout comes from its sliding_window_pattern
    if isinstance(interleaved, int) and interleaved > 0:
        raise _refuse(source, "interleaved_sliding_window", interleaved, _SLIDING)
    if isinstance(window, int) and not isinstance(window, bool) and window > 0 \
            and text.get("use_sliding_window") is not False:
        pattern_note = (f" every {text['sliding_window_pattern']}th layer global"
                        if text.get("sliding_window_pattern") is not None else "")
        raise _refuse(source, "sliding_window", window, _SLIDING + (
            f" (use_sliding_window is {text.get('use_sliding_window')!r}, not false; "
            f"no layer_types{',' + pattern_note if pattern_note else ''})"))


PER_TYPE_HEAD_KEYS = ("global_head_dim", "num_global_key_value_heads", "attention_k_eq_v")
"""Keys that give full-attention layers another head shape than the sliding ones (Gemma 4)."""
GEMMA3_TYPES = ("gemma3", "gemma3_text")
"""``model_type`` values whose layer layout transformers derives from
``sliding_window_pattern`` (default 6) when ``layer_types`` is absent."""


def _gemma3_pattern(text: dict[str, Any]) -> int | None:
    """Gemma 3 without ``layer_types``: every ``pattern``-th layer is global."""
    window = text.get("sliding_window")
    if text.get("model_type") not in GEMMA3_TYPES or not isinstance(window, int) \
            or window <= 0:
        return None
    pattern = text.get("sliding_window_pattern", 6)
    return pattern if isinstance(pattern, int) and pattern > 0 else None


_SLIDING = ("sliding-window attention whose layers the config does not lay out (no "
            "layer_types: Mistral-7B-v0.1, Gemma 2): vLLM sizes a sliding layer's blocks per "
            "request by the window (SlidingWindowSpec), not by max_model_len, and groups "
            "sliding and full layers apart; the KV planner models sliding layers only where "
            "layer_types (or Gemma 3's sliding_window_pattern) says which they are; add "
            "layer_types to a copy of the config and pin that")


def _kv_quant(config: dict[str, Any], text: dict[str, Any]) -> tuple[KvQuant | None, bool]:
    """The checkpoint's declared KV-cache quantization, and whether it has a
    ``quantization_config`` at all (see :class:`KvQuant`)."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        quant = text.get("quantization_config")
    if not isinstance(quant, dict):
        return None, False
    method = str(quant.get("quant_method") or "")
    producer = quant.get("producer")
    modelopt = method.startswith("modelopt") or (
        isinstance(producer, dict) and producer.get("name") == "modelopt")
    nested = quant.get("quantization")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else {}
    if modelopt:
        # resolve_kv_cache_dtype_string: the first of these that is set decides.
        for key in ("kv_cache_scheme", "kv_cache_quant_algo"):
            for scope, table in (("quantization.", inner), ("", quant)):
                if table.get(key):
                    return _modelopt(f"quantization_config.{scope}{key}", table[key]), True
        return None, True
    scheme = quant.get("kv_cache_scheme")
    if scheme:
        where = f"quantization_config.kv_cache_scheme: {_show(scheme)}"
        name = method or "quantization_config"
        fp8 = isinstance(scheme, dict) and scheme.get("num_bits") == 8 \
            and scheme.get("type") == "float"
        return KvQuant(name, where, KV_FP8 if fp8 and method == "compressed-tensors"
                       else None), True
    algo = quant.get("kv_cache_quant_algo") or inner.get("kv_cache_quant_algo")
    if algo:
        return KvQuant(method or "quantization_config",
                       f"quantization_config.kv_cache_quant_algo: {_show(algo)}", None), True
    return None, True


def _modelopt(where: str, value: Any) -> KvQuant:
    if isinstance(value, dict):
        fp8 = value.get("dynamic") is False and value.get("num_bits") == 8 \
            and value.get("type") == "float"
    else:
        fp8 = isinstance(value, str) and value.lower() == "fp8"
    return KvQuant("modelopt", f"{where}: {_show(value)}", KV_FP8 if fp8 else None)


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)


def facts_from_config(config: dict[str, Any], source: str) -> ModelFacts:
    """Parse a Hugging Face ``config.json`` (dict) into :class:`ModelFacts`; a
    :class:`ConfigError` naming the file, the field and the reason for a model the planner
    does not model."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, dict)
    _check_modelled(text, source)
    if text is not config:
        _check_modelled(config, source)
    layers = _int(text, "num_hidden_layers", source)
    types = text.get("layer_types")
    sliding = 0
    if not (isinstance(types, list) and types) and (pattern := _gemma3_pattern(text)):
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                 for i in range(layers)]
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise ConfigError(f"{source}: layer_types has {len(types)} entries but "
                              f"num_hidden_layers is {layers}; fix the config")
        full = sum(1 for t in types if t in ("full_attention", "attention"))
        linear = sum(1 for t in types if t == "linear_attention")
        sliding = sum(1 for t in types if t == "sliding_attention")
        other = layers - full - linear - sliding
        if other:
            unknown = sorted({str(t) for t in types} - {"full_attention", "attention",
                                                         "linear_attention",
                                                         "sliding_attention"})
            raise _refuse(source, "layer_types", unknown, (
                f"layer types {unknown} are not modelled by the KV planner (only full, "
                "sliding-window and linear attention)"))
        if sliding and linear:
            raise _refuse(source, "layer_types", sorted({str(t) for t in types}), (
                f"{sliding} sliding-window layers beside {linear} Gated-DeltaNet layers: "
                "the KV planner models either hybrid, not both in one model"))
        window = text.get("sliding_window")
        if sliding and (not isinstance(window, int) or isinstance(window, bool)
                        or window <= 0):
            raise _refuse(source, "sliding_window", window, (
                f"{sliding} of {layers} layers are sliding_attention but the window is not "
                "a positive integer; use the checkpoint's own config.json"))
    elif "full_attention_interval" in text and "linear_num_value_heads" in text:
        interval = _int(text, "full_attention_interval", source)
        full = sum(1 for i in range(layers) if (i + 1) % interval == 0)
        linear = layers - full
    else:
        full, linear = layers, 0
    heads = _int(text, "num_attention_heads", source)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or _int(text, "hidden_size", source) // heads)
    mla = text.get("kv_lora_rank") is not None
    if mla:
        kv_heads = 1
        head_dim = _int(text, "kv_lora_rank", source) + _int(text, "qk_rope_head_dim", source)
    dtype = str(text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype")
                or "bfloat16")
    gdn = None
    if linear:
        ssm = str(text.get("mamba_ssm_dtype") or dtype)
        gdn = GdnFacts(
            num_k_heads=_int(text, "linear_num_key_heads", source),
            num_v_heads=_int(text, "linear_num_value_heads", source),
            k_dim=_int(text, "linear_key_head_dim", source),
            v_dim=_int(text, "linear_value_head_dim", source),
            conv_kernel=_int(text, "linear_conv_kernel_dim", source),
            ssm_dtype_bytes=DTYPE_BYTES.get(ssm, 2),
        )
    max_pos = text.get("max_position_embeddings")
    kv_quant, has_quant = _kv_quant(config, text)
    return ModelFacts(
        kv_quant=kv_quant, has_quantization_config=has_quant,
        activation_bytes_per_token=_activation_bytes(text, DTYPE_BYTES.get(dtype, 2)),
        hidden_activation_bytes_per_token=_hidden_activation_bytes(
            text, DTYPE_BYTES.get(dtype, 2)),
        source=source, full_attention_layers=full, linear_layers=linear,
        num_kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=DTYPE_BYTES.get(dtype, 2),
        gdn=gdn, mtp_layers=int(text.get("mtp_num_hidden_layers")
                                or text.get("num_nextn_predict_layers") or 0),
        mla=mla, architectures=tuple(str(a) for a in config.get("architectures") or ()),
        max_position_embeddings=max_pos if isinstance(max_pos, int) else None,
        sliding_layers=sliding,
        sliding_window=int(text["sliding_window"]) if sliding else None,
        moe=num_experts(text) > 0,
        vocab_size=_vocab(text),
        encoders=tuple(key for key in ENCODER_KEYS if isinstance(config.get(key), dict)),
    )


ENCODER_KEYS = ("vision_config", "audio_config")
"""The configs of a multimodal checkpoint's encoders (Qwen-VL, Gemma 3, Llama 4, Whisper-like
audio towers) beside its ``text_config``."""


def _vocab(text: dict[str, Any]) -> int:
    """``vocab_size`` when it is a positive integer, else 0 (unknown)."""
    vocab = text.get("vocab_size")
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else 0


EXPERT_COUNT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
"""Where a config states its routed experts, in the order vLLM reads them
(``ModelArchConfigConvertor.get_num_experts`` in the 0.26.0 wheel: Jamba/Qwen, DBRX/ERNIE,
DeepSeek, Mixtral); vLLM keeps a model with experts on its V1 runner."""
EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_k", "moe_topk")
"""Where a config states the experts each token uses (``moe_k``: ERNIE 4.5; ``moe_topk``:
Hunyuan; ``experts_per_token``: gpt-oss)."""


def num_experts(text: dict[str, Any]) -> int:
    """The routed experts (0: a dense model), as vLLM counts them: the first key of
    :data:`EXPERT_COUNT_KEYS` present, a list's first entry, else the largest count of a
    ``block_configs`` MoE block (Nemotron-H)."""
    for key in EXPERT_COUNT_KEYS:
        if key not in text:
            continue
        value = text[key]
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        break  # vLLM takes the first key present; a zero there sends it to block_configs
    blocks = text.get("block_configs")
    counts = [b.get("n_routed_experts") or 0 for b in blocks or () if isinstance(b, dict)
              and b.get("block_type") == "moe"] if isinstance(blocks, list) else []
    return max((c for c in counts if isinstance(c, int)), default=0)


def _shared_expert_width(text: dict[str, Any], moe: int) -> int:
    """The intermediate width of the shared experts every token also runs (0: none):
    ``shared_expert_intermediate_size`` (Qwen2/Qwen3-Next MoE), else the count of shared
    experts (``n_shared_experts``: DeepSeek; ``moe_num_shared_experts``: ERNIE) × the
    expert width."""
    width = text.get("shared_expert_intermediate_size")
    if isinstance(width, int) and not isinstance(width, bool):
        return max(width, 0)
    count = text.get("n_shared_experts") or text.get("moe_num_shared_experts") or 0
    return count * moe if isinstance(count, int) and not isinstance(count, bool) else 0


def _hidden_activation_bytes(text: dict[str, Any], dtype_bytes: int) -> int:
    """See :attr:`ModelFacts.hidden_activation_bytes_per_token`: four hidden-sized buffers."""
    hidden = text.get("hidden_size")
    return 4 * dtype_bytes * hidden if isinstance(hidden, int) else 0


def _activation_bytes(text: dict[str, Any], dtype_bytes: int) -> int:
    """See :attr:`ModelFacts.activation_bytes_per_token`."""
    if not isinstance(text.get("hidden_size"), int):
        return 0
    top_k = next((text[key] for key in EXPERTS_PER_TOKEN_KEYS
                  if isinstance(text.get(key), int) and not isinstance(text[key], bool)), None)
    moe = text.get("moe_intermediate_size") or (
        text.get("intermediate_size") if num_experts(text) else None)
    if isinstance(moe, list) and moe:
        moe = moe[0]
    if isinstance(top_k, int) and isinstance(moe, int):
        mlp = top_k * 3 * moe + 3 * _shared_expert_width(text, moe)
    else:
        dense = text.get("intermediate_size")
        mlp = 3 * dense if isinstance(dense, int) else 0
    return dtype_bytes * mlp + _hidden_activation_bytes(text, dtype_bytes)


def read_pinned(profiles_dir: Path, file: str) -> tuple[bytes, str]:
    """The bytes of a pinned ``config.json`` under ``profiles_dir`` and their sha256; a
    :class:`ConfigError` when it cannot be read."""
    try:
        data = (profiles_dir / file).read_bytes()
    except OSError as error:
        raise ConfigError(f"profiles/{file}: cannot read the pinned model config "
                          f"({error.strerror}); fix model.config.file in the profile") from None
    return data, hashlib.sha256(data).hexdigest()


def load_pinned(profiles_dir: Path, file: str, sha256: str) -> ModelFacts:
    """Read a pinned ``config.json`` under ``profiles_dir`` and check its sha256."""
    where = f"profiles/{file}"
    data, digest = read_pinned(profiles_dir, file)
    if digest != sha256:
        raise ConfigError(f"{where}: sha256 is {digest}, the profile pins {sha256} "
                          "(model.config.sha256); re-check the file and update the pin")
    try:
        config = json.loads(data)
    except ValueError as error:
        raise ConfigError(f"{where}: not JSON ({error}); use the checkpoint's config.json") \
            from None
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: not a JSON object; use the checkpoint's config.json")
    return facts_from_config(config, f"{where} (sha256 {digest[:12]})")


def facts_for_profile(profiles_dir: Path, profile: Any) -> ModelFacts | None:
    """The pinned config of ``profile`` (``model.config``), or ``None`` when it has none."""
    ref = profile.model.config
    if ref is None:
        return None
    return load_pinned(profiles_dir, ref.file, ref.sha256)

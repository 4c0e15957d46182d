"""Model facts the KV pool depends on, read from a checkpoint's own ``config.json``.

Only what vLLM's KV-cache specs use: which layers are full attention and which hold a state
(Gated DeltaNet, or Nemotron-H's Mamba-2 from ``hybrid_override_pattern``), the KV heads and
head dim, the state shapes and dtypes, the MTP layers, and the KV-cache quantization the
checkpoint declares (vLLM uses it under ``--kv-cache-dtype auto``). Multimodal configs keep
the text tower under ``text_config``; a Qwen3-VL-style vision tower is read for the reserve.

Sliding-window layers are modelled where the config says which layers slide:
``layer_types`` with ``sliding_attention`` and ``full_attention`` entries (gpt-oss, Gemma 3
as recent exports write it), or a Gemma 3 text config without them (its
``sliding_window_pattern``, 6 by default: every 6th layer global, as transformers'
``Gemma3TextConfig`` lays them out). gpt-oss's attention sinks are one learned logit per
head (``GptOssAttention.sinks``), not cached tokens: they change no KV spec.

What the planner does not model it refuses here, naming the file, the field and why, never
planning such a model as plain full attention: Mamba/SSM layers other than Gated DeltaNet
and Nemotron-H's (Jamba's ``attn_layer_period``, a ``hybrid_override_pattern`` of another
architecture, ``ssm_state_size`` …; Nemotron-H with an MTP layer or a sliding window),
sliding windows whose layers the config does not lay out (``sliding_window`` in use
without ``layer_types``: Mistral-7B-v0.1, Gemma 2's ``interleaved_sliding_window``), sliding
layers beside Gated-DeltaNet layers, per-layer-type head shapes (Gemma 4's
``global_head_dim``/``num_global_key_value_heads``), DeepSeek sparse attention, chunked local
attention, and cross-layer KV sharing (``num_kv_shared_layers``). A multimodal checkpoint's
encoders (``vision_config``, ``audio_config``) are read, not refused: its text tower's
layout is right; a Qwen3-VL-style tower's profiling run is modelled, and a cold prediction
says it leaves out any other encoder's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
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


@dataclass(frozen=True)
class Mamba2Facts:
    """Mamba-2 layer shapes as vLLM sizes their state (``MambaStateShapeCalculator.
    mamba2_state_shape``, from NemotronH's ``get_mamba_state_shape_from_config`` in the
    0.26.0 wheel): a conv state of ``(num_heads × head_dim + 2 × n_groups × state_size)``
    channels × ``conv_kernel − 1`` (+ drafts) in the model dtype, and an SSM state of
    ``num_heads × head_dim × state_size`` in :attr:`ssm_dtype_bytes`."""

    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    ssm_dtype_bytes: int
    """``mamba_ssm_cache_dtype`` of the config, else float32: NemotronH's config hook
    (``NemotronHForCausalLMConfig``: "Updating mamba_ssm_cache_dtype to 'float32' for
    NemotronH model", as the real 0.26.0 boots print)."""
    chunk_size: int = 128
    """The Mamba-2 chunk (``chunk_size``): with prefix caching the attention block is a
    multiple of it (mode ``all``)."""


@dataclass(frozen=True)
class VisionFacts:
    """A Qwen3-VL-style vision tower (``Qwen3_VisionTransformer``: Qwen3-VL, Qwen3.5/3.6), as
    vLLM's V1 runner profiles it (:mod:`servefleet.core.kvplan.reserve`)."""

    patch_size: int
    merge_size: int
    """``spatial_merge_size``: a token merges ``merge_size²`` patches."""
    input_channels: int
    """Values per patch: ``in_channels × temporal_patch_size × patch_size²``."""
    hidden_size: int
    intermediate_size: int
    out_hidden_size: int
    deepstack_layers: int
    """``deepstack_visual_indexes``: each adds an ``out_hidden_size`` output per token."""


VISION_MODEL_TYPES = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
"""Checkpoints whose vision tower :class:`VisionFacts` describes."""


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
    vision: VisionFacts | None = None
    """The vision tower, where the planner models its profiling (:data:`VISION_MODEL_TYPES`);
    :attr:`encoders` names every encoder, modelled or not."""
    mamba2: Mamba2Facts | None = None
    """Mamba-2 state layers (Nemotron-H) in place of Gated-DeltaNet ones: :attr:`linear_layers`
    counts them."""
    moe: bool = False
    """Mixture-of-experts MLPs (``num_experts``/``num_local_experts``/``n_routed_experts``):
    vLLM keeps most such models on its V1 model runner
    (:func:`servefleet.core.kvplan.reserve.v2_model_runner`)."""

    @property
    def hybrid(self) -> bool:
        """Attention plus state layers (Gated DeltaNet or Mamba-2)."""
        return self.linear_layers > 0 and (self.gdn is not None or self.mamba2 is not None)

    @property
    def state_kind(self) -> str:
        """What the state layers are, for messages."""
        return "Mamba-2" if self.mamba2 is not None else "GDN"

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
    if nemotron_h(text):  # its layer kinds are read (and refused) by facts_from_config
        _refuse_listed(text, source, NEMOTRON_H_NOT_MODELLED)
        return
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        raise _refuse(source, "hybrid_override_pattern", pattern, (
            f"a Mamba-2 hybrid layout ({pattern.count('M')} Mamba layers 'M', "
            f"{pattern.count('*')} attention layers '*') outside Nemotron-H "
            f"(model_type {text.get('model_type')!r}); vLLM's state shapes differ per "
            "architecture, and the KV planner models Nemotron-H's and Gated-DeltaNet's"))
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
    _refuse_listed(text, source, NOT_MODELLED_FIELDS)
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


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


RefusedField = tuple[str, Callable[[Any], bool], str]
"""A field, when its value means the planner cannot model the config, and why."""

NOT_MODELLED_FIELDS: tuple[RefusedField, ...] = (
    ("num_kv_shared_layers", _positive,
     "cross-layer KV sharing (Gemma 3n): the last layers reuse earlier layers' KV and hold "
     "none of their own, which the KV planner does not model"),
    ("index_topk", lambda value: value is not None,
     "DeepSeek sparse attention (V3.2): beside the MLA latent every layer keeps an indexer "
     "key cache, which the KV planner does not model"),
    ("attention_chunk_size", _positive,
     "chunked local attention (Llama 4): those layers hold at most one chunk "
     "(ChunkedLocalAttentionSpec), which the KV planner does not model"),
    ("cross_attention_layers", bool,
     "cross-attention layers (encoder KV, CrossAttentionSpec), which the KV planner does not "
     "model"),
)
NEMOTRON_H_NOT_MODELLED: tuple[RefusedField, ...] = (
    ("sliding_window", lambda value: value is not None,
     "a Nemotron-H config with a sliding window makes every attention layer a sliding-window "
     "one beside the Mamba-2 layers, which the KV planner does not model"),
    ("num_nextn_predict_layers", _positive,
     "Nemotron-H's MTP layer adds draft columns to every Mamba-2 state and its own attention "
     "layer (nemotron_h_mtp), which the KV planner does not model"),
    ("block_configs", lambda value: value is not None,
     "a heterogeneous Nemotron-H (per-layer shapes), which the KV planner does not model"),
)


def _refuse_listed(text: dict[str, Any], source: str,
                   fields: tuple[RefusedField, ...]) -> None:
    """Refuse the first field of ``fields`` whose value the planner cannot model."""
    for field, applies, reason in fields:
        value = text.get(field)
        if applies(value):
            raise _refuse(source, field, "…" if isinstance(value, (list, dict)) else value,
                          reason)


NEMOTRON_H_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe",
                    "mamba": "mamba", "linear_attention": "mamba", "attention": "attention",
                    "full_attention": "attention", "mlp": "mlp", "moe": "moe"}
"""Nemotron-H's layer kinds: ``hybrid_override_pattern`` letters, and the words of
``layers_block_type`` (older configs: ``mamba``/``attention``; transformers 5's re-saved
ones: ``linear_attention``/``full_attention``, which here are Mamba-2 layers, not
Gated DeltaNet). MLP and MoE layers hold no cache."""


def nemotron_h(text: dict[str, Any]) -> bool:
    """Whether ``text`` is a Nemotron-H config (``model_type`` or its layout key)."""
    return text.get("model_type") == "nemotron_h" or (
        isinstance(text.get("hybrid_override_pattern"), str)
        and "mamba_num_heads" in text)


def _nemotron_h_kinds(text: dict[str, Any], source: str) -> list[str]:
    """The kind of every layer of a Nemotron-H config, refused where a letter or word is
    not one of :data:`NEMOTRON_H_KINDS`."""
    pattern = text.get("hybrid_override_pattern")
    field, items = (("hybrid_override_pattern", list(pattern)) if isinstance(pattern, str)
                    else ("layers_block_type", text.get("layers_block_type")))
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{source}: a Nemotron-H config without hybrid_override_pattern or "
                          "layers_block_type: use the checkpoint's own config.json")
    unknown = sorted({str(k) for k in items if str(k) not in NEMOTRON_H_KINDS})
    if unknown:
        raise _refuse(source, field, unknown, (
            "Nemotron-H layer kinds the KV planner does not know (it knows M, *, -, E and "
            f"{', '.join(sorted(k for k in NEMOTRON_H_KINDS if len(k) > 1))})"))
    return [NEMOTRON_H_KINDS[str(k)] for k in items]


def _mamba2(text: dict[str, Any], source: str) -> Mamba2Facts:
    """The Mamba-2 shapes of a Nemotron-H config (``n_groups``/``mamba_n_groups``,
    ``conv_kernel``/``mamba_d_conv``: transformers maps the older names)."""
    def first(*keys: str) -> int:
        for key in keys:
            if key in text:
                return _int(text, key, source)
        return _int(text, keys[0], source)

    ssm = str(text.get("mamba_ssm_cache_dtype") or "float32")
    return Mamba2Facts(
        num_heads=first("mamba_num_heads"), head_dim=first("mamba_head_dim"),
        state_size=first("ssm_state_size", "mamba_d_state"),
        n_groups=first("n_groups", "mamba_n_groups"),
        conv_kernel=first("conv_kernel", "mamba_d_conv"),
        ssm_dtype_bytes=DTYPE_BYTES.get(ssm, 4),
        chunk_size=int(text.get("chunk_size") or text.get("mamba_chunk_size") or 128))


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
    mamba2 = None
    if nemotron_h(text):
        kinds = _nemotron_h_kinds(text, source)
        mamba2 = _mamba2(text, source)
        full, linear, sliding = kinds.count("attention"), kinds.count("mamba"), 0
    else:
        full, linear, sliding = _attention_layout(text, source)
    heads = _int(text, "num_attention_heads", source)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    if mamba2 is not None:  # transformers' NemotronHConfig: head_dim 128 when unset
        head_dim = int(text.get("head_dim") or text.get("attention_head_dim") or 128)
    else:
        head_dim = int(text.get("head_dim") or _int(text, "hidden_size", source) // heads)
    mla = text.get("kv_lora_rank") is not None
    if mla:
        kv_heads = 1
        head_dim = _int(text, "kv_lora_rank", source) + _int(text, "qk_rope_head_dim", source)
    dtype = str(text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype")
                or "bfloat16")
    gdn = None
    if linear and mamba2 is None:
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
        gdn=gdn, mamba2=mamba2, mtp_layers=int(text.get("mtp_num_hidden_layers")
                                or text.get("num_nextn_predict_layers") or 0),
        mla=mla, architectures=tuple(str(a) for a in config.get("architectures") or ()),
        max_position_embeddings=max_pos if isinstance(max_pos, int) else None,
        sliding_layers=sliding,
        sliding_window=int(text["sliding_window"]) if sliding else None,
        moe=num_experts(text) > 0,
        vocab_size=_vocab(text),
        encoders=tuple(key for key in ENCODER_KEYS if isinstance(config.get(key), dict)),
        vision=_vision(config, text),
    )


def _attention_layout(text: dict[str, Any], source: str) -> tuple[int, int, int]:
    """(full-attention, Gated-DeltaNet, sliding-window) layers of a config that is not
    Nemotron-H's: from ``layer_types``, Gemma 3's pattern, or Qwen3-Next's
    ``full_attention_interval``; else every layer is full attention."""
    layers = _int(text, "num_hidden_layers", source)
    types = text.get("layer_types")
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
        return full, linear, sliding
    if "full_attention_interval" in text and "linear_num_value_heads" in text:
        interval = _int(text, "full_attention_interval", source)
        full = sum(1 for i in range(layers) if (i + 1) % interval == 0)
        return full, layers - full, 0
    return layers, 0, 0


def _vision(config: dict[str, Any], text: dict[str, Any]) -> VisionFacts | None:
    """:class:`VisionFacts` of a Qwen3-VL-style checkpoint (its ``vision_config``; the merger
    projects to the text model's ``hidden_size`` when ``out_hidden_size`` is absent);
    ``None`` where a width is missing: the encoder is then not modelled, and said so."""
    vision = config.get("vision_config")
    if config.get("model_type") not in VISION_MODEL_TYPES or not isinstance(vision, dict):
        return None
    widths = [w for w in (vision.get("hidden_size"), vision.get("intermediate_size"),
                          vision.get("out_hidden_size") or text.get("hidden_size"))
              if isinstance(w, int) and not isinstance(w, bool) and w > 0]
    if len(widths) < 3:
        return None
    patch = int(vision.get("patch_size") or 16)
    deepstack = vision.get("deepstack_visual_indexes") or []
    return VisionFacts(
        patch_size=patch, merge_size=int(vision.get("spatial_merge_size") or 2),
        input_channels=int(vision.get("in_channels") or 3)
        * int(vision.get("temporal_patch_size") or 2) * patch * patch,
        hidden_size=widths[0], intermediate_size=widths[1], out_hidden_size=widths[2],
        deepstack_layers=len(deepstack) if isinstance(deepstack, list) else 0)


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
    for key in ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"):
        width = text.get(key)
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
    # A gated MLP (SiLU/GELU) writes 2 × width for gate and up, then width for the product;
    # Nemotron-H's squared ReLU (relu2) has no gate: width, then width.
    gated = 2 if (text.get("mlp_hidden_act") or text.get("hidden_act")) == "relu2" else 3
    if isinstance(top_k, int) and isinstance(moe, int):
        mlp = top_k * gated * moe + gated * _shared_expert_width(text, moe)
    else:
        dense = text.get("intermediate_size")
        mlp = gated * dense if isinstance(dense, int) else 0
        # A dense Mamba-2 hybrid's widest layer can be the mixer: its in_proj output
        # (z, x, B, C and dt), the conv output (x, B, C) and y, per token (the 0.26.0 H200
        # boot of Nemotron-Nano-9B-v2's shapes at 64 sequences: 1.28 GiB printed, 0.96 with
        # the mixer, 0.75 with the MLP alone).
        mlp = max(mlp, _mamba2_mixer_width(text))
    return dtype_bytes * mlp + _hidden_activation_bytes(text, dtype_bytes)


def _mamba2_mixer_width(text: dict[str, Any]) -> int:
    """Elements per token a Nemotron-H Mamba-2 mixer holds at once (0: not Nemotron-H)."""
    if not nemotron_h(text):
        return 0
    values = [text.get(k) for k in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size")]
    groups = text.get("n_groups") or text.get("mamba_n_groups")
    if not all(isinstance(v, int) for v in (*values, groups)):
        return 0
    heads, head_dim, state = (int(v) for v in values)  # type: ignore[arg-type]
    inner, bc = heads * head_dim, 2 * int(groups) * state  # type: ignore[arg-type]
    return (2 * inner + bc + heads) + (inner + bc) + inner


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

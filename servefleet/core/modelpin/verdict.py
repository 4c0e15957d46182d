"""What the KV planner will and will not model for a checkpoint's ``config.json``, in one
line: the planner's own reading (:func:`~servefleet.core.kvplan.modelconfig.facts_from_config`)
or its own refusal, never a second opinion."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from servefleet.core.errors import ConfigError
from servefleet.core.kvplan.modelconfig import ModelFacts, facts_from_config
from servefleet.core.kvplan.pool import kv_bytes_per_token_layer, resolve_kv_dtype, state_page_bytes

_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                "float": "fp32"}
_KIB = 1024


@dataclass(frozen=True)
class Verdict:
    """The planner's verdict on a config."""

    planned: bool
    """The planner models it: ``plan`` and ``tune`` predict its KV pool."""
    text: str
    """``planned: …`` or ``refused: … ; <the way out>``."""
    notes: tuple[str, ...] = ()
    """What the planner does not see even when it plans (a quantization config beside
    config.json)."""


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _attention_kind(text: dict[str, Any], facts: ModelFacts) -> str:
    heads = text.get("num_attention_heads")
    kv = facts.num_kv_heads
    if not isinstance(heads, int) or heads <= 0:
        return f"{kv} KV heads"
    kind = "MHA" if kv == heads else "MQA" if kv == 1 else "GQA"
    return f"{kind} ({kv} KV heads of {heads}, head dim {facts.head_dim})"


def _experts(text: dict[str, Any]) -> str:
    experts = next((text[k] for k in ("num_local_experts", "num_experts", "n_routed_experts")
                    if isinstance(text.get(k), int) and text[k] > 1), None)
    if experts is None:
        return ""
    active = next((text[k] for k in ("num_experts_per_tok", "experts_per_token",
                                     "moe_topk") if isinstance(text.get(k), int)), None)
    return f", MoE {experts} experts" + (f" ({active} per token)" if active else "")


def _kib(n: float) -> str:
    return f"{n / _KIB:g} KiB" if n < _KIB * _KIB else f"{n / _KIB / _KIB:.2f} MiB"


def planner_verdict(config: dict[str, Any], source: str,
                    hf_quant_config: bytes | None = None) -> Verdict:
    """The planner's verdict on ``config`` (named ``source`` in messages):
    ``planned: dense GQA (8 KV heads of 32, head dim 128), 32 layers, KV 128 KiB/token
    (bf16)`` or ``refused: <the planner's reason>; <the way out>``. ``hf_quant_config``: the
    bytes of the checkpoint's ``hf_quant_config.json`` when it has one (vLLM takes it as the
    quantization config where config.json has none; the planner does not read it)."""
    try:
        facts = facts_from_config(config, source)
    except ConfigError as error:
        reason = " ".join(str(error).split())
        return Verdict(False, f"refused: {reason.removeprefix(source + ': ')}")
    text = _text_config(config)
    notes = _quant_notes(config, text, hf_quant_config)
    try:
        dtype, why = resolve_kv_dtype(facts, None)
        per_token_layer = kv_bytes_per_token_layer(facts, None)
        per_token = per_token_layer * facts.full_attention_layers
    except ConfigError as error:
        return Verdict(True, f"planned with an explicit vllm.kv_cache_dtype only: "
                       f"{' '.join(str(error).split()).removeprefix(source + ': ')}", notes)
    label = _DTYPE_NAMES.get(str(text.get("dtype") or text.get("torch_dtype")
                                 or config.get("torch_dtype") or "bfloat16"), "bf16") \
        if dtype == "auto" else dtype
    declared = " declared by the checkpoint" if why else ""
    kv = f"KV {_kib(per_token)}/token ({label}{declared}, --kv-cache-dtype auto)"
    mtp = f", {facts.mtp_layers} MTP layer(s)" if facts.mtp_layers else ""
    context = (f", context {facts.max_position_embeddings:,}"
               if facts.max_position_embeddings else "")
    if facts.hybrid:
        state = state_page_bytes(facts, 0)
        kind = facts.state_kind
        name = "Gated-DeltaNet" if kind == "GDN" else kind
        shape = (f"hybrid {name}, {facts.full_attention_layers} attention + "
                 f"{facts.linear_layers} {kind} layers, {_attention_kind(text, facts)}"
                 f"{_experts(text)}{mtp}, {kv} + {_kib(state)} {kind} state per layer per "
                 "request")
    elif facts.sliding:
        shape = (f"full + sliding-window attention, {facts.full_attention_layers} full + "
                 f"{facts.sliding_layers} sliding layers (window {facts.sliding_window}, "
                 f"vLLM's hybrid KV-cache manager), {_attention_kind(text, facts)}"
                 f"{_experts(text)}{mtp}, {kv} + {_kib(per_token_layer * facts.sliding_layers)}"
                 "/token held only within the window")
    else:
        shape = (f"dense {_attention_kind(text, facts)}, {facts.full_attention_layers} "
                 f"layers{_experts(text)}{mtp}, {kv}")
    return Verdict(True, f"planned: {shape}{context}", notes)


def _quant_notes(config: dict[str, Any], text: dict[str, Any],
                 hf_quant_config: bytes | None) -> tuple[str, ...]:
    if hf_quant_config is None or isinstance(config.get("quantization_config"), dict) \
            or isinstance(text.get("quantization_config"), dict):
        return ()
    try:
        data = json.loads(hf_quant_config)
    except ValueError:
        data = None
    quant = data.get("quantization") if isinstance(data, dict) else None
    algo = quant.get("kv_cache_quant_algo") if isinstance(quant, dict) else None
    said = f" (its kv_cache_quant_algo is {algo})" if algo else ""
    return (f"config.json has no quantization_config: vLLM takes hf_quant_config.json "
            f"instead{said}, which the planner does not read; set vllm.kv_cache_dtype "
            f"explicitly{' (fp8)' if str(algo).upper() == 'FP8' else ''} to plan the "
            "profile",)

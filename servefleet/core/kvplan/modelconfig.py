"""Model facts the KV pool depends on, read from a checkpoint's own ``config.json``.

Only what vLLM's KV-cache specs use: which layers are full attention and which are linear
(Gated DeltaNet) state, the KV heads and head dim, the GDN state shapes and dtype, and the
MTP layers. Multimodal configs keep the text tower under ``text_config``.
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
    intermediate caches (``top_k × 3 × moe_intermediate_size``; ``3 × intermediate_size``
    for a dense MLP) plus four hidden-sized buffers, in the model dtype. 0: unknown."""

    @property
    def hybrid(self) -> bool:
        """Attention plus linear-attention state layers."""
        return self.linear_layers > 0 and self.gdn is not None


def _int(cfg: dict[str, Any], key: str, where: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where}: field {key!r} is {value!r}, not a non-negative integer; "
                          "use the checkpoint's own config.json")
    return value


def facts_from_config(config: dict[str, Any], source: str) -> ModelFacts:
    """Parse a Hugging Face ``config.json`` (dict) into :class:`ModelFacts`."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, dict)
    layers = _int(text, "num_hidden_layers", source)
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise ConfigError(f"{source}: layer_types has {len(types)} entries but "
                              f"num_hidden_layers is {layers}; fix the config")
        full = sum(1 for t in types if t in ("full_attention", "attention"))
        linear = sum(1 for t in types if t == "linear_attention")
        other = layers - full - linear
        if other:
            unknown = sorted({str(t) for t in types} - {"full_attention", "attention",
                                                         "linear_attention"})
            raise ConfigError(f"{source}: layer_types {unknown} are not modelled by the KV "
                              "planner (only full and linear attention); do not plan from it")
    elif "full_attention_interval" in text and "linear_num_value_heads" in text:
        interval = _int(text, "full_attention_interval", source)
        full = sum(1 for i in range(layers) if (i + 1) % interval == 0)
        linear = layers - full
    else:
        full, linear = layers, 0
    heads = _int(text, "num_attention_heads", source)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or _int(text, "hidden_size", source) // heads)
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
    return ModelFacts(
        activation_bytes_per_token=_activation_bytes(text, DTYPE_BYTES.get(dtype, 2)),
        source=source, full_attention_layers=full, linear_layers=linear,
        num_kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=DTYPE_BYTES.get(dtype, 2),
        gdn=gdn, mtp_layers=int(text.get("mtp_num_hidden_layers") or 0),
        max_position_embeddings=max_pos if isinstance(max_pos, int) else None,
    )


def _activation_bytes(text: dict[str, Any], dtype_bytes: int) -> int:
    """See :attr:`ModelFacts.activation_bytes_per_token`."""
    hidden = text.get("hidden_size")
    if not isinstance(hidden, int):
        return 0
    top_k, moe = text.get("num_experts_per_tok"), text.get("moe_intermediate_size")
    if isinstance(top_k, int) and isinstance(moe, int):
        mlp = top_k * 3 * moe
    else:
        dense = text.get("intermediate_size")
        mlp = 3 * dense if isinstance(dense, int) else 0
    return dtype_bytes * (mlp + 4 * hidden)


def load_pinned(profiles_dir: Path, file: str, sha256: str) -> ModelFacts:
    """Read a pinned ``config.json`` under ``profiles_dir`` and check its sha256."""
    path = profiles_dir / file
    where = f"profiles/{file}"
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{where}: cannot read the pinned model config ({error.strerror}); "
                          "fix model.config.file in the profile") from None
    digest = hashlib.sha256(data).hexdigest()
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

"""The stand-in's own fake model hub: what it "knows" about each checkpoint.

Figures for the Qwen3.6-35B-A3B family come from the operators' notes and public model
cards (weights, shard counts, load times measured on a DGX Spark); the architecture
numbers are the published config (40 layers: 10 full attention + 30 Gated DeltaNet).
Unknown models get a generic guess from their name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class HybridLayout:
    """Gated DeltaNet (linear attention) geometry of a hybrid model."""

    num_gdn_layers: int
    """Layers with recurrent state instead of a KV cache."""
    num_k_heads: int = 16
    """Linear-attention key heads."""
    num_v_heads: int = 32
    """Linear-attention value heads."""
    head_k_dim: int = 128
    """Key head size."""
    head_v_dim: int = 128
    """Value head size."""
    conv_kernel: int = 4
    """Short-convolution kernel width."""
    ssm_dtype_bytes: int = 4
    """Bytes per temporal-state element (``mamba_ssm_dtype: float32``)."""


@dataclass(frozen=True)
class ModelSpec:
    """One checkpoint in the fake hub."""

    repo_id: str
    """Hugging Face id, e.g. ``Qwen/Qwen3.6-35B-A3B-FP8``."""
    architecture: str
    """``architectures[0]`` of config.json."""
    model_type: str
    """config.json ``model_type``."""
    quantization: str | None
    """``quant_method`` of the checkpoint (None: unquantized)."""
    checkpoint_gib: float
    """Size of the safetensors files on disk."""
    weights_gib: float
    """Device memory taken by the loaded weights ("Model loading took X GiB")."""
    shards: int
    """Number of safetensors shards."""
    load_seconds: float
    """Time to read the shards on the reference node ("Loading weights took")."""
    max_position_embeddings: int
    """Native context length."""
    num_attention_layers: int
    """Layers with a KV cache (full attention)."""
    num_kv_heads: int
    """KV heads of the attention layers."""
    head_dim: int
    """Attention head size."""
    num_attention_heads: int
    """Query heads."""
    hybrid: HybridLayout | None = None
    """Linear-attention layers, for hybrid models."""
    vision_gib: float = 0.0
    """Weights of the vision tower (skipped with ``--language-model-only``)."""
    mtp_gib: float = 0.0
    """Weights of the built-in multi-token-prediction heads (0: no MTP heads)."""
    mtp_layers: int = 0
    """``mtp_num_hidden_layers``."""
    draft_architecture: str | None = None
    """Architecture vLLM resolves for the MTP drafter."""
    moe_experts: int = 0
    """Routed experts (0: dense)."""
    moe_intermediate: int = 0
    """Expert intermediate size (the N of MoE config files)."""
    moe_triton_dtype: str | None = None
    """``dtype=`` suffix of the Triton MoE config file; None: no suffix."""
    moe_uses_triton: bool = True
    """The fused-MoE path is Triton (so the default-config warning can appear)."""
    activation_gib_per_1k_tokens: float = 0.515
    """Peak activation memory per 1024 batched tokens in the profiling run."""
    generation_config: dict[str, float] = field(default_factory=dict)
    """Sampling defaults from generation_config.json."""
    thinks_by_default: bool = False
    """The chat template thinks unless ``enable_thinking`` is false."""
    dtype: str = "bfloat16"
    """Activation dtype."""
    revisions: dict[str, float] = field(default_factory=dict)
    """Branch name -> weights GiB, for repos with several branches."""

    @property
    def is_hybrid(self) -> bool:
        """Attention + linear attention."""
        return self.hybrid is not None

    @property
    def is_moe(self) -> bool:
        """Mixture of experts."""
        return self.moe_experts > 0

    @property
    def total_layers(self) -> int:
        """All decoder layers."""
        return self.num_attention_layers + (self.hybrid.num_gdn_layers if self.hybrid else 0)

    def attention_layer_indices(self) -> list[int]:
        """Indices of the full-attention layers (every 4th in Qwen3.5/3.6)."""
        if not self.hybrid:
            return list(range(self.num_attention_layers))
        interval = self.total_layers // self.num_attention_layers
        return [i for i in range(self.total_layers) if (i + 1) % interval == 0]

    def weights_for_revision(self, revision: str | None) -> float:
        """Loaded weights for a branch (the default branch when unknown)."""
        if revision and revision in self.revisions:
            return self.revisions[revision]
        return self.weights_gib


_QWEN36_GEN = {"temperature": 1.0, "top_k": 20, "top_p": 0.95}

_QWEN36_BASE = ModelSpec(
    repo_id="Qwen/Qwen3.6-35B-A3B",
    architecture="Qwen3_5MoeForConditionalGeneration",
    model_type="qwen3_5_moe",
    quantization=None,
    checkpoint_gib=67.0,
    weights_gib=66.3,
    shards=26,
    load_seconds=180.0,
    max_position_embeddings=262144,
    num_attention_layers=10,
    num_kv_heads=2,
    head_dim=256,
    num_attention_heads=16,
    hybrid=HybridLayout(num_gdn_layers=30),
    vision_gib=0.84,
    mtp_gib=1.59,
    mtp_layers=1,
    draft_architecture="Qwen3_5MoeMTP",
    moe_experts=256,
    moe_intermediate=512,
    moe_triton_dtype=None,
    generation_config=_QWEN36_GEN,
    thinks_by_default=True,
)

CATALOG: dict[str, ModelSpec] = {
    spec.repo_id.lower(): spec
    for spec in (
        _QWEN36_BASE,
        # Seed 001: 34.89 GiB checkpoint in 42 shards, 289 s to load on a DGX Spark,
        # "Model loading took 35.02 GiB" with MTP (+0.79 GiB heads).
        replace(
            _QWEN36_BASE,
            repo_id="Qwen/Qwen3.6-35B-A3B-FP8",
            quantization="fp8",
            checkpoint_gib=34.89,
            weights_gib=34.23,
            shards=42,
            load_seconds=289.0,
            mtp_gib=0.79,
            moe_triton_dtype="fp8_w8a8,block_shape=[128,128]",
        ),
        replace(
            _QWEN36_BASE,
            repo_id="Qwen/Qwen3.5-35B-A3B-FP8",
            quantization="fp8",
            checkpoint_gib=34.89,
            weights_gib=34.23,
            shards=14,
            load_seconds=87.0,
            mtp_gib=0.0,
            mtp_layers=0,
            draft_architecture=None,
            activation_gib_per_1k_tokens=0.50,
            moe_triton_dtype="fp8_w8a8,block_shape=[128,128]",
        ),
        # Seed 003: main branch 21.96 GiB (BF16 lm_head), fp8-head 21.48 GiB; NVFP4
        # MoE runs on FlashInfer CUTLASS, not Triton.
        replace(
            _QWEN36_BASE,
            repo_id="inferRouter/Qwen3.6-35B-A3B-NVFP4",
            quantization="compressed-tensors",
            checkpoint_gib=23.1,
            weights_gib=21.96,
            shards=2,
            load_seconds=95.0,
            mtp_gib=1.49,
            moe_uses_triton=False,
            activation_gib_per_1k_tokens=0.29,
            revisions={"main": 21.96, "fp8-head": 21.48},
        ),
        replace(
            _QWEN36_BASE,
            repo_id="RedHatAI/Qwen3.6-35B-A3B-NVFP4",
            quantization="compressed-tensors",
            checkpoint_gib=23.32,
            weights_gib=22.66,
            shards=3,
            load_seconds=107.31,
            mtp_gib=0.79,
            moe_uses_triton=False,
        ),
        # Seed 004: AutoRound INT8 weights, compressed-tensors, ~35 GiB.
        replace(
            _QWEN36_BASE,
            repo_id="88plug/Qwen3.6-35B-A3B-W8A16",
            quantization="compressed-tensors",
            checkpoint_gib=35.2,
            weights_gib=34.95,
            shards=8,
            load_seconds=120.0,
            mtp_gib=0.0,
            mtp_layers=0,
            draft_architecture=None,
            moe_uses_triton=False,
        ),
    )
}

_NAME_ALIASES = {spec.repo_id.split("/", 1)[1].lower(): spec for spec in CATALOG.values()}


def _guess(model: str) -> ModelSpec:
    """A generic dense (or MoE) decoder guessed from the model name."""
    name = model.rstrip("/").split("/")[-1]
    lower = name.lower()
    size_match = re.search(r"(\d+(?:\.\d+)?)b", lower)
    params_b = float(size_match.group(1)) if size_match else 7.0
    active_match = re.search(r"a(\d+(?:\.\d+)?)b", lower)
    if any(tag in lower for tag in ("nvfp4", "awq", "gptq", "int4", "w4a16", "mxfp4")):
        bytes_per_param, quant = 0.56, "compressed-tensors"
    elif any(tag in lower for tag in ("fp8", "w8a8", "w8a16", "int8")):
        bytes_per_param, quant = 1.0, "fp8" if "fp8" in lower else "compressed-tensors"
    else:
        bytes_per_param, quant = 2.0, None
    weights = round(params_b * 1e9 * bytes_per_param / (1 << 30), 2)
    families = {
        "qwen3": "Qwen3MoeForCausalLM" if active_match else "Qwen3ForCausalLM",
        "qwen2": "Qwen2ForCausalLM",
        "llama": "LlamaForCausalLM",
        "mistral": "MistralForCausalLM",
        "gemma": "Gemma3ForCausalLM",
        "phi": "Phi3ForCausalLM",
    }
    arch = next((a for key, a in families.items() if key in lower), "LlamaForCausalLM")
    layers = 28 if params_b < 10 else 48 if params_b < 40 else 80
    shards = max(1, round(weights / 4.6))
    return ModelSpec(
        repo_id=model,
        architecture=arch,
        model_type=arch.removesuffix("ForCausalLM").lower(),
        quantization=quant,
        checkpoint_gib=weights,
        weights_gib=weights,
        shards=shards,
        load_seconds=round(shards * 6.88, 2),
        max_position_embeddings=32768 if "qwen" in lower else 131072,
        num_attention_layers=layers,
        num_kv_heads=8,
        head_dim=128,
        num_attention_heads=32,
        moe_experts=128 if active_match else 0,
        moe_intermediate=768 if active_match else 0,
        activation_gib_per_1k_tokens=0.12 if params_b < 10 else 0.25,
    )


def lookup(model: str) -> ModelSpec:
    """The catalog entry for a model id or local path (matched on its last component)."""
    key = model.strip().lower().rstrip("/")
    if key in CATALOG:
        return CATALOG[key]
    last = key.split("/")[-1]
    if last in _NAME_ALIASES:
        spec = _NAME_ALIASES[last]
        return replace(spec, repo_id=model)
    return _guess(model)

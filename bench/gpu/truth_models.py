"""Full-size model configs for booting real vLLM with dummy weights on a real GPU.

Each builder returns a Hugging Face ``config.json`` (dict) with the shapes of a published
checkpoint, written from its model card's configuration: what vLLM sizes its KV pool from
(layers, KV heads, head size, layer types, sliding window, MoE shapes, dtype). With
``--load-format dummy`` vLLM allocates and randomly initialises every weight of that shape,
so the memory it profiles is the checkpoint's. The planner is checked against these boots;
it was fitted on none of them (its reserve was fitted on Qwen3.6-35B-A3B on a GB10 and an
RTX 5090, :mod:`servefleet.core.kvplan.reserve`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_MODEL_LEN = 32768
"""Every boot's ``--max-model-len`` (within each model's ``max_position_embeddings``)."""


def llama31_8b() -> dict[str, Any]:
    """Llama-3.1-8B: dense, 32 layers, GQA 32/8, head 128."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 128000, "eos_token_id": 128009, "torch_dtype": "bfloat16",
    }


def llama31_70b() -> dict[str, Any]:
    """Llama-3.1-70B: dense, 80 layers, GQA 64/8, head 128 (booted tensor-parallel over two
    GPUs: 131 GiB of bf16 weights)."""
    return {**llama31_8b(), "hidden_size": 8192, "intermediate_size": 28672,
            "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8}


def qwen3_32b() -> dict[str, Any]:
    """Qwen3-32B: dense, 64 layers, GQA 64/8, head 128."""
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 5120, "intermediate_size": 25600, "num_hidden_layers": 64,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "vocab_size": 151936,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "attention_bias": False,
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
    }


def qwen3_30b_a3b() -> dict[str, Any]:
    """Qwen3-30B-A3B: MoE (128 experts, 8 active, 768 wide), 48 layers, GQA 32/4."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "vocab_size": 151936,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "attention_bias": False,
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
    }


def gemma3_27b_text() -> dict[str, Any]:
    """Gemma 3 27B's language model: 62 layers, five sliding (1,024 tokens) to one full."""
    layers = 62
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": layers,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
        "query_pre_attn_scalar": 168, "sliding_window": 1024,
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                        for i in range(layers)],
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
        "vocab_size": 262208, "max_position_embeddings": 131072,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "final_logit_softcapping": None, "attn_logit_softcapping": None,
        "tie_word_embeddings": True, "attention_bias": False,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "bfloat16",
    }


def qwen36_text_as_next() -> dict[str, Any]:
    """Qwen3.6-35B-A3B's language model (the pinned ``text_config``: 40 layers, one full
    attention layer in four, Gated DeltaNet between, 256 experts) as vLLM's text-only
    ``Qwen3NextForCausalLM``, which runs the same layer kinds without the vision tower."""
    layers = 40
    return {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
        "hidden_size": 2048, "intermediate_size": 5120, "num_hidden_layers": layers,
        "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "partial_rotary_factor": 0.25, "full_attention_interval": 4,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                        for i in range(layers)],
        "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "norm_topk_prob": True,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "vocab_size": 248320,
        "max_position_embeddings": 262144, "rope_theta": 10000000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 248044, "eos_token_id": 248046, "torch_dtype": "bfloat16",
    }


def gpt_oss_20b_bf16() -> dict[str, Any]:
    """gpt-oss-20b's shapes in bf16 (no MXFP4 quantization): 24 layers alternating
    sliding (128 tokens) and full attention, 32 experts, 4 active."""
    layers = 24
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
        "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": layers,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
        "sliding_window": 128,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention"
                        for i in range(layers)],
        "swiglu_limit": 7.0, "attention_bias": True, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "vocab_size": 201088, "max_position_embeddings": 131072,
        "rope_theta": 150000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096},
        "initial_context_length": 4096, "tie_word_embeddings": False,
        "bos_token_id": 199998, "eos_token_id": 200002, "pad_token_id": 199999,
        "torch_dtype": "bfloat16",
    }


def deepseek_v2_lite() -> dict[str, Any]:
    """DeepSeek-V2-Lite: multi-head latent attention (KV rank 512 + 64 rope dims per token and
    layer), 27 layers, 64 routed experts (6 active) and 2 shared, the first layer dense."""
    return {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
        "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
        "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64,
        "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
        "moe_layer_freq": 1, "routed_scaling_factor": 1.0, "topk_method": "greedy",
        "n_group": 1, "topk_group": 1, "norm_topk_prob": False, "scoring_func": "softmax",
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "vocab_size": 102400,
        "max_position_embeddings": 163840, "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 40.0, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 0.707, "mscale_all_dim": 0.707,
                         "original_max_position_embeddings": 4096},
        "attention_bias": False, "tie_word_embeddings": False,
        "bos_token_id": 100000, "eos_token_id": 100001, "torch_dtype": "bfloat16",
    }


def mixtral_8x7b() -> dict[str, Any]:
    """Mixtral-8x7B-v0.1: MoE (8 experts, 2 active, 14,336 wide), 32 layers, GQA 32/8, a
    32,000-token vocabulary."""
    return {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": 32000,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": None,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def mistral_nemo_12b() -> dict[str, Any]:
    """Mistral-Nemo-Base-2407: dense, 40 layers, GQA 32/8, head 128 (narrower than the
    5,120 hidden size), a 131,072-token vocabulary."""
    return {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral",
        "hidden_size": 5120, "intermediate_size": 14336, "num_hidden_layers": 40,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "vocab_size": 131072,
        "max_position_embeddings": 1024000, "rope_theta": 1000000.0, "sliding_window": None,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


CONFIGS = Path(__file__).resolve().parent / "configs"
"""Published ``config.json`` files, verbatim where the source had the whole file (each one's
source in ``configs/README.md``)."""


def _published(name: str) -> Callable[[], dict[str, Any]]:
    def config() -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((CONFIGS / f"{name}.config.json").read_text())
        return loaded
    config.__doc__ = f"``configs/{name}.config.json``."
    return config


MODELS: dict[str, Callable[[], dict[str, Any]]] = {
    "qwen36-text-next": qwen36_text_as_next,
    "qwen3-30b-a3b": qwen3_30b_a3b,
    "llama31-8b": llama31_8b,
    "gemma3-27b-text": gemma3_27b_text,
    "qwen3-32b": qwen3_32b,
    "gpt-oss-20b-bf16": gpt_oss_20b_bf16,
    "deepseek-v2-lite": deepseek_v2_lite,
    "mixtral-8x7b": mixtral_8x7b,
    "mistral-nemo-12b": mistral_nemo_12b,
    # Mamba-2 hybrids (NemotronH: the layout is hybrid_override_pattern) and vision-language
    # models (Qwen3-VL: the encoder is profiled on the V1 runner, the MoE one).
    "llama31-70b": llama31_70b,
    "nemotron-nano-9b-v2": _published("nemotron-nano-9b-v2"),
    "nemotron-3-nano-30b-a3b": _published("nemotron-3-nano-30b-a3b"),
    "nemotron-h-8b": _published("nemotron-h-8b"),
    "qwen3-vl-30b-a3b": _published("qwen3-vl-30b-a3b"),
    "qwen3-vl-8b": _published("qwen3-vl-8b"),
}
"""Boot order: the reference fleet's own model first, the least certain to boot last."""


VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "qwen36-text-next-u80-b2048": ("qwen36-text-next", (
        "--gpu-memory-utilization", "0.80", "--max-num-batched-tokens", "2048",
        "--max-num-seqs", "64")),
    "llama31-8b-fp8kv-s128": ("llama31-8b", ("--kv-cache-dtype", "fp8", "--max-num-seqs", "128")),
    # What drives the profiling peak: the sequences (the sampler's rows) or the batched
    # tokens (the forward pass), on each model runner (V1: the MoE model; V2: the dense ones).
    "qwen3-30b-a3b-s64": ("qwen3-30b-a3b", ("--max-num-seqs", "64")),
    "qwen3-30b-a3b-b16k": ("qwen3-30b-a3b", ("--max-num-batched-tokens", "16384")),
    "gemma3-27b-text-s64": ("gemma3-27b-text", ("--max-num-seqs", "64")),
    "llama31-8b-b16k": ("llama31-8b", ("--max-num-batched-tokens", "16384")),
    "nemotron-nano-9b-v2-u60-s64": ("nemotron-nano-9b-v2", (
        "--gpu-memory-utilization", "0.60", "--max-num-seqs", "64")),
    "nemotron-h-8b-8k": ("nemotron-h-8b", ("--max-model-len", "8192")),
    # The same checkpoint without its vision tower: the encoder's share of the budget.
    "qwen3-vl-30b-a3b-text": ("qwen3-vl-30b-a3b", ("--language-model-only",)),
    # Fewer sequences: a smaller sampler peak, under which the encoder's own peak shows.
    "qwen3-vl-30b-a3b-s64": ("qwen3-vl-30b-a3b", ("--max-num-seqs", "64")),
    # Mamba prefix caching (mode "all": a state block per attention block), and an encoder
    # budget of two images (32,768 batched tokens), each predicted before it was booted.
    "nemotron-nano-9b-v2-prefix": ("nemotron-nano-9b-v2", ("--enable-prefix-caching",)),
    # A 70B-shaped dense model over both GPUs of a two-GPU machine (one rank's pool).
    "llama31-70b-tp2": ("llama31-70b", ("--tensor-parallel-size", "2")),
    "qwen3-vl-30b-a3b-b32k": ("qwen3-vl-30b-a3b", ("--max-num-batched-tokens", "32768")),
}
"""Boots of a model of :data:`MODELS` with settings other than vLLM's defaults: name →
(model, extra ``vllm serve`` arguments)."""

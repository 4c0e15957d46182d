"""What the planner does not model it refuses, naming the file, the field and why; what it
models from the checkpoint (an FP8 KV cache under ``auto``) it says. Snippets are the public
config.json fields of each model."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from servefleet.core.errors import ConfigError
from servefleet.core.kvplan import facts_from_config, layout, predict
from servefleet.core.kvplan.accuracy import ROWS
from servefleet.core.kvplan.predict import profile_layout
from servefleet.core.kvplan.reserve import CONSUMER, UNIFIED, ReserveInputs, estimate
from servefleet.core.models import Node, Profile
from servefleet.core.project import load_project
from tests.reference_project import REPO_ROOT

SRC = "profiles/models/x.config.json (sha256 0123456789ab)"

NEMOTRON_H_8B: dict[str, Any] = {  # nvidia/Nemotron-H-8B-Base-8K
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "hidden_size": 4096, "num_hidden_layers": 52, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 21504,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
    "conv_kernel": 4, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}
NEMOTRON_H_MTP: dict[str, Any] = {**NEMOTRON_H_8B, "num_nextn_predict_layers": 1}
"""Nemotron-H with an MTP layer (as Nemotron Super configs declare one)."""
JAMBA_MINI: dict[str, Any] = {  # ai21labs/AI21-Jamba-1.5-Mini
    "architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 4096,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "attn_layer_offset": 4, "attn_layer_period": 8, "expert_layer_offset": 1,
    "expert_layer_period": 2, "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_dt_rank": 256,
    "mamba_expand": 2, "num_experts": 16, "num_experts_per_tok": 2, "torch_dtype": "bfloat16",
}
MAMBA2_PLAIN: dict[str, Any] = {  # a Mamba-2 config (state-spaces/mamba2 in HF format)
    "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 2560,
    "num_hidden_layers": 64, "num_heads": 80, "head_dim": 64, "state_size": 128,
    "n_groups": 1, "conv_kernel": 4, "expand": 2, "num_attention_heads": 80,
}
GPT_OSS_120B: dict[str, Any] = {  # openai/gpt-oss-120b
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "sliding_window": 128, "num_local_experts": 128,
    "experts_per_token": 4, "max_position_embeddings": 131072,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "quantization_config": {"quant_method": "mxfp4",
                            "modules_to_not_convert": ["model.layers.*.self_attn",
                                                       "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"]},
}
GEMMA3_27B: dict[str, Any] = {  # google/gemma-3-27b-it
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {"model_type": "gemma3_text", "head_dim": 128, "hidden_size": 5376,
                    "intermediate_size": 21504, "num_attention_heads": 32,
                    "num_hidden_layers": 62, "num_key_value_heads": 16,
                    "query_pre_attn_scalar": 168, "sliding_window": 1024,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
    "torch_dtype": "bfloat16",
}
GEMMA3N_E4B: dict[str, Any] = {  # google/gemma-3n-E4B-it
    "architectures": ["Gemma3nForConditionalGeneration"], "model_type": "gemma3n",
    "text_config": {"model_type": "gemma3n_text", "hidden_size": 2048,
                    "num_hidden_layers": 35, "num_attention_heads": 8,
                    "num_key_value_heads": 2, "head_dim": 256, "num_kv_shared_layers": 15,
                    "sliding_window": 512,
                    "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7},
}
DEEPSEEK_V3: dict[str, Any] = {  # deepseek-ai/DeepSeek-V3
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "num_nextn_predict_layers": 1, "max_position_embeddings": 163840,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                            "quant_method": "fp8", "weight_block_size": [128, 128]},
}
MISTRAL_7B_V01: dict[str, Any] = {  # mistralai/Mistral-7B-v0.1
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "sliding_window": 4096, "max_position_embeddings": 32768,
    "rope_theta": 10000.0, "torch_dtype": "bfloat16",
}
QWEN25_7B: dict[str, Any] = {  # Qwen/Qwen2.5-7B-Instruct
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "sliding_window": 131072, "use_sliding_window": False,
    "max_window_layers": 28, "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
}
LLAMA31_8B: dict[str, Any] = {  # meta-llama/Llama-3.1-8B-Instruct
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}
MODELOPT_NVFP4 = {  # nvidia/Llama-3.1-8B-Instruct-FP4 (ModelOpt export, config.json)
    **LLAMA31_8B,
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                            "kv_cache_quant_algo": "FP8", "group_size": 16,
                            "exclude_modules": ["lm_head"],
                            "producer": {"name": "modelopt", "version": "0.29.0"}},
}
HF_QUANT_SHAPE = {  # hf_quant_config.json's shape, as vLLM takes it for quantization_config
    **LLAMA31_8B,
    "quantization_config": {"producer": {"name": "modelopt", "version": "0.23.0"},
                            "quantization": {"quant_algo": "NVFP4",
                                             "kv_cache_quant_algo": "FP8",
                                             "group_size": 16, "exclude_modules": ["lm_head"]}},
}
CT_FP8_KV = {  # an llm-compressor (compressed-tensors) export with an FP8 KV scheme
    **LLAMA31_8B,
    "quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                            "kv_cache_scheme": {"num_bits": 8, "type": "float",
                                                "strategy": "tensor", "dynamic": False,
                                                "symmetric": True}},
}


def refused(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        facts_from_config(config, SRC)
    text = str(info.value)
    assert text.startswith(SRC + ": field ")
    assert "remove model.config from the profile" in text  # the nearest way out
    return text


def test_nemotron_h_is_planned_from_its_pattern_not_as_52_attention_layers():
    """The layout of the real 0.26.0 H200 boot of Nemotron-H-8B's shapes ("Setting attention
    block size to 1040 tokens", "Padding mamba page size by 0.10%"): 4 attention + 24 Mamba-2
    layers from ``hybrid_override_pattern``, the SSM state in float32."""
    facts = facts_from_config(NEMOTRON_H_8B, SRC)
    assert (facts.full_attention_layers, facts.linear_layers, facts.state_kind) == (
        4, 24, "Mamba-2")
    assert facts.mamba2 is not None and facts.mamba2.ssm_dtype_bytes == 4
    lay = layout(facts, kv_dtype=None)
    assert (lay.block_size, lay.page_bytes, lay.group_size, lay.num_groups) == (
        1040, 4_259_840, 4, 7)
    # The same layers written the way transformers 5 saves them: Mamba-2, not Gated DeltaNet.
    kinds = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
    saved = {k: v for k, v in NEMOTRON_H_8B.items() if k != "hybrid_override_pattern"}
    saved["layers_block_type"] = [kinds[c] for c in NEMOTRON_H_8B["hybrid_override_pattern"]]
    assert layout(facts_from_config(saved, SRC), kv_dtype=None) == lay


def test_nemotron_h_with_an_mtp_layer_or_a_foreign_mamba_pattern_is_refused():
    assert "field 'num_nextn_predict_layers'" in refused(NEMOTRON_H_MTP)
    foreign = {**NEMOTRON_H_8B, "model_type": "bamba"}
    del foreign["mamba_num_heads"]
    text = refused(foreign)
    assert "field 'hybrid_override_pattern'" in text and "outside Nemotron-H" in text


@pytest.mark.parametrize(("config", "field"), [
    (JAMBA_MINI, "attn_layer_period"),
    (MAMBA2_PLAIN, "state_size"),
    ({**LLAMA31_8B, "layers_block_type": ["mamba", "attention"] * 16}, "layers_block_type"),
    ({**LLAMA31_8B, "ssm_state_size": 128, "mamba_num_heads": 64}, "ssm_state_size"),
])
def test_other_mamba_and_ssm_layouts_are_refused(config, field):
    text = refused(config)
    assert f"field {field!r}" in text and "Mamba" in text


def test_gdn_mamba_keys_still_plan(qwen36):
    assert qwen36.hybrid and qwen36.gdn is not None  # mamba_ssm_dtype beside the GDN keys


GEMMA4_26B: dict[str, Any] = {  # google/gemma-4-26B-A4B-it (text_config, KV fields)
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "text_config": {"model_type": "gemma4_text", "num_hidden_layers": 30,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
                    "global_head_dim": 512, "num_global_key_value_heads": 2,
                    "sliding_window": 1024, "hidden_size": 2816,
                    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5},
}


@pytest.mark.parametrize(("config", "field", "words"), [
    (MISTRAL_7B_V01, "sliding_window", "SlidingWindowSpec"),
    (MISTRAL_7B_V01, "sliding_window", "add layer_types to a copy of the config"),
    ({**LLAMA31_8B, "interleaved_sliding_window": 4096}, "interleaved_sliding_window",
     "whose layers the config does not lay out"),
    (GEMMA3N_E4B, "num_kv_shared_layers", "cross-layer KV sharing"),
    (GEMMA4_26B, "global_head_dim", "own head shape"),
    ({**GPT_OSS_120B, "layer_types": ["sliding_attention", "linear_attention"] * 18,
      "linear_num_value_heads": 32}, "layer_types", "either hybrid, not both"),
    ({**GPT_OSS_120B, "sliding_window": None}, "sliding_window", "not a positive integer"),
    ({**DEEPSEEK_V3, "index_topk": 2048}, "index_topk", "indexer key cache"),
])
def test_unlaid_windows_sparse_mla_and_shared_kv_are_refused(config, field, words):
    text = refused(config)
    assert f"field {field!r}" in text and words in text, text


@pytest.mark.parametrize(("config", "full", "sliding", "window"), [
    (GPT_OSS_120B, 18, 18, 128),   # layer_types; its sinks are per-head logits, no KV
    (GEMMA3_27B, 10, 52, 1024),    # no layer_types: Gemma 3's sliding_window_pattern 6
])
def test_sliding_window_models_plan(config, full, sliding, window):
    facts = facts_from_config(config, SRC)
    assert (facts.full_attention_layers, facts.sliding_layers, facts.sliding_window) == \
        (full, sliding, window)
    assert facts.sliding and not facts.hybrid


def test_qwen_family_sliding_window_switched_off_still_plans():
    facts = facts_from_config(QWEN25_7B, SRC)
    assert (facts.full_attention_layers, facts.num_kv_heads, facts.head_dim) == (28, 4, 128)


# -- the checkpoint's own KV quantization under --kv-cache-dtype auto -----------------------
@pytest.mark.parametrize(("config", "where"), [
    (MODELOPT_NVFP4, "quantization_config.kv_cache_quant_algo: FP8"),
    (HF_QUANT_SHAPE, "quantization_config.quantization.kv_cache_quant_algo: FP8"),
    (CT_FP8_KV, "quantization_config.kv_cache_scheme: "),
])
def test_an_fp8_kv_checkpoint_under_auto_caches_fp8_and_says_so(config, where):
    plain = layout(facts_from_config(LLAMA31_8B, SRC), kv_dtype="auto")
    lay = layout(facts_from_config(config, SRC), kv_dtype="auto")
    assert lay.page_bytes * 2 == plain.page_bytes == 16 * 8 * 2 * 128 * 2
    assert lay.kv_note.startswith("KV fp8_e4m3 under --kv-cache-dtype auto: the checkpoint "
                                  "declares it (" + where)
    assert lay.kv_note in lay.describe() and not plain.kv_note
    explicit = layout(facts_from_config(config, SRC), kv_dtype="fp8")
    assert explicit.page_bytes == lay.page_bytes and not explicit.kv_note


def test_a_kv_quantization_not_modelled_under_auto_is_refused():
    config = copy.deepcopy(MODELOPT_NVFP4)
    config["quantization_config"]["kv_cache_quant_algo"] = "NVFP4"
    facts = facts_from_config(config, SRC)
    with pytest.raises(ConfigError, match=r"'quantization_config.kv_cache_quant_algo' is NVFP4"
                                          r".*set vllm.kv_cache_dtype explicitly"):
        layout(facts, kv_dtype="auto")
    assert layout(facts, kv_dtype="bfloat16").page_bytes == 16 * 8 * 2 * 128 * 2


def test_compressed_tensors_kv_with_an_explicit_16_bit_dtype_is_refused():
    facts = facts_from_config(CT_FP8_KV, SRC)
    with pytest.raises(ConfigError, match="forced fp8 for compressed-tensors kv_cache_scheme"):
        layout(facts, kv_dtype="bfloat16")


# -- the profile: weights and hf_quant_config.json ---------------------------------------------
@pytest.fixture(scope="module")
def rtx5090() -> Node:
    return load_project(REPO_ROOT, "reference").nodes["rtx5090"]


def llama_profile(**model: Any) -> Profile:
    return Profile.model_validate({
        "name": "llama8b", "engine": "vllm", "engine_version": "0.21.0",
        "image": {"ref": "vllm/vllm-openai:v0.21.0", "digest": "sha256:" + "ab" * 32},
        "model": {"id": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "llama",
                  **model},
        "vllm": {"gpu_memory_utilization": 0.9, "max_model_len": 32768}})


def test_a_profile_without_weights_is_not_planned(rtx5090):
    facts = facts_from_config(LLAMA31_8B, SRC)
    with pytest.raises(ConfigError, match=r"profiles/llama8b.yaml: field model.weights_gib is "
                                          r"not set.*set model.weights_gib to the checkpoint's "
                                          r"safetensors total"):
        predict(facts, llama_profile(), rtx5090)
    planned = predict(facts, llama_profile(weights_gib=14.99), rtx5090)
    assert 70_000 < planned.pool.kv_cache_tokens < 110_000  # ~90k measured, not 213k


def test_nvfp4_weights_without_quantization_config_under_auto_are_refused(rtx5090):
    facts = facts_from_config(LLAMA31_8B, SRC)
    with pytest.raises(ConfigError, match=r"hf_quant_config.json.*set vllm.kv_cache_dtype "
                                          r"explicitly"):
        profile_layout(facts, llama_profile(weights_gib=5.6, quant_format="nvfp4"))
    assert profile_layout(facts_from_config(MODELOPT_NVFP4, SRC),
                          llama_profile(weights_gib=5.6, quant_format="nvfp4")).kv_note


def test_the_reserve_says_what_its_base_was_fitted_on():
    cold = [row.cold for row in ROWS if row.cold is not None and not row.not_modelled]
    for unified, family in ((True, UNIFIED), (False, CONSUMER)):
        count = sum(1 for c in cold if c.reserve.unified_memory is unified)
        assert family.fitted_on.startswith(f"fitted on {count} Qwen3.6-35B-A3B ")
    inputs = ReserveInputs(unified_memory=False, version=(0, 21), max_num_batched_tokens=8192,
                           max_num_seqs=64, num_spec=0, cudagraph_mode="FULL_AND_PIECEWISE",
                           attention_backend="FLASH_ATTN", graph_profiling=True,
                           activation_bytes_per_token=0)
    assert estimate(inputs).describe().startswith(
        "0.12 GiB base (consumer card; fitted on 6 Qwen3.6-35B-A3B RTX 5090 boots (seed 003), "
        "an assumption for other models and cards)")


def test_mla_is_one_latent_per_token_and_layer():
    """DeepSeek-V3: 61 layers + 1 MTP layer of one 576-element latent (512 + 64 rope), no V,
    the same on every tensor-parallel rank (checked against a real boot of DeepSeek-V2-Lite's
    shapes in test_h200_boots.py)."""
    facts = facts_from_config(DEEPSEEK_V3, SRC)
    assert (facts.mla, facts.num_kv_heads, facts.head_dim, facts.mtp_layers) == (True, 1, 576, 1)
    assert layout(facts, kv_dtype="auto").page_bytes == 16 * 576 * 2
    assert layout(facts, kv_dtype="auto", tp=8).page_bytes == 16 * 576 * 2
    assert layout(facts, kv_dtype="fp8").page_bytes == 16 * 576
    assert layout(facts, kv_dtype="fp8_ds_mla").page_bytes == 16 * 656
    assert layout(facts, kv_dtype="auto", mtp=True, num_spec=1).attention_layers == 62
    with pytest.raises(ConfigError, match="multi-head latent attention is not modelled"):
        layout(facts, kv_dtype="turboquant_4bit_nc")


def test_a_cold_plan_of_a_multimodal_checkpoint_says_what_it_leaves_out(rtx5090):
    """Its encoders are read (not refused: the text tower's layout is right) and the cold
    prediction says it leaves out their profiling pass, unless the profile serves text only."""
    from tests.core.rules.test_planner import QWEN3_VL_MOE, QWEN25_VL

    facts = facts_from_config(QWEN25_VL, SRC)
    assert facts.encoders == ("vision_config",) and facts.vision is None
    profile = llama_profile(weights_gib=10.0)
    planned = predict(facts, profile, rtx5090)
    assert "the vision encoder is not modelled" in planned.how
    assert "vllm.language_model_only leaves the encoder out" in planned.how
    text_only = profile.model_copy(update={"vllm": profile.vllm.model_copy(
        update={"language_model_only": True})})
    assert "encoder" not in predict(facts, text_only, rtx5090).how
    assert facts_from_config(LLAMA31_8B, SRC).encoders == ()
    # Qwen3-VL's tower is modelled: the MoE one (V1 runner) reserves its profiling run.
    vl = facts_from_config(QWEN3_VL_MOE, SRC)
    assert vl.vision is not None and vl.moe and vl.vocab_size == 151936
    modelled = predict(vl, profile, rtx5090)
    assert "not modelled" not in modelled.how and modelled.reserve is not None
    assert modelled.reserve.encoder > 0 and "vision encoder (1 image(s) of 16,384 tokens" \
        in modelled.reserve.describe()
    assert predict(vl, text_only, rtx5090).reserve.encoder == 0  # type: ignore[union-attr]


ERNIE45_21B_A3B: dict[str, Any] = {  # baidu/ERNIE-4.5-21B-A3B-PT
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
    "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28,
    "num_attention_heads": 20, "num_key_value_heads": 4, "head_dim": 128,
    "moe_num_experts": 64, "moe_k": 6, "moe_intermediate_size": 1536,
    "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "vocab_size": 103424,
    "max_position_embeddings": 131072, "rope_theta": 500000, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16"}


def test_experts_are_counted_where_vllm_counts_them():
    """ERNIE 4.5 names its experts ``moe_num_experts`` and its top-k ``moe_k``: vLLM keeps it
    on the V1 runner as an MoE, and its activations are its experts', not a 12,288-wide
    dense MLP's."""
    from servefleet.core.kvplan.modelconfig import num_experts

    facts = facts_from_config(ERNIE45_21B_A3B, SRC)
    assert facts.moe and facts.vocab_size == 103424
    # Six routed experts and two shared ones (moe_num_shared_experts) of 1,536.
    assert facts.activation_bytes_per_token == 2 * (6 * 3 * 1536 + 3 * 2 * 1536 + 4 * 2560)
    assert num_experts({"num_local_experts": [8, 8]}) == 8
    assert num_experts({"block_configs": [{"block_type": "moe", "n_routed_experts": 128},
                                          {"block_type": "attention"}]}) == 128
    assert num_experts({"num_experts": 0, "n_routed_experts": 64}) == 0  # vLLM's order
    assert num_experts({"num_experts": 0, "block_configs": [
        {"block_type": "moe", "n_routed_experts": 16}]}) == 16
    assert not facts_from_config(LLAMA31_8B, SRC).moe

"""Planner rules: validate refuses what plan would refuse or get wrong (a changed pin, a model
the planner does not model, unknown weights, a pool below one request, inherited model
facts of another checkpoint)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from servefleet.core.models import Profile
from servefleet.core.project import Project
from tests.core.kvplan.test_refusals import MODELOPT_NVFP4, NEMOTRON_H_MTP
from tests.reference_project import REPO_ROOT

QWEN_CONFIG = REPO_ROOT / "profiles" / "models" / "qwen3.6-35b-a3b.config.json"
QWEN_SHA = hashlib.sha256(QWEN_CONFIG.read_bytes()).hexdigest()


def pin(root: Path, name: str, config: dict[str, Any] | bytes) -> dict[str, str]:
    """Write a config under ``root/profiles/models`` and return its ``model.config``."""
    data = config if isinstance(config, bytes) else json.dumps(config).encode()
    path = root / "profiles" / "models" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"file": f"models/{name}", "sha256": hashlib.sha256(data).hexdigest()}


def rooted(project: Project, root: Path) -> Project:
    return dataclasses.replace(project, root=root)


def qwen(kit, tmp_path: Path, **overrides: Any) -> Profile:
    ref = pin(tmp_path, "qwen.json", QWEN_CONFIG.read_bytes())
    return kit.profile(**{"model": {"config": ref}, **overrides})


def test_the_kit_profile_with_the_shipped_config_is_clean(kit, tmp_path):
    project = rooted(kit.place(qwen(kit, tmp_path), kit.node("gb10")), tmp_path)
    for rule in ("model-config-pin", "model-config-not-plannable", "model-weights-unknown",
                 "kv-pool-below-one-request"):
        assert kit.run(rule, project) == []


def test_a_wrong_sha256_is_an_error_with_the_actual_digest(kit, tmp_path):
    profile = qwen(kit, tmp_path, model={"config": {"file": "models/qwen.json",
                                                    "sha256": "0" * 64}})
    finding = kit.only("model-config-pin", rooted(kit.alone(profile), tmp_path))
    kit.assert_message(finding, file="profiles/p.yaml", field="model.config.sha256",
                       value=f"whose sha256 is {QWEN_SHA}", why="servefleet plan and tune",
                       fix=f"set model.config.sha256: {QWEN_SHA}")
    assert kit.run("model-config-not-plannable", rooted(kit.alone(profile), tmp_path)) == []


def test_an_unreadable_pin_is_an_error(kit, tmp_path):
    profile = kit.profile(model={"config": {"file": "models/gone.json", "sha256": "0" * 64}})
    finding = kit.only("model-config-pin", rooted(kit.alone(profile), tmp_path))
    assert finding.field == "model.config.file" and "cannot read" in finding.message


def test_a_config_the_planner_refuses_is_an_error(kit, tmp_path):
    ref = pin(tmp_path, "nemotron-h.json", NEMOTRON_H_MTP)
    profile = kit.profile(model={"id": "nvidia/Nemotron-H-8B-Base-8K", "config": ref,
                                 "hybrid_gdn": False})
    finding = kit.only("model-config-not-plannable", rooted(kit.alone(profile), tmp_path))
    kit.assert_message(finding, file="profiles/p.yaml", field="model.config.file",
                       value="field 'num_nextn_predict_layers'", why="refuses rather than",
                       fix="remove model.config from the profile")


def test_kv_settings_the_planner_refuses_are_an_error(kit, tmp_path):
    config = json.loads(json.dumps(MODELOPT_NVFP4))
    config["quantization_config"]["kv_cache_quant_algo"] = "NVFP4"
    ref = pin(tmp_path, "nvfp4.json", config)
    profile = kit.profile(model={"id": "nvidia/Llama-3.1-8B-Instruct-FP4", "config": ref,
                                 "hybrid_gdn": False, "quant_format": "nvfp4"},
                          vllm={"kv_cache_dtype": "auto"})
    finding = kit.only("model-config-not-plannable", rooted(kit.alone(profile), tmp_path))
    assert finding.field == "vllm.kv_cache_dtype" and finding.value == "auto"
    assert "set vllm.kv_cache_dtype explicitly" in finding.fix


def test_unknown_weights_are_an_error(kit, tmp_path):
    profile = kit.profile(model={"weights_gib": None})
    finding = kit.only("model-weights-unknown", kit.place(profile, kit.node("rtx5090")))
    kit.assert_message(finding, file="profiles/p.yaml", field="model.weights_gib",
                       value="cannot predict it", why="determine_available_memory",
                       fix="set model.weights_gib to the checkpoint's safetensors total")


def test_a_pool_below_one_request_is_an_error(kit, tmp_path):
    # 34.9 GiB of weights at 0.45 of a GB10 leaves ~15 GiB: 1M tokens of fp8 KV do not fit.
    profile = qwen(kit, tmp_path, vllm={"max_model_len": 1_048_576,
                                        "gpu_memory_utilization": 0.32})
    finding = kit.only("kv-pool-below-one-request",
                       rooted(kit.place(profile, kit.node("gb10")), tmp_path))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.max_model_len",
                       value="1,048,576 tokens do not fit one request",
                       why="check_enough_kv_cache_memory",
                       fix="servefleet tune p --node gb10 --target-concurrency 1")


def with_parent(kit, tmp_path, child_own: dict[str, Any]) -> Project:
    parent = qwen(kit, tmp_path, name="base",
                  vllm={"reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder"})
    own = {"extends": "base", **child_own}
    child = Profile.model_validate(
        {**json.loads(parent.model_dump_json(exclude_none=True)), "name": "child",
         "model": {**parent.model.model_dump(exclude_none=True), **child_own["model"]}})
    project = rooted(kit.project([parent, child], [], []), tmp_path)
    return dataclasses.replace(project, raw_profiles={"base": {}, "child": own})


def test_extends_with_another_model_id_must_restate_the_model_facts(kit, tmp_path):
    project = with_parent(kit, tmp_path, {"model": {"id": "meta-llama/Llama-3.1-8B-Instruct",
                                                    "served_name": "llama"}})
    finding = kit.only("extends-keeps-model-facts", project)
    kit.assert_message(finding, file="profiles/child.yaml", field="model.id",
                       value="inherits its model facts model.hybrid_gdn, model.native_context, "
                             "model.weights_gib, model.quant_format, model.kv_bytes_per_token, "
                             "model.config, vllm.reasoning_parser, vllm.tool_call_parser",
                       why="extends merges every field", fix="restate model.hybrid_gdn")


def test_extends_that_restates_the_facts_or_keeps_the_model_is_clean(kit, tmp_path):
    restated = with_parent(kit, tmp_path, {
        "model": {"id": "meta-llama/Llama-3.1-8B-Instruct", "hybrid_gdn": False,
                  "native_context": 131072, "weights_gib": 14.99, "quant_format": "bf16",
                  "kv_bytes_per_token": 131072, "config": None},
        "vllm": {"reasoning_parser": None, "tool_call_parser": "llama3_json"}})
    assert kit.run("extends-keeps-model-facts", restated) == []
    same = with_parent(kit, tmp_path, {"model": {"served_name": "other"}})
    assert kit.run("extends-keeps-model-facts", same) == []


QWEN3_VL_MOE: dict[str, Any] = {  # Qwen/Qwen3-VL-30B-A3B-Instruct: the text tower and a vision one
    "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
    "text_config": {
        "model_type": "qwen3_vl_moe_text", "hidden_size": 2048, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
        "vocab_size": 151936, "max_position_embeddings": 262144, "dtype": "bfloat16"},
    "vision_config": {"model_type": "qwen3_vl_moe", "depth": 27, "hidden_size": 1152,
                      "intermediate_size": 4304, "out_hidden_size": 2048, "patch_size": 16,
                      "temporal_patch_size": 2, "spatial_merge_size": 2,
                      "deepstack_visual_indexes": [8, 16, 24]},
}
QWEN25_VL: dict[str, Any] = {  # a Qwen2.5-VL-shaped checkpoint: its video item is not modelled
    **QWEN3_VL_MOE, "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl"}


def test_a_multimodal_checkpoint_served_with_its_encoder_is_a_warning(kit, tmp_path):
    ref = pin(tmp_path, "qwen25-vl.json", QWEN25_VL)
    model = {"id": "Qwen/Qwen2.5-VL-7B-Instruct", "config": ref, "hybrid_gdn": False}
    profile = kit.profile(model=model)
    finding = kit.only("model-encoder-not-modelled", rooted(kit.alone(profile), tmp_path))
    assert finding.severity.value == "warning"
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.language_model_only",
                       value="has vision_config", why="profile_run()",
                       fix="set vllm.language_model_only: true")
    text_only = kit.profile(model=model, vllm={"language_model_only": True})
    assert kit.run("model-encoder-not-modelled", rooted(kit.alone(text_only), tmp_path)) == []
    # Qwen3-VL's encoder is modelled: no warning.
    modelled = {**model, "id": "Qwen/Qwen3-VL-30B-A3B-Instruct",
                "config": pin(tmp_path, "qwen3-vl.json", QWEN3_VL_MOE)}
    assert kit.run("model-encoder-not-modelled",
                   rooted(kit.alone(kit.profile(model=modelled)), tmp_path)) == []
    # The shipped Qwen3.6 config is the text model alone.
    assert kit.run("model-encoder-not-modelled",
                   rooted(kit.alone(qwen(kit, tmp_path)), tmp_path)) == []

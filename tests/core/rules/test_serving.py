"""Tool choice, long context, GDN chunk size, FP8 lm_head and enforce-eager rules."""

from __future__ import annotations

YARN_X4 = {"text_config": {"rope_parameters": {
    "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 262144}}}


def test_auto_tool_choice_needs_parser(kit):
    bad = kit.profile(vllm={"enable_auto_tool_choice": True})
    finding = kit.only("auto-tool-choice-needs-parser", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.enable_auto_tool_choice",
                       value="true", why="cli_args.py", fix="vllm.tool_call_parser")
    good = kit.profile(vllm={"enable_auto_tool_choice": True, "tool_call_parser": "qwen3_coder"})
    assert not kit.run("auto-tool-choice-needs-parser", kit.alone(good))


def test_long_context_needs_override(kit):
    bad = kit.profile(vllm={"max_model_len": 1048576})
    findings = kit.run("long-context-needs-override", kit.alone(bad))
    by_field = {f.field: f for f in findings}
    assert set(by_field) == {"env.VLLM_ALLOW_LONG_MAX_MODEL_LEN", "vllm.hf_overrides"}
    kit.assert_message(by_field["env.VLLM_ALLOW_LONG_MAX_MODEL_LEN"], file="profiles/p.yaml",
                       field="env.VLLM_ALLOW_LONG_MAX_MODEL_LEN", value="(not set)",
                       why="vllm/config/model.py",
                       fix='env.VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"')
    kit.assert_message(by_field["vllm.hf_overrides"], file="profiles/p.yaml",
                       field="vllm.hf_overrides", value="(not set)", why="YaRN",
                       fix="factor: 4")
    assert "1048576" in by_field["vllm.hf_overrides"].message

    good = kit.profile(vllm={"max_model_len": 1048576, "hf_overrides": YARN_X4},
                       env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert not kit.run("long-context-needs-override", kit.alone(good))
    native = kit.profile(vllm={"max_model_len": 262144})
    assert not kit.run("long-context-needs-override", kit.alone(native))


def test_long_context_rope_factor_too_small(kit):
    two = {"text_config": {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}}
    bad = kit.profile(vllm={"max_model_len": 1048576, "hf_overrides": two},
                      env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "true"})
    finding = kit.only("long-context-needs-override", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml",
                       field="vllm.hf_overrides.text_config.rope_parameters.factor",
                       value="2 × 262144", why="YaRN", fix="raise the factor to 4")


def test_hybrid_gdn_batched_tokens_below_4096(kit):
    bad = kit.profile(vllm={"max_num_batched_tokens": 2048})
    finding = kit.only("hybrid-gdn-batched-tokens-below-4096", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.max_num_batched_tokens",
                       value="2048", why="Qwen3.6-35B-A3B-NVFP4 model card",
                       fix="4096 or more")
    rule = "hybrid-gdn-batched-tokens-below-4096"
    assert not kit.run(rule, kit.alone(kit.profile(vllm={"max_num_batched_tokens": 4096})))
    dense = kit.profile(model={"hybrid_gdn": False}, vllm={"max_num_batched_tokens": 2048})
    assert not kit.run(rule, kit.alone(dense))


def test_fp8_lm_head_needs_overlay(kit):
    bad = kit.profile(model={"id": "inferRouter/Qwen3.6-35B-A3B-NVFP4", "revision": "fp8-head",
                             "quant_format": "nvfp4"})
    finding = kit.only("fp8-lm-head-needs-overlay", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="model.revision",
                       value="fp8-head", why="vllm_patches/",
                       fix="provides: [fp8-lm-head-dispatch]")
    flagged = kit.profile(model={"fp8_lm_head": True})
    assert kit.only("fp8-lm-head-needs-overlay", kit.alone(flagged)).field == "model.fp8_lm_head"
    good = kit.profile(model={"revision": "fp8-head"}, patches=[{
        "file": "patches/ct-fp8-lmhead.diff", "sha256": "12" * 32,
        "provides": ["fp8-lm-head-dispatch"]}])
    assert not kit.run("fp8-lm-head-needs-overlay", kit.alone(good))


def test_enforce_eager_cudagraph_expectation(kit):
    bad = kit.profile(vllm={"enforce_eager": True}, health={"cudagraph_mode": "PIECEWISE"})
    finding = kit.only("enforce-eager-cudagraph-expectation", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="health.cudagraph_mode",
                       value="PIECEWISE", why="enforce-eager", fix="cudagraph_mode: NONE")
    good = kit.profile(vllm={"enforce_eager": True}, health={"cudagraph_mode": "NONE"})
    assert not kit.run("enforce-eager-cudagraph-expectation", kit.alone(good))

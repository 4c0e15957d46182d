"""Speculative-decoding rules."""

from __future__ import annotations

MTP2 = {"method": "qwen3_next_mtp", "num_speculative_tokens": 2}
MTP1 = {"method": "mtp", "num_speculative_tokens": 1}


def test_mtp_thinking_budget_ignored(kit):
    bad = kit.profile(vllm={"speculative": MTP1, "reasoning_parser": "qwen3",
                            "thinking_token_budget": 4096})
    finding = kit.only("mtp-thinking-budget-ignored", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.thinking_token_budget",
                       value="4096", why="vLLM #39573", fix="max_tokens")
    assert "#54906" in finding.why
    no_mtp = kit.profile(vllm={"thinking_token_budget": 4096})
    assert not kit.run("mtp-thinking-budget-ignored", kit.alone(no_mtp))


def test_mtp_thinking_budget_in_reasoning_config(kit):
    arg = '--reasoning-config={"reasoning_parser":"qwen3","thinking_budget":2048}'
    bad = kit.profile(vllm={"speculative": MTP1, "extra_args": [arg]})
    finding = kit.only("mtp-thinking-budget-ignored", kit.alone(bad))
    assert finding.field == "vllm.extra_args[0]"


def test_async_scheduling_incompatible_spec_method(kit):
    ngram = {"method": "ngram", "num_speculative_tokens": 3}
    bad = kit.profile(vllm={"speculative": ngram, "async_scheduling": True})
    finding = kit.only("async-scheduling-incompatible-spec-method", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.async_scheduling",
                       value="true", why="vllm/config/vllm.py", fix="ngram_gpu")
    assert "ngram" in finding.message
    rule = "async-scheduling-incompatible-spec-method"
    assert not kit.run(rule, kit.alone(kit.profile(vllm={"speculative": ngram})))
    assert not kit.run(rule, kit.alone(kit.profile(
        vllm={"speculative": MTP1, "async_scheduling": True})))


def test_mtp_multiple_speculative_tokens(kit):
    finding = kit.only("mtp-multiple-speculative-tokens",
                       kit.alone(kit.profile(vllm={"speculative": MTP2})))
    kit.assert_message(finding, file="profiles/p.yaml",
                       field="vllm.speculative.num_speculative_tokens", value="2",
                       why="same MTP layer", fix="num_speculative_tokens: 1")
    assert not kit.run("mtp-multiple-speculative-tokens",
                       kit.alone(kit.profile(vllm={"speculative": MTP1})))


def test_determinism_with_speculative_decoding(kit):
    bad = kit.profile(vllm={"speculative": MTP2}, health={"determinism": {"wanted": True}})
    finding = kit.only("determinism-with-speculative-decoding", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="health.determinism.wanted",
                       value="true", why="vLLM + MTP", fix="drop vllm.speculative")
    assert "qwen3_next_mtp" in finding.message
    good = kit.profile(health={"determinism": {"wanted": True}})
    assert not kit.run("determinism-with-speculative-decoding", kit.alone(good))


def test_spec_decode_flashinfer_piecewise(kit):
    profile = kit.profile(vllm={"speculative": MTP2, "attention_backend": "FLASHINFER"})
    finding = kit.only("spec-decode-flashinfer-piecewise", kit.place(profile, kit.node("gb10")))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.speculative.method",
                       value="qwen3_next_mtp", why="resolve_cudagraph_mode_and_sizes",
                       fix="gpu_memory_utilization")
    assert "PIECEWISE" in finding.message and "expectations are adjusted" in finding.message
    assert "gb10" in finding.message and "12.1" in finding.message
    rule = "spec-decode-flashinfer-piecewise"
    # SM100 keeps full graphs (TRTLLM attention); FlashAttention does not downgrade.
    assert not kit.run(rule, kit.place(profile, kit.node("b200")))
    flash_attn = kit.profile(vllm={"speculative": MTP2, "attention_backend": "FLASH_ATTN"})
    assert not kit.run(rule, kit.place(flash_attn, kit.node("gb10")))
    # Unpinned backend with an FP8 KV cache off Hopper: FlashInfer, as seen on GB10.
    unpinned = kit.profile(vllm={"speculative": MTP2})
    assert kit.run(rule, kit.place(unpinned, kit.node("gb10")))
    assert not kit.run(rule, kit.place(unpinned, kit.node("h100")))


def test_spec_decode_flashinfer_full_graphs_expected(kit):
    bad = kit.profile(vllm={"speculative": MTP2, "attention_backend": "flashinfer"},
                      health={"cudagraph_mode": "FULL_AND_PIECEWISE"})
    project = kit.place(bad, kit.node("gb10"))
    finding = kit.only("spec-decode-flashinfer-full-graphs-expected", project)
    kit.assert_message(finding, file="profiles/p.yaml", field="health.cudagraph_mode",
                       value="FULL_AND_PIECEWISE", why="UNIFORM_SINGLE_TOKEN_DECODE",
                       fix="health.cudagraph_mode: PIECEWISE")
    # The error replaces the notice, it does not come with it.
    assert not kit.run("spec-decode-flashinfer-piecewise", project)
    good = kit.profile(vllm={"speculative": MTP2, "attention_backend": "FLASHINFER"},
                       health={"cudagraph_mode": "PIECEWISE"})
    assert not kit.run("spec-decode-flashinfer-full-graphs-expected",
                       kit.place(good, kit.node("gb10")))
    assert not kit.run("spec-decode-flashinfer-full-graphs-expected",
                       kit.place(bad, kit.node("b200")))

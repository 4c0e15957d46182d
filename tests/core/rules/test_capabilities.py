"""Engine features by version: architectures and speculative methods."""

from __future__ import annotations

import pytest

QWEN35_MOE = "Qwen3_5MoeForConditionalGeneration"


def test_an_architecture_newer_than_the_pinned_vllm_is_an_error(kit):
    old = kit.profile(engine_version="0.10.0", model={"architecture": QWEN35_MOE})
    finding = kit.only("architecture-not-in-version", kit.alone(old))
    kit.assert_message(finding, file="profiles/p.yaml", field="model.architecture",
                       value=QWEN35_MOE, why="runpod-workers/worker-vllm#279",
                       fix="use an image of vLLM ≥ 0.17")
    assert finding.message == (
        "Qwen3_5MoeForConditionalGeneration is not served by vLLM 0.10.0: it is first in vLLM "
        "0.17; vLLM stops with 'Model architectures ['Qwen3_5MoeForConditionalGeneration'] "
        "are not supported for now'")
    assert not kit.run("architecture-not-in-version", kit.alone(
        kit.profile(engine_version="0.17.0", model={"architecture": QWEN35_MOE})))
    # an architecture the table does not know is not judged
    assert not kit.run("architecture-not-in-version", kit.alone(
        kit.profile(engine_version="0.10.0", model={"architecture": "LlamaForCausalLM"})))


def test_a_speculative_method_newer_than_the_pinned_vllm_is_an_error(kit):
    old = kit.profile(engine_version="0.10.0", vllm={"speculative": {
        "method": "qwen3_next_mtp", "num_speculative_tokens": 2}})
    finding = kit.only("speculative-method-not-in-version", kit.alone(old))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.speculative.method",
                       value="qwen3_next_mtp", why="24526",
                       fix="use an image of vLLM ≥ 0.10.2")
    assert finding.message == (
        "qwen3_next_mtp is not a speculative method of vLLM 0.10.0 (first in vLLM 0.10.2); "
        "vLLM rejects the --speculative-config at startup")


def test_the_issue_case_gives_both_errors(kit):
    # vLLM 0.10.0 with Qwen3.5-MoE and qwen3_next_mtp validated clean before.
    old = kit.profile(engine_version="0.10.0", model={"architecture": QWEN35_MOE},
                      vllm={"speculative": {"method": "qwen3_next_mtp",
                                            "num_speculative_tokens": 2}})
    rules = {f.rule for f in kit.run("architecture-not-in-version", kit.alone(old))} | {
        f.rule for f in kit.run("speculative-method-not-in-version", kit.alone(old))}
    assert rules == {"architecture-not-in-version", "speculative-method-not-in-version"}


@pytest.mark.parametrize(("version", "method", "refused"), [
    ("0.10.2", "mtp", True), ("0.11.0", "mtp", False),
    ("0.16.0", "qwen3_5_mtp", True), ("0.17.0", "qwen3_5_mtp", False),
    ("0.21.0", "medusa", False), ("0.33.0", "medusa", True),
    ("0.8.5", "ngram", False),
])
def test_speculative_method_table(kit, version, method, refused):
    profile = kit.profile(engine_version=version, vllm={"speculative": {
        "method": method, "num_speculative_tokens": 2}})
    found = kit.run("speculative-method-not-in-version", kit.alone(profile))
    assert bool(found) is refused
    if refused and method == "medusa":
        assert "(removed in vLLM 0.33)" in found[0].message
        assert "image of vLLM < 0.33" in found[0].fix

"""KV-cache dtype and TurboQuant rules."""

from __future__ import annotations

import pytest

TQ = "turboquant_4bit_nc"
PR40798 = {"file": "patches/pr40798.diff", "sha256": "cd" * 32, "pr": 40798,
           "provides": ["turboquant-workspace-reservation"]}


def tq_profile(kit, version: str, **overrides):
    """A TurboQuant profile on ``version`` (the image tag follows the version)."""
    image = {"ref": f"vllm/vllm-openai:v{version}", **overrides.pop("image", {})}
    vllm = {"kv_cache_dtype": TQ, **overrides.pop("vllm", {})}
    return kit.profile(engine_version=version, image=image, vllm=vllm, **overrides)


def test_kv_cache_dtype_not_in_version(kit):
    bad = kit.profile(engine_version="0.21.0", vllm={"kv_cache_dtype": "nvfp4_4over6"})
    finding = kit.only("kv-cache-dtype-not-in-version", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.kv_cache_dtype",
                       value="nvfp4_4over6", why="CacheDType", fix="vLLM ≥ 0.22")
    assert "absent in 0.21.0" in finding.message
    assert not kit.run("kv-cache-dtype-not-in-version", kit.alone(
        kit.profile(engine_version="0.33.0", vllm={"kv_cache_dtype": "nvfp4_4over6"})))


@pytest.mark.parametrize(("version", "kv", "refused"), [
    ("0.10.2", "bfloat16", True), ("0.11.0", "bfloat16", False),
    ("0.8.5", "fp8_inc", True), ("0.10.2", "fp8_inc", False),
    ("0.11.0", "float16", True), ("0.21.0", "float16", False),
    ("0.8.5", "fp8_e4m3", False),
])
def test_kv_cache_dtype_table(kit, version, kv, refused):
    profile = kit.profile(engine_version=version, vllm={"kv_cache_dtype": kv})
    assert bool(kit.run("kv-cache-dtype-not-in-version", kit.alone(profile))) is refused


def test_turboquant_needs_newer_vllm(kit):
    bad = tq_profile(kit, "0.19.1rc1.dev328")
    finding = kit.only("turboquant-needs-newer-vllm", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.kv_cache_dtype", value=TQ,
                       why="vLLM PR #38479", fix="vLLM ≥ 0.21.0")
    # The general dtype rule leaves TurboQuant to this one: one error, not two.
    assert not kit.run("kv-cache-dtype-not-in-version", kit.alone(bad))
    assert not kit.run("turboquant-needs-newer-vllm", kit.alone(tq_profile(kit, "0.20.0")))


def test_turboquant_needs_hybrid_support(kit):
    bad = tq_profile(kit, "0.20.0")
    finding = kit.only("turboquant-needs-hybrid-support", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.kv_cache_dtype", value=TQ,
                       why="vLLM PR #39931", fix="provides: [turboquant-hybrid]")
    assert "not supported for hybrid" in finding.message
    rule = "turboquant-needs-hybrid-support"
    assert not kit.run(rule, kit.alone(tq_profile(kit, "0.21.0")))
    assert not kit.run(rule, kit.alone(tq_profile(kit, "0.20.0", model={"hybrid_gdn": False})))
    # A patch overlay (by capability or by PR number) or an image that has it.
    patch = {"file": "patches/pr39931.diff", "sha256": "ef" * 32}
    assert not kit.run(rule, kit.alone(tq_profile(
        kit, "0.20.0", patches=[{**patch, "provides": ["turboquant-hybrid"]}])))
    by_pr = tq_profile(kit, "0.20.0", patches=[{**patch, "pr": 39931}])
    assert not kit.run(rule, kit.alone(by_pr))
    assert not kit.run(rule, kit.alone(tq_profile(
        kit, "0.20.2rc1.dev35", image={"provides": ["turboquant-hybrid"]})))


def test_turboquant_needs_workspace_overlay(kit):
    bad = tq_profile(kit, "0.21.0", vllm={"enable_chunked_prefill": None})
    finding = kit.only("turboquant-needs-workspace-overlay", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.kv_cache_dtype", value=TQ,
                       why="PR #40798",
                       fix="pr: 40798, provides: [turboquant-workspace-reservation]")
    assert "chunked prefill on by default" in finding.message
    assert "#41565" in finding.why


@pytest.mark.parametrize(("version", "overrides", "fires"), [
    ("0.21.0", {}, True),
    ("0.23.0", {"vllm": {"enable_chunked_prefill": True}}, True),
    ("0.24.1", {}, True),
    ("0.25.0", {}, False),                                   # the reservation shipped
    ("0.21.0", {"vllm": {"enable_chunked_prefill": False}}, False),
    ("0.21.0", {"patches": [PR40798]}, False),
    ("0.21.0", {"patches": [{**PR40798, "provides": []}]}, False),      # by PR number
    ("0.20.0", {"model": {"hybrid_gdn": False}}, False),     # 0.20.0 wheel: per-layer buffers
    ("0.20.2rc1.dev35", {"image": {"provides": ["turboquant-hybrid"]}}, True),  # nightly
])
def test_turboquant_workspace_versions(kit, version, overrides, fires):
    profile = tq_profile(kit, version, **overrides)
    assert bool(kit.run("turboquant-needs-workspace-overlay", kit.alone(profile))) is fires


def test_turboquant_with_speculative_decoding(kit):
    bad = tq_profile(kit, "0.25.0", vllm={
        "speculative": {"method": "mtp", "num_speculative_tokens": 1}})
    finding = kit.only("turboquant-with-speculative-decoding", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.speculative.method",
                       value="mtp", why="vLLM #40069", fix="drop vllm.speculative")
    assert not kit.run("turboquant-with-speculative-decoding",
                       kit.alone(tq_profile(kit, "0.25.0")))

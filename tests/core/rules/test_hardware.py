"""GPU generation, CPU architecture and GPU-count rules (profile placed on a node)."""

from __future__ import annotations

NVFP4 = {"id": "inferRouter/Qwen3.6-35B-A3B-NVFP4", "quant_format": "nvfp4", "weights_gib": 22}


def test_nvfp4_needs_blackwell(kit):
    bad = kit.profile(model=NVFP4)
    finding = kit.only("nvfp4-needs-blackwell", kit.place(bad, kit.node("h100")))
    kit.assert_message(finding, file="profiles/p.yaml", field="model.quant_format",
                       value="nvfp4", why="Blackwell", fix="Blackwell node")
    assert "SM 9.0" in finding.message and "h100" in finding.message
    assert not kit.run("nvfp4-needs-blackwell", kit.place(bad, kit.node("rtx5090")))
    nvfp4_kv = kit.profile(vllm={"kv_cache_dtype": "nvfp4"})
    assert kit.only("nvfp4-needs-blackwell",
                    kit.place(nvfp4_kv, kit.node("h100"))).field == "vllm.kv_cache_dtype"


def test_fp8_needs_sm89(kit):
    bad = kit.profile()  # FP8 weights and an fp8_e4m3 KV cache
    findings = kit.run("fp8-needs-sm89", kit.place(bad, kit.node("a100")))
    assert {f.field for f in findings} == {"model.quant_format", "vllm.kv_cache_dtype"}
    by_field = {f.field: f for f in findings}
    kit.assert_message(by_field["vllm.kv_cache_dtype"], file="profiles/p.yaml",
                       field="vllm.kv_cache_dtype", value="fp8_e4m3", why="SM 8.9",
                       fix="W8A16")
    assert "a100" in by_field["model.quant_format"].message
    assert not kit.run("fp8-needs-sm89", kit.place(bad, kit.node("h100")))
    int8 = kit.profile(model={"quant_format": "int8"}, vllm={"kv_cache_dtype": "auto"})
    assert not kit.run("fp8-needs-sm89", kit.place(int8, kit.node("a100")))


def test_image_platform_mismatch(kit):
    bad = kit.profile(image={"platforms": ["linux/amd64"]})
    finding = kit.only("image-platform-mismatch", kit.place(bad, kit.node("gb10")))
    kit.assert_message(finding, file="profiles/p.yaml", field="image.platforms",
                       value="linux/amd64", why="aarch64", fix="linux/arm64")
    assert "exec format error" in finding.message
    assert not kit.run("image-platform-mismatch", kit.place(bad, kit.node("rtx5090")))


def test_tensor_parallel_exceeds_gpus(kit):
    bad = kit.profile(vllm={"tensor_parallel_size": 2})
    finding = kit.only("tensor-parallel-exceeds-gpus", kit.place(bad, kit.node("rtx5090")))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.tensor_parallel_size",
                       value="2", why="one worker per GPU", fix="at most 1")
    two_gpus = kit.node("h100", gpus=[{"name": "NVIDIA H100 80GB HBM3", "count": 2,
                                       "memory_gib": 80, "compute_capability": "9.0"}])
    assert not kit.run("tensor-parallel-exceeds-gpus", kit.place(bad, two_gpus))

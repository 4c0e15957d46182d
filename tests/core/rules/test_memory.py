"""Memory-fit rules, per engine and per node."""

from __future__ import annotations

from typing import Any

import pytest

from servefleet.core.rules.memory import estimate

TQ_5090: dict[str, Any] = {
    "model": {"id": "inferRouter/Qwen3.6-35B-A3B-NVFP4", "quant_format": "nvfp4",
              "weights_gib": 21.96},
    "vllm": {"gpu_memory_utilization": 0.95, "max_model_len": 262144,
             "max_num_batched_tokens": 8192, "kv_cache_dtype": "turboquant_4bit_nc"},
    "engine_version": "0.25.0",
}


def test_estimate_arithmetic(kit):
    found = estimate(kit.profile(**TQ_5090), kit.node("rtx5090"))
    assert found is not None
    assert found.budget == pytest.approx(0.95 * 32)
    # 262144 tokens × 20480 B × 262/1024 (TurboQuant 4-bit) = 1.28 GiB
    assert found.kv == pytest.approx(262144 * 20480 * 262 / 1024 / 1024**3)
    assert found.need == pytest.approx(21.96 + 3.0 + found.kv)
    tp2 = estimate(kit.profile(vllm={"tensor_parallel_size": 2}), kit.node("h100"))
    assert tp2 is not None and tp2.weights == pytest.approx(34.9 / 2)
    assert estimate(kit.profile(model={"weights_gib": None}), kit.node("h100")) is None


def test_memory_does_not_fit(kit):
    bad = kit.profile(vllm={"gpu_memory_utilization": 0.9})  # 34.9 GiB FP8 on 32 GiB
    finding = kit.only("memory-does-not-fit", kit.place(bad, kit.node("rtx5090")))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.gpu_memory_utilization",
                       value="0.9", why="request_memory", fix="raise gpu_memory_utilization")
    assert "34.9 GiB weights" in finding.message and "0.9 × 32 GiB" in finding.message
    assert not kit.run("memory-does-not-fit", kit.place(bad, kit.node("gb10")))


def test_memory_does_not_fit_llamacpp(kit):
    bad = kit.llamacpp(model={"weights_gib": 33.0})
    finding = kit.only("memory-does-not-fit", kit.place(bad, kit.node("rtx5090")))
    assert finding.field == "model.weights_gib" and "33" in finding.message
    assert not kit.run("memory-does-not-fit", kit.place(kit.llamacpp(), kit.node("rtx5090")))


def test_memory_headroom_tight(kit):
    tight = kit.profile(**{**TQ_5090, "model": {**TQ_5090["model"], "weights_gib": 24.0}})
    finding = kit.only("memory-headroom-tight", kit.place(tight, kit.node("rtx5090")))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.gpu_memory_utilization",
                       value="0.95", why="request_memory", fix="10% headroom")
    assert not kit.run("memory-does-not-fit", kit.place(tight, kit.node("rtx5090")))
    # The NVFP4 model card's production config (21.96 GiB weights) is not tight.
    assert not kit.run("memory-headroom-tight",
                       kit.place(kit.profile(**TQ_5090), kit.node("rtx5090")))


def test_mtp_tight_kv_unified_memory(kit):
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    bad = kit.profile(vllm={"gpu_memory_utilization": 0.35, "speculative": mtp})
    finding = kit.only("mtp-tight-kv-unified-memory", kit.place(bad, kit.node("gb10")))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.gpu_memory_utilization",
                       value="0.35", why="DGX Spark", fix="lower max_num_seqs")
    good = kit.profile(vllm={"speculative": mtp})  # 0.45, as in production
    assert not kit.run("mtp-tight-kv-unified-memory", kit.place(good, kit.node("gb10")))
    no_mtp = kit.profile(vllm={"gpu_memory_utilization": 0.35})
    assert not kit.run("mtp-tight-kv-unified-memory", kit.place(no_mtp, kit.node("gb10")))


def two_on(kit, node, first: float | None, second: float | None):
    a = kit.profile("a", vllm={"gpu_memory_utilization": first})
    b = kit.profile("b", vllm={"gpu_memory_utilization": second})
    return kit.project([a, b], [node], [
        {"node": node.name, "name": "main", "profile": "a", "port": 8000},
        {"node": node.name, "name": "second", "profile": "b", "port": 8001}])


def test_node_utilization_over_one(kit):
    project = two_on(kit, kit.node("h100"), 0.6, 0.5)
    finding = kit.only("node-utilization-over-one", project)
    kit.assert_message(finding, file="Pulumi.test.yaml", field="servefleet:profiles.h100",
                       value="1.10", why="request_memory", fix="below 1.0")
    assert "main 0.6 + second 0.5" in finding.message
    assert not kit.run("node-utilization-over-one", two_on(kit, kit.node("h100"), 0.5, 0.45))


def test_unified_memory_os_headroom(kit):
    # Unset utilization means vLLM's 0.92 from 0.20 on: 10 GiB left of 128.
    alone = kit.place(kit.profile(vllm={"gpu_memory_utilization": None}), kit.node("gb10"))
    finding = kit.only("unified-memory-os-headroom", alone)
    kit.assert_message(finding, file="Pulumi.test.yaml", field="servefleet:profiles.gb10",
                       value="0.92", why="psutil", fix="at least 8 GiB free")
    assert "(default)" in finding.message
    # The reference fleet's two engines at 0.45 each leave 12.8 GiB: fine.
    assert not kit.run("unified-memory-os-headroom", two_on(kit, kit.node("gb10"), 0.45, 0.45))
    assert kit.run("unified-memory-os-headroom", two_on(kit, kit.node("gb10"), 0.5, 0.45))
    # Discrete memory: the OS has its own RAM.
    assert not kit.run("unified-memory-os-headroom", two_on(kit, kit.node("h100"), 0.5, 0.45))


GB10_AS_CUDA_SEES_IT: dict[str, Any] = {"gpus": [
    {"name": "NVIDIA GB10", "memory_gib": 128, "unified_memory": True,
     "compute_capability": "12.1", "cuda_memory_gib": 121.69, "boot_free_gib": 102.2,
     "memory_source": "a public GB10 report"}]}


def test_a_utilization_the_node_cannot_free_at_boot_is_an_error(kit):
    node = kit.node("gb10", **GB10_AS_CUDA_SEES_IT)
    bad = kit.profile(vllm={"gpu_memory_utilization": 0.95})
    finding = kit.only("startup-memory-exceeds-boot-free", kit.place(bad, node))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.gpu_memory_utilization",
                       value="0.95", why="request_memory", fix="set vllm.gpu_memory_utilization")
    assert finding.message == (
        "0.95 asks for 115.6 GiB (0.95 × 121.69 GiB as CUDA reports it) on node gb10 "
        "(deployment gb10/main, nodes/gb10.yaml), but gb10 frees at most 102.2 GiB at boot "
        "(a public GB10 report): vLLM stops with 'Free memory on device … is less than "
        "desired GPU memory utilization'. The largest utilization that boots is 0.83")
    assert finding.fix.startswith("set vllm.gpu_memory_utilization to 0.83 or less")
    assert not kit.run("startup-memory-exceeds-boot-free",
                       kit.place(kit.profile(vllm={"gpu_memory_utilization": 0.83}), node))
    # vLLM's own default (0.92 from 0.20) is named as such
    default = kit.profile(vllm={"gpu_memory_utilization": None})
    assert "0.92 (vLLM's default) asks for" in kit.only(
        "startup-memory-exceeds-boot-free", kit.place(default, node)).message
    # a node without the measured ceiling is not judged
    assert not kit.run("startup-memory-exceeds-boot-free", kit.place(bad, kit.node("gb10")))


def test_memory_is_sized_against_what_cuda_reports(kit):
    node = kit.node("gb10", **GB10_AS_CUDA_SEES_IT)
    found = estimate(kit.profile(), node)
    assert found is not None and found.budget == pytest.approx(0.45 * 121.69)
    assert "0.45 × 121.69 GiB as CUDA reports it; a public GB10 report" in found.budget_text

"""Unified-memory host headroom: the KV planner's footprint against the GB10 host."""

from __future__ import annotations


def test_gb10_near_full_is_refused_with_the_numbers(kit):
    greedy = kit.profile(vllm={"gpu_memory_utilization": 0.98})
    finding = kit.only("unified-memory-host-wedge", kit.place(greedy, kit.node("gb10")))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.gpu_memory_utilization",
                       value="0.98", why="46307", fix="servefleet tune")
    assert "2.6 GiB" in finding.message and "34.9 GiB weights" in finding.message
    assert "KV planner" in finding.message


def test_gb10_near_the_limit_warns_and_sane_share_is_quiet(kit):
    near = kit.profile(vllm={"gpu_memory_utilization": 0.95})  # 6.4 GiB left
    assert kit.run("unified-memory-host-headroom-near", kit.place(near, kit.node("gb10")))
    assert not kit.run("unified-memory-host-wedge", kit.place(near, kit.node("gb10")))
    fine = kit.profile()  # 0.45
    assert not kit.run("unified-memory-host-headroom-near", kit.place(fine, kit.node("gb10")))
    assert not kit.run("unified-memory-host-wedge", kit.place(near, kit.node("rtx5090")))

"""Node-level rules: host keys and ports."""

from __future__ import annotations


def test_ssh_host_key_not_pinned(kit):
    node = kit.node("gb10", ssh={"host_keys": []})
    finding = kit.only("ssh-host-key-not-pinned", kit.place(kit.profile(), node))
    kit.assert_message(finding, file="nodes/gb10.yaml", field="ssh.host_keys", value="[]",
                       why="man-in-the-middle", fix="ssh-keyscan -t ed25519 -- gb10.lan")
    assert "refuse to connect" in finding.message
    assert not kit.run("ssh-host-key-not-pinned", kit.place(kit.profile(), kit.node("gb10")))


def test_port_clash(kit):
    a, b = kit.profile("a"), kit.profile("b", vllm={"speculative": {
        "method": "mtp", "num_speculative_tokens": 1}})
    node = kit.node("gb10")
    project = kit.project([a, b], [node], [
        {"node": "gb10", "name": "main", "profile": "a"},          # the first port, 8000
        {"node": "gb10", "name": "mtp", "profile": "b", "port": 8000}])
    finding = kit.only("port-clash", project)
    kit.assert_message(finding, file="Pulumi.test.yaml",
                       field="servefleet:profiles.gb10.mtp.port", value="8000",
                       why="host networking", fix="8000, 8001")
    assert "main, mtp" in finding.message
    fixed = kit.project([a, b], [node], [
        {"node": "gb10", "name": "main", "profile": "a"},
        {"node": "gb10", "name": "mtp", "profile": "b", "port": 8001}])
    assert not kit.run("port-clash", fixed)


def test_port_not_on_node(kit):
    project = kit.place(kit.profile(), kit.node("gb10"), port=9000)
    finding = kit.only("port-not-on-node", project)
    kit.assert_message(finding, file="Pulumi.test.yaml",
                       field="servefleet:profiles.gb10.main.port", value="9000",
                       why="firewall", fix="add 9000 to ports in nodes/gb10.yaml")
    assert not kit.run("port-not-on-node", kit.place(kit.profile(), kit.node("gb10"), port=8001))


def test_gpu_memory_from_table(kit):
    box = [{"name": "NVIDIA GB10", "memory_gib": 128, "compute_capability": "12.1"}]
    node = kit.node("gb10", gpus=box)
    assert node.gpus[0].cuda_memory_gib == 121.69 and node.gpus[0].unified_memory
    finding = kit.only("gpu-memory-from-table", kit.place(kit.profile(), node))
    kit.assert_message(finding, file="nodes/gb10.yaml", field="gpus[0].cuda_memory_gib",
                       value="memory_gib 128", why="CUDA reports",
                       fix="servefleet probe gb10")
    assert "memory_gib 128 is the NVIDIA GB10's figure on the box; CUDA reports 121.69 GiB" \
        in finding.message and "unified with the host's" in finding.message
    assert not kit.run("gpu-memory-from-table", kit.place(kit.profile(), kit.node("gb10")))

"""What ``sim up`` writes for the rest of servefleet: node files the inventory model accepts,
known_hosts lines, the GPU readout, and the fleet's shape."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from servefleet.core.models.inventory import Node
from servefleet.sim import inventory
from servefleet.sim.layout import SimLayout
from servefleet.sim.spec import HOST_ARCH, fleet_specs

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAikj5sXsqzt0IpwS7aI9wP6zXEjUyZJNEIqBIUVNi3V"


def test_reference_fleet_shape() -> None:
    specs = fleet_specs()
    assert [(s.name, s.address, s.arch, s.gpu.name) for s in specs] == [
        ("sim-spark-1", "10.77.1.2", HOST_ARCH, "NVIDIA GB10"),
        ("sim-spark-2", "10.77.2.2", HOST_ARCH, "NVIDIA GB10"),
        ("sim-5090", "10.77.3.2", HOST_ARCH, "NVIDIA GeForce RTX 5090"),
    ]
    assert os.uname().machine == HOST_ARCH
    many = fleet_specs(60, sshd_only=True)
    assert many[59].name == "sim-node-60" and many[59].address == "10.77.60.2"
    assert not any(s.docker for s in many)
    assert len({s.host_veth for s in many}) == 60
    assert all(len(s.host_veth) <= 15 for s in many)
    with pytest.raises(ValueError):
        fleet_specs(0)


def test_written_files_load_as_inventory(tmp_path: Path) -> None:
    layout = SimLayout(Path("/var/lib/servefleet-sim"))
    specs = fleet_specs()
    key = layout.client_key
    written = inventory.write(tmp_path, [(s, layout.node(s.name), HOST_KEY) for s in specs], key)
    assert sorted(p.name for p in written) == sorted(
        [f"{s.name}.yaml" for s in specs] + [f"{s.name}.override.yaml.j2" for s in specs]
        + ["known_hosts"])
    folder = tmp_path / "nodes" / "sim"
    node = Node.model_validate(yaml.safe_load((folder / "sim-spark-1.yaml").read_text()))
    assert node.simulated and node.sim is not None
    assert node.address == "10.77.1.2"
    assert node.ssh.host_keys == [HOST_KEY]
    assert node.ssh.identity_file == str(key)
    assert node.primary_gpu.unified_memory and node.primary_gpu.compute_capability == "12.1"
    assert node.driver_version == "580.142" and node.cuda_version == "13.0"
    # Project-relative: the inventory refuses override paths outside the project.
    assert node.compose_overrides == ["nodes/sim/sim-spark-1.override.yaml.j2"]
    assert node.sim.control_dir == "/var/lib/servefleet-sim/nodes/sim-spark-1/control"
    rtx = Node.model_validate(yaml.safe_load((tmp_path / "nodes/sim/sim-5090.yaml").read_text()))
    assert rtx.arch == "x86_64" and rtx.primary_gpu.memory_gib == 32
    known = (tmp_path / "nodes/sim/known_hosts").read_text().splitlines()
    assert f"10.77.3.2 {HOST_KEY}" in known and f"[10.77.3.2]:22 {HOST_KEY}" in known


def test_rewrite_keeps_unchanged_files(tmp_path: Path) -> None:
    layout = SimLayout(Path("/var/lib/servefleet-sim"))
    entries = [(s, layout.node(s.name), HOST_KEY) for s in fleet_specs(1)]
    first = inventory.write(tmp_path, entries, layout.client_key)
    stamps = {p: p.stat().st_mtime_ns for p in first}
    inventory.write(tmp_path, entries, layout.client_key)
    assert {p: p.stat().st_mtime_ns for p in first} == stamps
    inventory.remove([str(p) for p in first])
    assert not (tmp_path / "nodes" / "sim").exists()


def test_gpu_readout_follows_the_inventory() -> None:
    spark, _, rtx = fleet_specs()
    readout = inventory.gpu_readout(spark)
    assert readout["driver_version"] == "580.142" and readout["cuda_version"] == "13.0"
    gpu = readout["gpus"][0]
    assert gpu["name"] == "NVIDIA GB10" and gpu["compute_cap"] == "12.1"
    assert gpu["memory_total_mib"] == 128 * 1024
    assert gpu["uuid"].startswith("GPU-") and len(gpu["uuid"]) == 40
    assert gpu["uuid"] != inventory.gpu_readout(rtx)["gpus"][0]["uuid"]
    assert inventory.gpu_readout(spark) == readout


def test_inventory_of_another_project_folder_stays_while_its_nodes_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sim up`` from a second checkout writes the inventory there too, and leaves the
    first checkout's files of running nodes alone (a test session there may be using them);
    a node that no longer runs loses its files everywhere."""
    from servefleet.sim import fleet, sshd, state

    [spec] = fleet_specs(1)
    old = tmp_path / "first" / "nodes" / "sim"
    old.mkdir(parents=True)
    names = ["sim-spark-1.yaml", "sim-spark-1.override.yaml.j2", "known_hosts",
             "sim-node-9.yaml"]
    for name in names:
        (old / name).write_text("x\n")
    current = state.FleetState(
        nodes={spec.name: state.NodeState(spec=spec, netns=spec.netns,
                                          host_veth=spec.host_veth)},
        inventory_files=[str(old / name) for name in names])
    monkeypatch.setattr(sshd, "public_key_line", lambda _path: "ssh-ed25519 AAAA test")
    layout = SimLayout(tmp_path / "state")
    after = fleet._write_inventory(tmp_path / "second", layout, current, {})
    assert sorted(p.name for p in old.iterdir()) == [
        "known_hosts", "sim-spark-1.override.yaml.j2", "sim-spark-1.yaml"]
    second = tmp_path / "second" / "nodes" / "sim"
    assert (second / "sim-spark-1.yaml").is_file() and (second / "known_hosts").is_file()
    assert str(old / "sim-spark-1.yaml") in after.inventory_files
    assert str(old / "sim-node-9.yaml") not in after.inventory_files

"""``sim up`` repairs and ``sim down`` leaves nothing behind, on a fleet of its own (its own
state folder and addresses), next to the session's fleet, which must not notice."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from servefleet.core.errors import SimError
from servefleet.sim import fleet, netns, procs, state
from servefleet.sim.fleet import FleetConfig
from servefleet.sim.spec import RTX_5090, NodeSpec
from servefleet.sim.testbed import FleetHandle
from tests.conftest import component_unavailable

pytestmark = [pytest.mark.fleet, pytest.mark.slow]



def free_indexes(count: int) -> list[int]:
    """Address slots no namespace or interface on this machine uses now (benchmarks and
    other fleets may hold some)."""
    free = []
    for index in range(249, 100, -1):
        probe = NodeSpec(name=f"simdown-{index}", index=index, arch="x86_64", gpu=RTX_5090,
                         host_memory_gib=64)
        if not netns.link_exists(probe.host_veth):
            free.append(index)
        if len(free) == count:
            return free
    component_unavailable("no free address slot for a second fleet")


@pytest.fixture
def specs() -> list[NodeSpec]:
    first, second = free_indexes(2)
    return [
        NodeSpec(name="simdown-a", index=first, arch="x86_64", gpu=RTX_5090,
                 host_memory_gib=64),
        NodeSpec(name="simdown-b", index=second, arch="x86_64", gpu=RTX_5090,
                 host_memory_gib=64, docker=False),
    ]


def recorded_processes(current: state.FleetState) -> list[procs.ProcessRecord]:
    return [r for n in current.nodes.values() for r in (n.sshd, n.containerd, n.dockerd)
            if r is not None]


def mounts_below(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as mountinfo:
        return [line.split()[4] for line in mountinfo
                if line.split()[4].startswith(str(path))]


def test_up_repairs_and_down_leaves_nothing(sim_fleet: FleetHandle, sim_standin_dir: Path,
                                            tmp_path: Path, specs: list[NodeSpec]) -> None:
    config = FleetConfig(state_dir=tmp_path / "state", standin_dir=sim_standin_dir)
    project = tmp_path / "project"
    handle = FleetHandle(config=config, project_dir=project,
                         nodes={s.name: s for s in specs}, standin_is_real=False,
                         started_here=True)
    session = None
    try:
        first = fleet.up(specs, project_dir=project, config=config)
        # A node whose sshd died is restarted by the next up; the other one is left alone.
        sshd_b = first.nodes["simdown-b"].sshd
        assert sshd_b is not None
        procs.stop(sshd_b)
        second = fleet.up(specs, project_dir=project, config=config)
        assert second.nodes["simdown-a"] == first.nodes["simdown-a"]
        assert second.nodes["simdown-b"].sshd != sshd_b
        assert handle.ssh("simdown-b", "hostname").stdout == "simdown-b\n"

        # Something running on the node: a container and an open SSH session.
        handle.ssh("simdown-a", "docker run -d --network host --entrypoint sleep "
                                "servefleet-sim/vllm-standin:latest 600")
        session = subprocess.Popen(handle.ssh_argv("simdown-a", "sleep 600"),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        recorded = recorded_processes(second)
        assert len(recorded) == 4
        inode = second.nodes["simdown-a"].netns_inode
        assert inode is not None
        assert len(procs.pids_in_netns(inode)) > 3

        stopped = fleet.down(config=config)
        assert sorted(stopped) == ["simdown-a", "simdown-b"]
        assert not [r.pid for r in recorded if procs.is_alive(r)]
        assert procs.pids_in_netns(inode) == []
        pgrep = subprocess.run(["pgrep", "-af", str(config.state_dir)], capture_output=True,
                               text=True, check=False)
        assert pgrep.stdout == "", pgrep.stdout
        assert session.wait(timeout=10) == 255
        for spec in specs:
            assert not netns.exists(spec.netns)
            assert not netns.link_exists(spec.host_veth)
        assert mounts_below(config.state_dir) == []
        assert not (project / "nodes" / "sim").exists()
        assert not config.layout.state_file.exists()

        # Twice is fine; and the session's fleet did not notice any of it.
        assert fleet.down(config=config) == []
        session_state = state.load(sim_fleet.config.layout)
        assert all(fleet.node_running(n, sim_fleet.config.layout)
                   for n in session_state.nodes.values())
    finally:
        if session is not None and session.poll() is None:
            session.kill()
        fleet.down(config=config)


def test_up_refuses_a_namespace_it_did_not_start(sim_requirements: None, tmp_path: Path,
                                                 sim_standin_dir: Path) -> None:
    spec = NodeSpec(name="simdown-foreign", index=free_indexes(1)[0], arch="x86_64",
                    gpu=RTX_5090, host_memory_gib=64, docker=False)
    config = FleetConfig(state_dir=tmp_path / "state", standin_dir=sim_standin_dir)
    subprocess.run(["ip", "netns", "add", spec.netns], check=True)
    try:
        with pytest.raises(SimError, match="did not start it"):
            fleet.up([spec], project_dir=tmp_path, config=config)
        fleet.down(config=config)
        assert netns.exists(spec.netns), "down must not remove what up did not create"
    finally:
        subprocess.run(["ip", "netns", "del", spec.netns], check=False)

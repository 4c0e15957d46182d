"""``servefleet doctor`` on the simulated fleet, each failure produced for real on sim-5090:
its dockerd stopped, its models folder on a small file system filled to the last block,
a process listening on a port the stack places there, a host key that is not the node's,
and an SSH port nobody listens on. Every fault is undone before the test ends.

The project is a copy of the fleet's inventory with a stack of its own (``Pulumi.doctor.
yaml``: deployment ``doctor`` on port 18491 of sim-5090), whose sim-5090 names a models folder
of this module's own: the fleet's shared one may hold what another test staged, which a small
disk mounted over it would hide. The disk thresholds are lowered to 1 GiB so that the
machine's own disk never decides a line; the full disk is a real one (a 1 MiB tmpfs over
that models folder, filled by :func:`node_faults.fill_disk`).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest
import yaml
from click.testing import Result

from servefleet.adapters.runtime.ssh.transport import fingerprint
from servefleet.sim import node_faults
from servefleet.sim.inventory import inventory_dir
from servefleet.sim.programs import find_program
from servefleet.sim.testbed import FleetHandle

pytestmark = [pytest.mark.fleet]

NODE = "sim-5090"
PORT = 18491
STACK = "doctor"
THRESHOLDS = ("--min-free-images-gib", "1", "--min-free-weights-gib", "1")


@pytest.fixture(scope="module")
def models_dir(sim_fleet: FleetHandle) -> Iterator[Path]:
    """An empty models folder on sim-5090 for this module alone (removed after it; one an
    interrupted run left behind, a small disk still mounted on it included, goes first)."""
    folder = sim_fleet.node_files(NODE).root / "doctor-models"

    def remove() -> None:
        node_faults.unmount_small_disk(folder)
        shutil.rmtree(folder, ignore_errors=True)

    remove()
    folder.mkdir()
    yield folder
    remove()


@pytest.fixture(scope="module")
def project(sim_fleet: FleetHandle, models_dir: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fleet's node files, sim-5090's models folder swapped for :func:`models_dir`, and a
    stack placing deployment ``doctor`` on port 18491."""
    root = tmp_path_factory.mktemp("doctor-project")
    (root / "nodes" / "sim").mkdir(parents=True)
    for path in inventory_dir(sim_fleet.project_dir).glob("*.yaml"):
        shutil.copy(path, root / "nodes" / "sim" / path.name)
    node_file = root / "nodes" / "sim" / f"{NODE}.yaml"
    node = yaml.safe_load(node_file.read_text())
    node["models_dir"] = str(models_dir)
    node_file.write_text(yaml.safe_dump(node, sort_keys=False))
    (root / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump({"config": {
        "servefleet:profiles": {NODE: {"doctor": {"profile": "qwen36-q4-llamacpp",
                                                  "port": PORT}}}}}))
    return root


@pytest.fixture
def doctor(project: Path, run_cli: Callable[..., Result]) -> Callable[..., Result]:
    def run(*args: str, root: Path = project) -> Result:
        return run_cli("doctor", NODE, *THRESHOLDS, *args, project=root, stack=STACK)

    return run


def lines(result: Result) -> list[str]:
    return result.output.splitlines()


def node_doc(project: Path) -> dict:
    return yaml.safe_load((project / "nodes" / "sim" / f"{NODE}.yaml").read_text())


def test_a_ready_node_passes_every_check(doctor: Callable[..., Result],
                                         sim_fleet: FleetHandle) -> None:
    result = doctor()
    assert result.exit_code == 0, result.output
    files = sim_fleet.node_files(NODE)
    address = sim_fleet.nodes[NODE].address
    checks = lines(result)[1:-1]
    assert all(line.startswith("  pass  ") for line in checks), result.output
    assert f"  pass  ssh: root@{address}:22, host key matches the pinned key" in checks
    assert ("  pass  nvidia runtime: sim node, no GPU: the stand-in nvidia-smi in a one-shot "
            "container without --gpus sees 1 × NVIDIA GeForce RTX 5090 (driver 580.142)"
            ) in checks
    assert "  pass  docker access: root (uid 0)" in checks
    assert any(line.startswith("  pass  python3: 3.") for line in checks)
    assert f"  pass  base_dir: {files.base_dir} is writable" in checks
    assert f"  pass  port {PORT}: free (for doctor)" in checks
    assert any(line.startswith(f"  pass  fast link: eth0 UP, {address}/") for line in checks)
    assert [line.split(":")[0] for line in checks] == [
        "  pass  ssh", "  pass  docker", "  pass  compose", "  pass  nvidia runtime",
        "  pass  docker access", "  pass  python3", "  pass  disk for images",
        "  pass  disk for weights (HF cache)", "  pass  disk for weights (models dir)",
        "  pass  base_dir", f"  pass  port {PORT}", "  pass  fast link", "  pass  clock"]
    assert lines(result)[-1] == "1 of 1 node(s) ready; 0 failure(s), 0 warning(s)"


def test_a_stopped_dockerd_fails_docker_and_the_gpu_runtime(
        doctor: Callable[..., Result], sim_fleet: FleetHandle) -> None:
    layout = sim_fleet.config.layout
    node_faults.stop_dockerd(layout, NODE)
    try:
        result = doctor()
    finally:
        node_faults.start_dockerd(layout, NODE)
    sock = sim_fleet.node_files(NODE).docker_sock
    assert result.exit_code == 1, result.output
    assert (f"  fail  docker: daemon not reachable: Cannot connect to the Docker daemon at "
            f"unix://{sock}. Is the docker daemon running?; fix: start it: sudo systemctl "
            "enable --now docker (its log: journalctl -u docker)") in lines(result)
    assert ("  fail  nvidia runtime: no container can run: the Docker daemon is not usable; "
            "fix: fix the docker line first") in lines(result)
    assert ("  warn  disk for images: not checked: the Docker daemon did not name its root "
            "dir; fix: fix the docker line first") in lines(result)
    # Restored: the next doctor finds the daemon again.
    assert doctor().exit_code == 0


def test_a_full_models_disk_fails_the_weights_check(
        doctor: Callable[..., Result], models_dir: Path) -> None:
    assert not any(models_dir.iterdir()), sorted(p.name for p in models_dir.iterdir())
    node_faults.mount_small_disk(models_dir, inodes=64, size_mib=1)
    try:
        node_faults.fill_disk(models_dir)
        result = doctor()
    finally:
        node_faults.free_disk(models_dir)
        node_faults.unmount_small_disk(models_dir)
    assert result.exit_code == 1, result.output
    assert (f"  fail  disk for weights (models dir): 0 MiB free under {models_dir}, below "
            "1 GiB; fix: free space: remove models no deployment uses (`hf cache delete` for "
            "the HF cache); or lower --min-free-weights-gib if this node's engines need less"
            ) in lines(result)
    assert [line for line in lines(result) if line.startswith("  fail")] == [
        line for line in lines(result) if "(models dir)" in line]


@pytest.fixture
def listener(sim_fleet: FleetHandle) -> Iterator[None]:
    """A process listening on :data:`PORT` inside the node's network namespace."""
    program = ("import socket, time\n"
               "s = socket.socket()\n"
               f"s.bind(('0.0.0.0', {PORT}))\n"
               "s.listen()\n"
               "print('listening', flush=True)\n"
               "time.sleep(300)\n")
    process = subprocess.Popen(
        [find_program("nsenter"), f"--net=/var/run/netns/{sim_fleet.nodes[NODE].netns}", "--",
         sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "listening"
        yield
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_taken_port_fails_with_what_to_do(doctor: Callable[..., Result],
                                            listener: None) -> None:
    result = doctor()
    assert result.exit_code == 1, result.output
    assert (f"  fail  port {PORT}: in use by another process (the stack places doctor here); "
            f"fix: see what listens: sudo ss -ltnp 'sport = :{PORT}' on the node; stop it, or "
            f"give doctor another port (servefleet:profiles.{NODE}.<deployment>.port in "
            f"Pulumi.{STACK}.yaml)") in lines(result)


def _key_fingerprint(line: str) -> str:
    return fingerprint(paramiko.Ed25519Key(data=base64.b64decode(line.split()[1])))


def failing_doctor_with(doctor: Callable[..., Result], project: Path, tmp_path: Path,
                        document: dict) -> Result:
    """``doctor`` on a copy of the project whose node file is ``document``; it fails."""
    other = tmp_path / "other"
    shutil.copytree(project, other)
    (other / "nodes" / "sim" / f"{NODE}.yaml").write_text(yaml.safe_dump(document))
    result = doctor(root=other)
    assert result.exit_code == 1, result.output
    return result


def test_a_refused_host_key_is_one_failed_line(
        doctor: Callable[..., Result], project: Path, tmp_path: Path,
        sim_fleet: FleetHandle) -> None:
    document = node_doc(project)
    real = document["ssh"]["host_keys"][0]
    wrong = yaml.safe_load((project / "nodes" / "sim" / "sim-spark-1.yaml").read_text()
                           )["ssh"]["host_keys"][0]
    document["ssh"]["host_keys"] = [wrong]
    result = failing_doctor_with(doctor, project, tmp_path, document)
    address = sim_fleet.nodes[NODE].address
    assert lines(result)[1:] == [
        f"  fail  ssh: host key mismatch at {address}: the node presented ssh-ed25519 "
        f"{_key_fingerprint(real)} but the inventory pins ssh-ed25519 "
        f"{_key_fingerprint(wrong)}; refusing to connect (if the node was reinstalled, "
        "re-pin its key after checking it); fix: compare `servefleet keyscan sim-5090` with "
        "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the node's console; only if "
        "they agree (a reinstalled node), pin the new key under ssh.host_keys in "
        "nodes/sim/sim-5090.yaml",
        "0 of 1 node(s) ready; 1 failure(s), 0 warning(s)"]
    assert "Traceback" not in result.output


def test_an_unreachable_node_is_one_failed_line(
        doctor: Callable[..., Result], project: Path, tmp_path: Path,
        sim_fleet: FleetHandle) -> None:
    document = node_doc(project)
    document["ssh"]["port"] = 1  # nothing listens there
    result = failing_doctor_with(doctor, project, tmp_path, document)
    address = sim_fleet.nodes[NODE].address
    assert lines(result)[1:] == [
        f"  fail  ssh: cannot reach {address}:1 over SSH after 1 attempt ([Errno 111] "
        f"Connection refused); fix: check that the node is up and sshd listens on "
        f"root@{address}:1 (`ssh -p 1 root@{address} true`), and address / ssh.port in "
        "nodes/sim/sim-5090.yaml",
        "0 of 1 node(s) ready; 1 failure(s), 0 warning(s)"]

"""The doctor's parser and verdicts, on outputs recorded on the simulated fleet's nodes
(``data/sim-*.txt``, the real script's output: healthy, a stopped dockerd, a full models
disk, a taken port, ``--gpus all`` without the NVIDIA runtime, an image that cannot be
pulled) and on variants of them edited to show what the fleet cannot (a user without
docker access, a fast link down, a skewed clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servefleet.core.doctor import (
    DoctorFacts,
    DoctorSettings,
    GpuContainer,
    RoundTrip,
    clock_skew,
    failed,
    judge,
    line,
    parse_doctor,
    placed_ports,
    ssh_failed,
)
from servefleet.core.models import Node
from servefleet.core.models.stack import StackConfig

DATA = Path(__file__).with_name("data")
SIM_GPU = GpuContainer(
    options=("--pull", "never", "--network", "none", "--entrypoint", "python3"),
    image="servefleet-sim/vllm-standin:latest", command=("-I", "-S", "nvidia_smi.py"),
    what="sim node, no GPU: the stand-in nvidia-smi in a one-shot container without --gpus")
REAL_ON_SIM = GpuContainer(image="servefleet-sim/vllm-standin:latest",
                           options=("--pull", "never", "--gpus", "all"))
SETTINGS = DoctorSettings(min_free_images_gib=1, min_free_weights_gib=1)


def sim_node(name: str = "sim-5090", gpu: str = "NVIDIA GeForce RTX 5090", count: int = 1,
             **changes: Any) -> Node:
    """A simulated node as ``sim up`` writes it (the paths the recordings name)."""
    root = f"/var/lib/servefleet-sim/nodes/{name}"
    address = {"sim-spark-1": "10.77.1.2", "sim-spark-2": "10.77.2.2"}.get(name, "10.77.3.2")
    data: dict[str, Any] = {
        "name": name, "simulated": True, "address": address,
        "ssh": {"user": "root", "identity_file": "/var/lib/servefleet-sim/client/id_ed25519",
                "host_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHuopP4IE8w5XAUKP7VoRwRcweK"
                              "hejxRsZVLDPF1nUyU"]},
        "arch": "x86_64",
        "gpus": [{"name": gpu, "count": count, "memory_gib": 32, "compute_capability": "12.0"}],
        "base_dir": f"{root}/srv", "hf_cache": f"{root}/hf-cache",
        "models_dir": f"{root}/models", "ports": [8000, 8001, 8002],
        "fast_link": {"interface": "eth0", "address": address},
        "sim": {"control_dir": f"{root}/control"},
    }
    data.update(changes)
    return Node.model_validate(data)


def recorded(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


def trip_around(facts: DoctorFacts, shift: float = 0.0) -> RoundTrip:
    """The controller's clock 50 ms either side of the script, ``shift`` seconds behind."""
    assert facts.node_time_start is not None
    end = facts.node_time_end or facts.node_time_start + 1
    return RoundTrip(sent_at=facts.node_time_start - 0.05 - shift,
                     received_at=end + 0.05 - shift)


def report(text: str, node: Node | None = None, *, gpu: GpuContainer = SIM_GPU,
           placements: dict[int, tuple[str, ...]] | None = None, shift: float = 0.0,
           settings: DoctorSettings = SETTINGS) -> list[str]:
    node = node or sim_node()
    facts = parse_doctor(text)
    checks = judge(node, facts, trip=trip_around(facts, shift), gpu=gpu,
                   placements={8000: ("main",)} if placements is None else placements,
                   settings=settings, inventory_file=f"nodes/sim/{node.name}.yaml",
                   stack_file="Pulumi.sim.yaml")
    return [line(check) for check in checks]


def only(lines: list[str], check: str) -> str:
    [found] = [entry for entry in lines if entry.split("  ", 1)[1].startswith(check + ":")]
    return found


# -- the parser ------------------------------------------------------------------------------
def test_a_healthy_sim_node_parses_to_every_fact() -> None:
    facts = parse_doctor(recorded("sim-healthy"))
    root = "/var/lib/servefleet-sim/nodes/sim-5090"
    assert facts.complete
    assert facts.preflight.docker_version == "20.10.24+dfsg1"
    assert facts.preflight.compose == ("docker", "compose")
    assert (facts.user, facts.uid, facts.groups) == ("root", 0, ("root",))
    assert facts.docker_root == f"{root}/docker"
    assert "runc" in facts.runtimes and "nvidia" not in facts.runtimes
    assert (facts.gpu_exit, facts.gpu_output) == (0, ("NVIDIA GeForce RTX 5090, 580.142",))
    assert [(d.kind, d.path, d.checked, d.free_bytes) for d in facts.disks] == [
        ("images", f"{root}/docker", f"{root}/docker", 56312780 * 1024),
        ("hf_cache", f"{root}/hf-cache", f"{root}/hf-cache", 56312780 * 1024),
        ("models", f"{root}/models", f"{root}/models", 56312780 * 1024)]
    assert facts.base_writable == "yes"
    assert facts.ports == {8000: False, 8002: False}
    assert facts.running == {"bench": 18080}
    assert facts.fast_link_state == "UP"
    assert facts.fast_link_addresses == ("10.77.3.2/30", "fe80::ecbc:7dff:fea6:ff54/64")
    assert facts.node_time_start == pytest.approx(1795681260.672000825)
    assert facts.node_time_end == pytest.approx(1795681262.014080891)


def test_output_cut_short_is_not_complete_and_fails() -> None:
    text = recorded("sim-healthy")
    cut = text[:text.index("port=8000")]
    facts = parse_doctor(cut)
    assert not facts.complete and facts.node_time_end is None
    lines = report(cut)
    assert lines[-1] == ("fail  doctor: the node's answer was cut short; fix: run again with "
                         "--verbose; check the node's shell as root")


def test_a_date_without_nanoseconds_still_gives_the_time() -> None:
    text = recorded("sim-healthy").replace("date_start=1795681260.672000825",
                                           "date_start=1795681260.%N")
    assert parse_doctor(text).node_time_start == 1795681260.0


# -- verdicts on the recordings --------------------------------------------------------------
def test_a_healthy_sim_node_passes_every_check() -> None:
    root = "/var/lib/servefleet-sim/nodes/sim-5090"
    assert report(recorded("sim-healthy")) == [
        "pass  ssh: root@10.77.3.2:22, host key matches the pinned key",
        "pass  docker: daemon 20.10.24+dfsg1",
        "pass  compose: docker compose 5.6.1",
        "pass  nvidia runtime: sim node, no GPU: the stand-in nvidia-smi in a one-shot "
        "container without --gpus sees 1 × NVIDIA GeForce RTX 5090 (driver 580.142)",
        "pass  docker access: root (uid 0)",
        "pass  python3: 3.11.2",
        f"pass  disk for images: 53.7 GiB free under {root}/docker (need 1 GiB)",
        f"pass  disk for weights (HF cache): 53.7 GiB free under {root}/hf-cache (need 1 GiB)",
        f"pass  disk for weights (models dir): 53.7 GiB free under {root}/models "
        "(need 1 GiB)",
        f"pass  base_dir: {root}/srv is writable",
        "pass  port 8000: free (for main)",
        "pass  fast link: eth0 UP, 10.77.3.2/30",
        "pass  clock: node is +0.000 s from this machine (±0.050 s)",
    ]


def test_a_stopped_dockerd() -> None:
    lines = report(recorded("sim-dockerd-stopped"))
    sock = next(entry for entry in lines if entry.startswith("fail  docker:"))
    assert sock.startswith("fail  docker: daemon not reachable: Cannot connect to the Docker "
                           "daemon at unix:///run/sfsim/")
    assert sock.endswith("/sim-5090/docker.sock. Is the docker daemon running?; fix: start it: "
                         "sudo systemctl enable --now docker (its log: journalctl -u docker)")
    assert only(lines, "nvidia runtime") == (
        "fail  nvidia runtime: no container can run: the Docker daemon is not usable; fix: "
        "fix the docker line first")
    assert only(lines, "disk for images") == (
        "warn  disk for images: not checked: the Docker daemon did not name its root dir; "
        "fix: fix the docker line first")
    # root needs no docker group; the weights folders are still read.
    assert only(lines, "docker access") == "pass  docker access: root (uid 0)"
    assert only(lines, "disk for weights (HF cache)").startswith("pass  ")


def test_a_full_models_disk() -> None:
    lines = report(recorded("sim-models-disk-full"))
    assert only(lines, "disk for weights (models dir)") == (
        "fail  disk for weights (models dir): 0 MiB free under "
        "/var/lib/servefleet-sim/nodes/sim-5090/models, below 1 GiB; fix: free space: remove "
        "models no deployment uses (`hf cache delete` for the HF cache); or lower "
        "--min-free-weights-gib if this node's engines need less")
    assert [entry for entry in lines if entry.startswith("fail")] == [
        only(lines, "disk for weights (models dir)")]


def test_a_taken_port() -> None:
    lines = report(recorded("sim-port-taken"), placements={18491: ("doctor",)})
    assert only(lines, "port 18491") == (
        "fail  port 18491: in use by another process (the stack places doctor here); fix: see "
        "what listens: sudo ss -ltnp 'sport = :18491' on the node; stop it, or give doctor "
        "another port (servefleet:profiles.sim-5090.<deployment>.port in Pulumi.sim.yaml)")


def test_a_port_held_by_our_own_deployment_passes() -> None:
    text = recorded("sim-healthy").replace("port=8000 no", "port=8000 yes") \
        .replace("running=bench 18080", "running=main 8000")
    assert only(report(text), "port 8000") == "pass  port 8000: held by our own deployment main"


def test_a_port_held_by_another_servefleet_deployment_fails() -> None:
    text = recorded("sim-healthy").replace("port=8000 no", "port=8000 yes") \
        .replace("running=bench 18080", "running=bench 8000")
    assert only(report(text), "port 8000") == (
        "fail  port 8000: held by servefleet deployment bench, not by main; fix: remove bench "
        "from the node, or give main another port (servefleet:profiles.sim-5090."
        "<deployment>.port in Pulumi.sim.yaml)")


def test_gpus_all_without_the_nvidia_runtime_names_the_toolkit() -> None:
    node = sim_node("sim-spark-1", "NVIDIA GB10")
    lines = report(recorded("sim-gpus-all-without-nvidia-runtime"), node, gpu=REAL_ON_SIM)
    assert only(lines, "nvidia runtime") == (
        "fail  nvidia runtime: a one-shot container failed (exit 125): docker: Error response "
        "from daemon: could not select device driver \"\" with capabilities: [[gpu]]; fix: "
        "install the NVIDIA Container Toolkit and register it with Docker: sudo nvidia-ctk "
        "runtime configure --runtime=docker && sudo systemctl restart docker")


def test_an_image_the_node_cannot_pull_says_how_to_get_one() -> None:
    node = sim_node("sim-spark-2", "NVIDIA GB10")
    lines = report(recorded("sim-default-image-not-pullable"), node, gpu=GpuContainer())
    assert only(lines, "nvidia runtime") == (
        "fail  nvidia runtime: a one-shot container failed (exit 125): docker: Error response "
        "from daemon: Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup "
        "registry-1.docker.io on 10.255.255.53:53: dial udp 10.255.255.53:53: connect: "
        "network is unreachable; fix: the node could not get ubuntu:24.04: `docker pull "
        "ubuntu:24.04` there, or pass --gpu-image with an image it has")


def test_fewer_gpus_than_the_inventory_warns() -> None:
    lines = report(recorded("sim-healthy"), sim_node(count=2))
    assert only(lines, "nvidia runtime") == (
        "warn  nvidia runtime: sim node, no GPU: the stand-in nvidia-smi in a one-shot "
        "container without --gpus sees 1 × NVIDIA GeForce RTX 5090 (driver 580.142); the "
        "inventory says 2 × NVIDIA GeForce RTX 5090; fix: `servefleet probe sim-5090` "
        "compares in detail; correct gpus in the inventory, or the container's device "
        "visibility")


# -- variants the fleet cannot show ----------------------------------------------------------
DENIED = ("permission denied while trying to connect to the Docker daemon socket at "
          "unix:///var/run/docker.sock: Get \"http://%2Fvar%2Frun%2Fdocker.sock/v1.24/version\""
          ": dial unix /var/run/docker.sock: connect: permission denied")


def test_a_user_without_docker_access() -> None:
    text = recorded("sim-healthy").replace("user=root", "user=alice") \
        .replace("uid=0", "uid=1000").replace("groups=root", "groups=alice sudo") \
        .replace("docker_version=20.10.24+dfsg1", f"docker_error={DENIED}")
    lines = report(text)
    assert only(lines, "docker") == (
        f"fail  docker: daemon refused alice: {DENIED}; fix: sudo usermod -aG docker alice on "
        "the node, then reconnect (or set ssh.user: root)")
    assert only(lines, "docker access") == (
        "fail  docker access: alice may not use the Docker socket (groups: alice sudo); fix: "
        "sudo usermod -aG docker alice on the node, then reconnect (or set ssh.user: root)")


def test_a_user_in_the_docker_group_passes() -> None:
    text = recorded("sim-healthy").replace("user=root", "user=alice") \
        .replace("uid=0", "uid=1000").replace("groups=root", "groups=alice docker")
    assert only(report(text), "docker access") == (
        "pass  docker access: alice is in the docker group")


@pytest.mark.parametrize(("line", "detail"), [
    # `python3 -c ...` prints nothing where there is no python3: the line stays empty.
    ("python3=", "no python3 on the PATH (servefleet reads the node with it)"),
    ("python3=3.6.9", "python3 3.6.9 is older than 3.7"),
])
def test_a_node_without_a_usable_python3_fails(line: str, detail: str) -> None:
    text = recorded("sim-healthy").replace("python3=3.11.2", line)
    assert only(report(text), "python3") == (
        f"fail  python3: {detail}; fix: install it: sudo apt-get install -y python3 (DGX OS "
        "and Ubuntu ship it; servefleet sends its node reader and GPU probe to it on stdin, "
        "nothing else)")


def test_no_docker_command() -> None:
    text = recorded("sim-healthy").replace("docker_version=20.10.24+dfsg1",
                                           "docker_missing=yes\ndocker_error=sh: 1: docker: "
                                           "not found")
    assert only(report(text), "docker") == (
        "fail  docker: no docker command on the PATH; fix: install Docker Engine "
        "(https://docs.docker.com/engine/install/), then: sudo systemctl enable --now docker")


def test_compose_missing_and_compose_v1() -> None:
    text = recorded("sim-healthy")
    missing = text.replace("compose=docker compose\ncompose_version=5.6.1\n", "")
    assert only(report(missing), "compose") == (
        "fail  compose: neither `docker compose` nor `docker-compose` works; fix: install the "
        "Compose plugin: sudo apt-get install docker-compose-plugin (Docker's apt repository)")
    v1 = text.replace("compose=docker compose\ncompose_version=5.6.1",
                      "compose=docker-compose\ncompose_version=1.29.2")
    assert only(report(v1), "compose").startswith("warn  compose: docker-compose 1.29.2 (v1); ")


def test_the_fast_link_down_missing_or_without_its_address() -> None:
    text = recorded("sim-healthy")
    down = text.replace("fast_link_state=UP", "fast_link_state=DOWN")
    assert only(report(down), "fast link") == (
        "fail  fast link: eth0 is DOWN; fix: bring it up: sudo ip link set eth0 up; check the "
        "cable or transceiver (ethtool eth0)")
    missing = text.replace("fast_link_state=UP", "fast_link_state=missing")
    assert only(report(missing), "fast link") == (
        "fail  fast link: no interface eth0; fix: list the node's interfaces (ip -br link) and "
        "correct fast_link.interface in nodes/sim/sim-5090.yaml")
    other = text.replace("fast_link_addr=10.77.3.2/30", "fast_link_addr=10.77.9.2/30")
    assert only(report(other), "fast link") == (
        "fail  fast link: eth0 is UP with 10.77.9.2/30, fe80::ecbc:7dff:fea6:ff54/64, not "
        "10.77.3.2; fix: assign it (sudo ip addr add 10.77.3.2/PREFIX dev eth0, made permanent "
        "in netplan or NetworkManager), or correct fast_link.address in "
        "nodes/sim/sim-5090.yaml")
    assert not any(entry.startswith("pass  fast link") or "fast link" in entry
                   for entry in report(text, sim_node(fast_link=None)))


def test_clock_skew_warns_then_fails() -> None:
    text = recorded("sim-healthy")
    assert only(report(text, shift=5), "clock") == (
        "warn  clock: node is +5.000 s from this machine (±0.050 s), over 1 s; fix: enable "
        "time sync on the node (sudo timedatectl set-ntp true; chrony or systemd-timesyncd), "
        "and check this machine's clock")
    assert only(report(text, shift=-120), "clock").startswith(
        "fail  clock: node is -120.000 s from this machine (±0.050 s), over 30 s; fix: ")


def test_clock_skew_splits_the_time_outside_the_script() -> None:
    facts = DoctorFacts(complete=True, preflight=parse_doctor("").preflight,
                        node_time_start=1000.5, node_time_end=1002.5)
    # 3 s around a 2 s script: 0.5 s each way; the node read 1000.5 when we were at 100.5.
    assert clock_skew(facts, RoundTrip(sent_at=100.0, received_at=103.0)) == (900.0, 0.5)


def test_a_base_dir_not_there_yet_or_full() -> None:
    root = "/var/lib/servefleet-sim/nodes/sim-5090"
    text = recorded("sim-healthy")
    creatable = text.replace("base_writable=yes",
                             f"base_parent={root}\nbase_writable=creatable")
    assert only(report(creatable), "base_dir") == (
        f"pass  base_dir: {root}/srv does not exist yet; {root} is writable, the first deploy "
        "creates it")
    full = text.replace("base_writable=yes", "base_writable=no\nbase_error=mktemp: failed to "
                        f"create file via template '{root}/srv/.servefleet-doctor.XXXXXX': No "
                        "space left on device")
    assert only(report(full), "base_dir").endswith(
        f"No space left on device); fix: free space on the file system of {root}/srv")


def test_below_the_default_thresholds_fails() -> None:
    lines = report(recorded("sim-healthy"),
                   settings=DoctorSettings(min_free_images_gib=60, min_free_weights_gib=100))
    assert only(lines, "disk for images") == (
        "fail  disk for images: 53.7 GiB free under /var/lib/servefleet-sim/nodes/sim-5090/"
        "docker, below 60 GiB; fix: free space: docker image prune -a; docker builder prune; "
        "or lower --min-free-images-gib if this node's engines need less")
    facts = parse_doctor(recorded("sim-healthy"))
    node = sim_node()
    kwargs: dict[str, Any] = {"trip": trip_around(facts), "gpu": SIM_GPU, "placements": {},
                              "inventory_file": "n.yaml", "stack_file": "s.yaml"}
    assert failed(judge(node, facts, settings=DoctorSettings(min_free_images_gib=60),
                        **kwargs))
    assert not failed(judge(node, facts, settings=SETTINGS, **kwargs))


# -- a node that cannot be asked -------------------------------------------------------------
def test_ssh_failures_are_one_line_with_the_fix() -> None:
    node = sim_node()
    assert line(ssh_failed(node, "unreachable", "sim-5090: cannot reach 10.77.3.2:22 over SSH "
                           "after 2 attempts (timed out)", "nodes/sim/sim-5090.yaml")) == (
        "fail  ssh: cannot reach 10.77.3.2:22 over SSH after 2 attempts (timed out); fix: "
        "check that the node is up and sshd listens on root@10.77.3.2:22 (`ssh -p 22 "
        "root@10.77.3.2 true`), and address / ssh.port in nodes/sim/sim-5090.yaml")
    auth = ssh_failed(node, "auth", "sim-5090: SSH authentication as 'root' failed "
                      "(Authentication failed.); check ssh.identity_file / ssh.agent", "n.yaml")
    assert auth.fix == ("check ssh.user, ssh.identity_file / ssh.agent in n.yaml; the key's "
                        "public half must be in ~root/.ssh/authorized_keys on the node")
    key = ssh_failed(node, "host_key", "sim-5090: host key mismatch …", "n.yaml")
    assert key.verdict == "fail" and key.fix is not None and "keyscan sim-5090" in key.fix


# -- ports the stack places ------------------------------------------------------------------
def test_placed_ports_of_single_and_multi_node_deployments() -> None:
    stack = StackConfig.model_validate({
        "stack": "home",
        "deployments": [{"node": "sim-5090", "profile": "p"},
                        {"node": "sim-5090", "name": "second", "profile": "p", "port": 8001},
                        {"node": "other", "profile": "p"}],
        "multi_node": [{"name": "tp2", "profile": "p", "nodes": ["sim-5090", "other"],
                        "port": 8002, "master_port": 29501}],
    })
    assert placed_ports(stack, sim_node()) == {8000: ("main",), 8001: ("second",),
                                               8002: ("tp2",), 29501: ("tp2",)}
    assert placed_ports(stack, sim_node("other")) == {8000: ("main",)}


def test_the_weights_the_stack_stages_raise_the_disk_s_need() -> None:
    from servefleet.core.doctor import staged_weights
    from servefleet.core.models import Profile

    node = sim_node()
    stack = StackConfig.model_validate({
        "stack": "home", "deployments": [{"node": "sim-5090", "name": "chat", "profile": "q4"}]})
    profile = Profile.model_validate({
        "name": "q4", "engine": "llama.cpp", "engine_version": "b8680",
        "image": {"ref": "ghcr.io/ggml-org/llama.cpp:server-cuda",
                  "digest": "sha256:" + "5" * 64},
        "model": {"id": "unsloth/Q-GGUF", "served_name": "q", "weights_gib": 20.6,
                  "source": {"file": "q4.gguf", "sha256": "a" * 64}},
        "llamacpp": {"gguf": "/models/q4.gguf"}})
    staged = staged_weights(stack, node, {"q4": profile})
    assert staged == {"models": (20.6, (f"chat: unsloth/Q-GGUF/q4.gguf@main sha256:{'a' * 64}",))}
    facts = parse_doctor(recorded("sim-models-disk-full"))
    lines = [line(c) for c in judge(
        node, facts, trip=trip_around(facts), gpu=SIM_GPU, placements={},
        settings=SETTINGS, inventory_file="nodes/sim/sim-5090.yaml",
        stack_file="Pulumi.sim.yaml", staged=staged)]
    assert only(lines, "disk for weights (models dir)") == (
        "fail  disk for weights (models dir): 0 MiB free under "
        "/var/lib/servefleet-sim/nodes/sim-5090/models, below 20.6 GiB: the stack stages "
        "20.6 GiB of weights here (chat: unsloth/Q-GGUF/q4.gguf@main sha256:"
        f"{'a' * 64}), counted as if none were there yet; fix: free space: `servefleet "
        "models NODE --prune` removes what servefleet staged and no release uses, `hf cache "
        "delete` the rest; a deploy's staging refuses weights that do not fit, before the "
        "old engine stops")

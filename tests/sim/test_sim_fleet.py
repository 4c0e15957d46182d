"""The running simulated fleet, reached the way servefleet reaches real nodes: the real
OpenSSH client with strict host-key checking, the node's own Docker Engine, Compose."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from servefleet.core.render.templating import render_override
from servefleet.sim import engine_api, fleet, inventory, state
from servefleet.sim.testbed import FleetHandle

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

# Not a port of the inventory (8000, 8001): deployments of another test session sharing the
# fleet may hold those. Any port shows the point: two nodes, same port, own addresses.
PORT = 18000
# The NVFP4 quant fits the RTX 5090 as well as GB10 (the FP8 one would not fit 32 GiB).
VLLM_COMMAND = ["RedHatAI/Qwen3.6-35B-A3B-NVFP4", "--served-model-name", "qwen3.6", "--host",
                "0.0.0.0", "--port", str(PORT), "--max-model-len", "8192"]


def compose_file(image: str, command: list[str]) -> str:
    return json.dumps({"services": {"engine": {"image": image, "command": command,
                                               "network_mode": "host"}}})


def wait_http(url: str, timeout: float = 180.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bytes(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def test_each_node_is_its_own_machine(sim_fleet: FleetHandle) -> None:
    assert sorted(sim_fleet.nodes) == ["sim-5090", "sim-spark-1", "sim-spark-2"]
    recorded = state.load(sim_fleet.config.layout).nodes
    for name, spec in sim_fleet.nodes.items():
        out = sim_fleet.ssh(name, "hostname; hostname -I; "
                                  "ip -o -4 addr show | awk '{print $2, $4}'")
        lines = out.stdout.split("\n")
        # A fleet another session started with older code keeps running as it was.
        if recorded[name].recipe >= 2:
            assert lines[0] == name
        assert lines[1].split() == [spec.address]
        assert sorted(lines[2:-1]) == sorted(["lo 127.0.0.1/8", f"eth0 {spec.address}/30"])


def test_strict_host_key_checking_refuses_a_wrong_key(sim_fleet: FleetHandle,
                                                      tmp_path: Path) -> None:
    spark1 = sim_fleet.nodes["sim-spark-1"]
    spark2_key = sim_fleet.node_files("sim-spark-2").host_key.with_suffix(".pub").read_text()
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{spark1.address} {spark2_key}")
    argv = sim_fleet.ssh_argv("sim-spark-1", "true")
    argv[argv.index(f"UserKnownHostsFile={sim_fleet.known_hosts}")] = \
        f"UserKnownHostsFile={wrong}"
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert result.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in result.stderr


def test_docker_and_compose_answer_on_every_node(sim_fleet: FleetHandle) -> None:
    for name in sim_fleet.nodes:
        files = sim_fleet.node_files(name)
        out = sim_fleet.ssh(name, "echo $DOCKER_HOST; docker info --format '{{.DockerRootDir}}';"
                                  " docker compose version --short;"
                                  " docker image ls --format '{{.Repository}}:{{.Tag}}'")
        lines = out.stdout.split()
        assert lines[0] == f"unix://{files.docker_sock}"
        assert lines[1] == str(files.docker_data)
        assert lines[2][0].isdigit()
        assert "servefleet-sim/vllm-standin:latest" in lines[3:]
        assert "servefleet-sim/llamacpp-standin:latest" in lines[3:]


def test_nvidia_smi_reports_the_node_gpu(sim_fleet: FleetHandle) -> None:
    query = "nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version " \
            "--format=csv,noheader,nounits"
    assert sim_fleet.ssh("sim-spark-1", query).stdout == "NVIDIA GB10, 131072, 12.1, 580.142\n"
    assert sim_fleet.ssh("sim-5090", query).stdout == \
        "NVIDIA GeForce RTX 5090, 32768, 12.0, 580.142\n"


def test_driver_upgrade_injected_through_gpu_json(sim_fleet: FleetHandle) -> None:
    gpu_json = sim_fleet.node_files("sim-spark-2").gpu_json
    original = gpu_json.read_text()
    readout = json.loads(original)
    readout["driver_version"] = "590.44.01"
    try:
        gpu_json.write_text(json.dumps(readout))
        out = sim_fleet.ssh("sim-spark-2", "nvidia-smi -q | grep '^Driver Version'")
        assert out.stdout.split(":")[1].strip() == "590.44.01"
    finally:
        gpu_json.write_text(original)


def node_override(sim_fleet: FleetHandle, name: str) -> str:
    """The node's compose override, rendered for a vLLM deployment as a deploy would."""
    template = inventory.override_file(sim_fleet.project_dir, name)
    return render_override(template, {
        "engine": "vllm", "engine_version": "0.21.0", "builds_image": False,
        "deployment": "simtest", "port": PORT, "node_name": name,
        "sim_real_engine": False}, "test").decode()


def test_stand_in_serves_on_two_nodes_at_the_same_port(sim_fleet: FleetHandle) -> None:
    nodes = ["sim-spark-2", "sim-5090"]
    # The real image name: the node's override swaps in the stand-in, as in a deploy.
    compose = compose_file("vllm/vllm-openai:v0.21.0", VLLM_COMMAND)
    try:
        for name in nodes:
            folder = sim_fleet.node_files(name).base_dir / "test-compose"
            override = node_override(sim_fleet, name)
            sim_fleet.ssh(name, f"mkdir -p {folder} && cd {folder} && "
                                f"printf '%s' {shlex.quote(compose)} > compose.yaml && "
                                f"printf '%s' {shlex.quote(override)} > override.yaml && "
                                "docker compose -p simtest -f compose.yaml -f override.yaml "
                                "up -d --quiet-pull")
        for name in nodes:
            address = sim_fleet.nodes[name].address
            try:
                wait_http(f"http://{address}:{PORT}/health")
            except OSError:
                folder = sim_fleet.node_files(name).base_dir / "test-compose"
                log = sim_fleet.ssh(name, f"cd {folder} && docker compose -p simtest -f "
                                          "compose.yaml -f override.yaml ps -a; docker compose"
                                          " -p simtest -f compose.yaml -f override.yaml logs "
                                          "--no-color", check=False)
                pytest.fail(f"{name}: no /health on port {PORT}:\n{log.stdout[-4000:]}")
            # Each node's engine listens in its own namespace only, not on the host.
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
        for name in nodes:
            folder = sim_fleet.node_files(name).base_dir / "test-compose"
            log = sim_fleet.ssh(name, f"cd {folder} && docker compose -p simtest -f compose.yaml"
                                      " -f override.yaml logs --no-color --no-log-prefix"
                                      " engine").stdout
            if sim_fleet.standin_is_real:
                grep = subprocess.run(["grep", "-E", "-c",
                                       "GPU KV cache size: [0-9,]+ tokens|"
                                       "Application startup complete"],
                                      input=log, capture_output=True, text=True, check=False)
                assert int(grep.stdout) >= 2, log[-3000:]
            else:
                assert f"on {name} listening on port {PORT}" in log, log
    finally:
        for name in nodes:
            folder = sim_fleet.node_files(name).base_dir / "test-compose"
            sim_fleet.ssh(name, f"cd {folder} && docker compose -p simtest -f compose.yaml"
                                " -f override.yaml down -t 1", check=False)


def test_warm_up_is_a_quick_no_op(sim_fleet: FleetHandle) -> None:
    before = state.load(sim_fleet.config.layout)
    started = time.monotonic()
    after = fleet.up(list(sim_fleet.nodes.values()), project_dir=sim_fleet.project_dir,
                     config=sim_fleet.config)
    elapsed = time.monotonic() - started
    assert after.nodes == before.nodes, "a warm up must not restart anything"
    assert elapsed < 5.0


def test_status_lists_nodes_and_containers(sim_fleet: FleetHandle) -> None:
    report = fleet.status(config=sim_fleet.config)
    assert [n["name"] for n in report["nodes"]] == ["sim-spark-1", "sim-spark-2", "sim-5090"]
    assert all(n["running"] and n["sshd_pid"] and n["dockerd_pid"] for n in report["nodes"])
    sock = sim_fleet.node_files("sim-spark-1").docker_sock
    assert engine_api.ping(sock)


def test_control_folder_reaches_the_engine_read_only(sim_fleet: FleetHandle) -> None:
    name = "sim-spark-2"
    folder = sim_fleet.node_files(name).base_dir / "test-control"
    compose = compose_file("vllm/vllm-openai:v0.21.0", VLLM_COMMAND)
    script = ("cat /standin-control/gpu.json; echo ---; env | grep ^STANDIN_ | sort; "
              "touch /standin-control/x 2>&1 || true")
    try:
        out = sim_fleet.ssh(name, (
            f"mkdir -p {folder} && cd {folder} && "
            f"printf '%s' {shlex.quote(compose)} > compose.yaml && "
            f"printf '%s' {shlex.quote(node_override(sim_fleet, name))} > override.yaml && "
            "docker compose -p simctl -f compose.yaml -f override.yaml run --rm -T "
            f"--entrypoint sh engine -c {shlex.quote(script)}")).stdout
    finally:
        sim_fleet.ssh(name, f"cd {folder} && docker compose -p simctl -f compose.yaml "
                            "-f override.yaml down -t 1", check=False)
    readout = json.loads(out.split("---\n", 1)[0])
    assert readout["gpus"][0]["name"] == "NVIDIA GB10"
    assert "STANDIN_GPU_NAME=NVIDIA GB10" in out
    assert "STANDIN_NODE_NAME=sim-spark-2" in out
    assert "Read-only file system" in out

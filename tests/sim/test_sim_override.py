"""The simulated node's compose override, rendered the way deployments render it, merged by
the real Compose CLI (``docker-compose config``) onto a compose file like servefleet's."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servefleet.core.bench.beside import bench_service_file
from servefleet.core.errors import RenderError
from servefleet.core.render.templating import render_override
from servefleet.sim import inventory
from servefleet.sim.engines import EngineInstall, cpu_twin
from servefleet.sim.layout import SimLayout
from servefleet.sim.spec import reference_fleet

BASE = """\
name: chat
services:
  engine:
    image: servefleet/chat:abc123
    build:
      context: .
      dockerfile: Dockerfile
      args:
        BASE_IMAGE: vllm/vllm-openai:v0.21.0
    command: ["Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000"]
    network_mode: host
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: 1
              capabilities: [gpu]
    environment:
      VLLM_LOGGING_LEVEL: INFO
    volumes:
      - type: bind
        source: /srv/hf
        target: /root/.cache/huggingface
"""


@pytest.fixture
def compose(need_program: Callable[[str], str]) -> str:
    return need_program("docker-compose")


VLLM_CPU = EngineInstall(
    engine="vllm", version="0.32.0", root=Path("/cache/engines/vllm-cpu/0.32.0-abc"),
    entrypoint=("/opt/servefleet-engine/bin/vllm",),
    models={"tiny-qwen3-moe": Path("/cache/engines/models/tiny-qwen3-moe")},
    env={"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"})


def merged(compose: str, tmp_path: Path, engine: str, builds_image: bool,
           node_index: int = 0,
           installs: dict[str, EngineInstall] | None = None,
           sim_real_engine: bool = True) -> dict[str, Any]:
    """Render the node's override for a deployment and let Compose merge it;
    ``sim_real_engine``: whether the node file lists ``engine`` as running for real."""
    spec = reference_fleet()[node_index]
    node = SimLayout(Path("/var/lib/servefleet-sim")).node(spec.name)
    template = tmp_path / f"{spec.name}.override.yaml.j2"
    template.write_text(inventory.render_override(spec, node, installs))
    variables = {"engine": engine, "engine_version": "0.21.0" if engine == "vllm" else "b8680",
                 "builds_image": builds_image, "deployment": "chat", "port": 8000,
                 "node_name": spec.name, "sim_real_engine": sim_real_engine}
    (tmp_path / "override.yaml").write_bytes(render_override(template, variables, "test"))
    base = BASE if builds_image else BASE.replace(
        "    build:\n      context: .\n      dockerfile: Dockerfile\n      args:\n"
        "        BASE_IMAGE: vllm/vllm-openai:v0.21.0\n", "")
    (tmp_path / "compose.yaml").write_text(base)
    (tmp_path / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    result = subprocess.run([compose, "-f", "compose.yaml", "-f", "override.yaml", "config",
                             "--format", "json"], cwd=tmp_path, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    service: dict[str, Any] = json.loads(result.stdout)["services"]["engine"]
    return service


def test_image_is_swapped_and_gpu_reservation_dropped(compose: str, tmp_path: Path) -> None:
    service = merged(compose, tmp_path, "vllm", builds_image=False)
    assert service["image"] == "servefleet-sim/vllm-standin:latest"
    assert "deploy" not in service
    assert service["command"] == ["Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000"]


def test_overlay_builds_on_the_stand_in(compose: str, tmp_path: Path) -> None:
    service = merged(compose, tmp_path, "vllm", builds_image=True)
    assert service["build"]["args"] == {"BASE_IMAGE": "servefleet-sim/vllm-standin:latest"}
    # The deployment's own tag for the built image stays.
    assert service["image"] == "servefleet/chat:abc123"
    assert "deploy" not in service


def test_llamacpp_gets_its_stand_in(compose: str, tmp_path: Path) -> None:
    service = merged(compose, tmp_path, "llama.cpp", builds_image=False, node_index=2)
    assert service["image"] == "servefleet-sim/llamacpp-standin:latest"
    assert service["environment"]["STANDIN_ENGINE_VERSION"] == "b8680"


def test_node_gpu_and_control_folder_reach_the_engine(compose: str, tmp_path: Path) -> None:
    service = merged(compose, tmp_path, "vllm", builds_image=False)
    assert service["environment"] == {
        "VLLM_LOGGING_LEVEL": "INFO",
        "STANDIN_ENGINE_VERSION": "0.21.0",
        "STANDIN_GPU_NAME": "NVIDIA GB10",
        "STANDIN_GPU_MEMORY_GIB": "128",
        "STANDIN_UNIFIED_MEMORY": "1",
        "STANDIN_COMPUTE_CAPABILITY": "12.1",
        "STANDIN_NODE_NAME": "sim-spark-1",
    }
    control = [v for v in service["volumes"] if v["target"] == "/standin-control"]
    assert control == [{"type": "bind", "read_only": True, "target": "/standin-control",
                        "source": "/var/lib/servefleet-sim/nodes/sim-spark-1/control"}]
    assert any(v["target"] == "/root/.cache/huggingface" for v in service["volumes"])


def test_rtx5090_node_values(compose: str, tmp_path: Path) -> None:
    env = merged(compose, tmp_path, "vllm", builds_image=False, node_index=2)["environment"]
    assert env["STANDIN_GPU_NAME"] == "NVIDIA GeForce RTX 5090"
    assert env["STANDIN_GPU_MEMORY_GIB"] == "32"
    assert env["STANDIN_UNIFIED_MEMORY"] == "0"
    assert env["STANDIN_COMPUTE_CAPABILITY"] == "12.0"


def test_unknown_engine_fails_rendering(tmp_path: Path) -> None:
    spec = reference_fleet()[0]
    template = tmp_path / "o.yaml.j2"
    template.write_text(inventory.render_override(
        spec, SimLayout(Path("/var/lib/servefleet-sim")).node(spec.name)))
    with pytest.raises(RenderError):
        render_override(template, {"engine": "sglang", "engine_version": "0.5", "port": 8000,
                                   "builds_image": False, "deployment": "d",
                                   "node_name": spec.name, "sim_real_engine": False}, "test")


def test_real_engine_is_mounted_and_runs_through_cpu_twin(compose: str, tmp_path: Path) -> None:
    service = merged(compose, tmp_path, "vllm", builds_image=False,
                     installs={"vllm": VLLM_CPU})
    # The command stays the one a real node gets; cpu_twin.py rewrites it in the container.
    assert service["command"] == ["Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000"]
    assert service["entrypoint"] == ["python3", "/opt/servefleet-sim/cpu_twin.py", "vllm"]
    env = service["environment"]
    assert env["SIM_ENGINE_VERSION"] == "0.32.0"
    assert json.loads(env["SIM_ENGINE_ENTRYPOINT"]) == ["/opt/servefleet-engine/bin/vllm"]
    assert env["SIM_ENGINE_MODEL"] == "/opt/servefleet-models/tiny-qwen3-moe"
    assert env["VLLM_TARGET_DEVICE"] == "cpu"
    mounts = {v["target"]: (v["source"], v.get("read_only", False))
              for v in service["volumes"]}
    assert mounts["/opt/servefleet-engine"] == (str(VLLM_CPU.root), True)
    assert mounts["/opt/servefleet-models/tiny-qwen3-moe"] == (
        "/cache/engines/models/tiny-qwen3-moe", True)
    assert mounts["/opt/servefleet-sim"] == (str(inventory.ENGINES_DIR), True)
    assert (inventory.ENGINES_DIR / "cpu_twin.py").is_file()


def test_overlay_builds_stay_on_the_stand_in(compose: str, tmp_path: Path) -> None:
    """A patch overlay applies to the stand-in's placeholder package: no real engine."""
    service = merged(compose, tmp_path, "vllm", builds_image=True,
                     installs={"vllm": VLLM_CPU})
    assert service.get("entrypoint") is None
    assert "SIM_ENGINE_VERSION" not in service["environment"]


def test_an_engine_the_node_file_leaves_out_runs_the_stand_in(compose: str,
                                                              tmp_path: Path) -> None:
    """Installed but not listed under the node file's ``sim.engines`` (the test bed runs it
    as the stand-in there): the stand-in runs, as the health gate then expects."""
    service = merged(compose, tmp_path, "vllm", builds_image=False,
                     installs={"vllm": VLLM_CPU}, sim_real_engine=False)
    assert service["image"] == "servefleet-sim/vllm-standin:latest"
    # The same container shape as a real run (the import reads a simulated engine by its
    # CPU twin), told to run the stand-in.
    assert service["entrypoint"] == ["python3", "/opt/servefleet-sim/cpu_twin.py", "vllm"]
    assert service["environment"]["SIM_STANDIN"] == "1"
    real = merged(compose, tmp_path, "vllm", builds_image=False, installs={"vllm": VLLM_CPU})
    assert "SIM_STANDIN" not in real["environment"]


def test_engine_without_a_real_install_runs_the_stand_in(compose: str, tmp_path: Path) -> None:
    service = merged(compose, tmp_path, "llama.cpp", builds_image=False, node_index=2,
                     installs={"vllm": VLLM_CPU})
    assert service["image"] == "servefleet-sim/llamacpp-standin:latest"
    assert service.get("entrypoint") is None


def test_inventory_lists_what_the_real_engine_cannot_show(tmp_path: Path) -> None:
    spec = reference_fleet()[0]
    # A folder of its own: the running fleet's control folder may hold the test bed's
    # stand-in marker, which keeps the engine out of the document.
    node = SimLayout(tmp_path).node(spec.name)
    document = inventory.node_document(spec, node, client_key=Path("/k"), host_key="ssh-ed25519 A",
                                       override=Path("/o.j2"), installs={"vllm": VLLM_CPU})
    engine = document["sim"]["engines"]["vllm"]
    assert engine["version"] == "0.32.0"
    # Where this machine's CPU cannot keep vLLM's FP8 KV cache, the KV dtype is unshown too.
    fp8 = cpu_twin.fp8_kv_cache_here()
    assert engine["fp8_kv_cache"] is fp8
    assert engine["unshown"] == sorted(["attention_backend", "cudagraph_mode", "kv_smaller_than",
                                        "predicted_kv_cache_tokens",
                                        *([] if fp8 else ["kv_cache_dtype"])])
    assert "cpu_twin.py" in engine["why"]


def test_an_up_keeps_what_the_test_bed_runs_as_the_stand_in(tmp_path: Path) -> None:
    """``sim up`` on a running fleet writes the node file again: an engine the node's
    control folder runs as the stand-in stays out of ``sim.engines``, or the next deploy
    would run the real engine under a session that expects the stand-in."""
    spec = reference_fleet()[0]
    node = SimLayout(tmp_path).node(spec.name)
    node.control_dir.mkdir(parents=True)
    (node.control_dir / inventory.STANDIN_FILE).write_text("vllm\n")
    installs = {"vllm": VLLM_CPU, "llama.cpp": VLLM_CPU}

    def listed() -> list[str]:
        document = inventory.node_document(spec, node, client_key=Path("/k"),
                                           host_key="ssh-ed25519 A", override=Path("/o.j2"),
                                           installs=installs)
        return sorted(document["sim"]["engines"])

    assert listed() == ["llama.cpp"]
    (node.control_dir / inventory.STANDIN_FILE).unlink()
    assert listed() == ["llama.cpp", "vllm"]


def test_a_bench_beside_llamacpp_runs_the_real_vllm_on_the_stand_in_base(
        compose: str, tmp_path: Path) -> None:
    """The bench's own compose file goes between the release's compose file and the node's
    override: here the override swaps its vLLM image for the stand-in base with the real
    vLLM mounted, and names the tiny model's tokenizer."""
    spec = reference_fleet()[2]
    node = SimLayout(Path("/var/lib/servefleet-sim")).node(spec.name)
    template = tmp_path / "o.yaml.j2"
    template.write_text(inventory.render_override(spec, node, {"vllm": VLLM_CPU}))
    (tmp_path / "override.yaml").write_bytes(render_override(template, {
        "engine": "llama.cpp", "engine_version": "b8680", "builds_image": False,
        "deployment": "chat", "port": 8000, "node_name": spec.name,
        "sim_real_engine": False}, "test"))
    (tmp_path / "compose.yaml").write_text(BASE.replace(
        "    build:\n      context: .\n      dockerfile: Dockerfile\n      args:\n"
        "        BASE_IMAGE: vllm/vllm-openai:v0.21.0\n", ""))
    (tmp_path / "engine.env").write_text("LLAMA_API_KEY=k\n")
    (tmp_path / "bench.json").write_text(bench_service_file("vllm/vllm-openai:v0.26.0",
                                                            "/srv/hf"))

    def config(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([compose, "-f", "compose.yaml", "-f", "bench.json", "-f",
                               "override.yaml", *args], cwd=tmp_path, capture_output=True,
                              text=True, check=False)

    # Never started by `up`: the service belongs to the Compose profile "bench" only.
    plain = config("config", "--services")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split() == ["engine"]
    done = config("--profile", "bench", "config", "--format", "json")
    assert done.returncode == 0, done.stderr
    bench = json.loads(done.stdout)["services"]["bench"]
    assert bench["image"] == "servefleet-sim/vllm-standin:latest"
    assert bench["entrypoint"] == ["python3", "-u", "-"]
    assert bench["network_mode"] == "host"
    env = bench["environment"]
    assert env["SERVEFLEET_BENCH_TOKENIZER"] == "/opt/servefleet-models/tiny-qwen3-moe"
    assert env["PATH"].startswith("/opt/servefleet-engine/bin:")
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["LLAMA_API_KEY"] == "k"
    mounts = {v["target"]: v["source"] for v in bench["volumes"]}
    assert mounts["/opt/servefleet-engine"] == str(VLLM_CPU.root)
    assert mounts["/root/.cache/huggingface"] == "/srv/hf"


def test_a_vllm_deployment_gets_no_bench_service(compose: str, tmp_path: Path) -> None:
    spec = reference_fleet()[0]
    node = SimLayout(Path("/var/lib/servefleet-sim")).node(spec.name)
    template = tmp_path / "o.yaml.j2"
    template.write_text(inventory.render_override(spec, node, {"vllm": VLLM_CPU}))
    rendered = render_override(template, {
        "engine": "vllm", "engine_version": "0.21.0", "builds_image": False,
        "deployment": "chat", "port": 8000, "node_name": spec.name,
        "sim_real_engine": True}, "test")
    assert b"bench:" not in rendered

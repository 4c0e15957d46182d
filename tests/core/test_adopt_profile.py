"""``imported_profile``: the closest shipped profile plus an overlay of what differs, notes
for what a profile does not hold, and refusals that say why."""

from __future__ import annotations

from pathlib import Path

from servefleet.core.adopt import imported_profile, running_engine
from servefleet.core.adopt.running import RunningEngine
from servefleet.core.project import load_profiles
from servefleet.core.yamlfile import parse_yaml
from tests.core.adopt_docs import (
    COMPOSE_LLAMA,
    DOCKER_RUN_VLLM,
    HF_SECRET,
    LLAMA_IMAGE,
    VLLM_ARGS,
    VLLM_IMAGE,
    variant,
)

ROOT = Path(__file__).resolve().parents[2]
PROFILES, FILES, RAW, _ = load_profiles(ROOT)


def _import(engine: RunningEngine, profiles: bool = True):  # type: ignore[no-untyped-def]
    if profiles:
        return imported_profile(engine, "gpu-box-main", PROFILES, RAW, FILES, node="gpu-box")
    return imported_profile(engine, "gpu-box-main", {}, {}, {}, node="gpu-box")


def test_docker_run_vllm_overlay() -> None:
    result = _import(running_engine(DOCKER_RUN_VLLM, VLLM_IMAGE))
    assert result.refused is None
    assert result.base == "qwen36-fp8" and result.port == 8000
    assert result.text is not None
    data = parse_yaml(result.text, "x")
    assert data["extends"] == "qwen36-fp8"
    # Only what differs: utilization, and the flag the schema does not know.
    assert data["vllm"] == {"gpu_memory_utilization": 0.5,
                            "extra_args": ["--disable-log-requests"]}
    assert "image" not in data and "env" not in data and "secret_env" not in data
    notes = "\n".join(result.notes)
    assert "--disable-log-requests went into extra_args: the schema does not know it" in notes
    assert "secret HF_TOKEN" in notes and "servefleet:hfToken" in notes
    assert "restart policy unless-stopped" in notes
    everything = repr(result) + result.text
    assert HF_SECRET not in everything


def test_compose_llamacpp_overlay() -> None:
    result = _import(running_engine(COMPOSE_LLAMA, LLAMA_IMAGE))
    assert result.refused is None and result.base == "qwen36-q4-llamacpp"
    assert result.port == 8080
    data = parse_yaml(result.text or "", "x")
    assert data["llamacpp"] == {"ctx_size": 32768}
    notes = "\n".join(result.notes)
    assert "--ctx-size is written -c" in notes
    assert "not on the host network (published 8080->8080)" in notes
    assert "docker compose (project chat, service llama" in notes


def test_new_image_is_pinned_in_the_overlay() -> None:
    doc = variant(DOCKER_RUN_VLLM)
    doc["Config"] = {**doc["Config"], "Image": "vllm/vllm-openai:v0.22.1"}
    image = variant(VLLM_IMAGE, RepoDigests=["vllm/vllm-openai@sha256:" + "e" * 64])
    data = parse_yaml(_import(running_engine(doc, image)).text or "", "x")
    assert data["image"] == {"ref": "vllm/vllm-openai:v0.22.1", "digest": "sha256:" + "e" * 64}
    assert data["engine_version"] == "0.22.1"


def test_no_shipped_base_gives_a_full_profile() -> None:
    result = _import(running_engine(DOCKER_RUN_VLLM, VLLM_IMAGE), profiles=False)
    assert result.refused is None and result.base is None
    data = parse_yaml(result.text or "", "x")
    assert data["engine"] == "vllm" and data["engine_version"] == "0.21.0"
    assert data["image"]["digest"].startswith("sha256:a2300958")
    assert data["model"] == {"id": "Qwen/Qwen3.6-35B-A3B-FP8", "served_name": "qwen36"}
    assert data["secret_env"] == ["HF_TOKEN"]
    assert any("no shipped profile runs this model" in n for n in result.notes)


def test_simulated_node_takes_the_image_of_its_profile() -> None:
    doc = variant(COMPOSE_LLAMA, Path="python3",
                  Args=["/opt/servefleet-sim/cpu_twin.py", "llama.cpp", *COMPOSE_LLAMA["Args"]])
    doc["Config"] = {**doc["Config"], "Image": "servefleet-sim/llamacpp-standin:latest",
                     "Env": ["STANDIN_ENGINE_VERSION=b8680"]}
    result = _import(running_engine(doc, None))
    assert result.refused is None
    assert "image" not in parse_yaml(result.text or "", "x")
    assert any("simulated node" in n and "llama.cpp:server-cuda" in n for n in result.notes)


def _refusal(args: list[str], image: dict | None = VLLM_IMAGE) -> str:  # type: ignore[type-arg]
    result = _import(running_engine(variant(DOCKER_RUN_VLLM, Args=args), image))
    assert result.text is None and result.refused is not None
    return result.refused


def test_refuses_an_engine_spanning_nodes() -> None:
    assert "spans several nodes" in _refusal([*VLLM_ARGS, "--nnodes", "2"])


def test_refuses_a_secret_flag_and_keeps_it_out() -> None:
    doc = variant(DOCKER_RUN_VLLM, Args=[*VLLM_ARGS, "--api-key", "sk-topsecret-0042"])
    result = _import(running_engine(doc, VLLM_IMAGE))
    assert result.refused is not None and "--api-key passes a secret" in result.refused
    assert "VLLM_API_KEY" in result.refused
    assert "sk-topsecret-0042" not in repr(result)


def test_refuses_a_host_servefleet_would_change() -> None:
    args = [a if a != "0.0.0.0" else "127.0.0.1" for a in VLLM_ARGS]
    reason = _refusal(args)
    assert "would not render the running flags" in reason
    assert "~ --host: 127.0.0.1 -> 0.0.0.0" in reason


def test_refuses_without_a_served_name() -> None:
    args = [a for a in VLLM_ARGS if a not in ("--served-model-name", "qwen36")]
    assert "no --served-model-name" in _refusal(args)


def test_refuses_a_short_unknown_flag() -> None:
    reason = _refusal([*VLLM_ARGS, "-pp", "2"])
    assert "-pp: no profile field holds it" in reason


def test_refuses_an_unpinnable_image_without_base() -> None:
    doc = variant(DOCKER_RUN_VLLM)
    doc["Config"] = {**doc["Config"], "Image": "my-vllm:dev"}
    result = _import(running_engine(doc, variant(VLLM_IMAGE, RepoDigests=[])), profiles=False)
    assert result.refused is not None and "no registry digest" in result.refused


def test_refuses_another_engine() -> None:
    doc = variant(DOCKER_RUN_VLLM, Path="python3",
                  Args=["-m", "sglang.launch_server", "--model-path", "x"])
    result = _import(running_engine(doc, None))
    assert result.refused is not None and "runs sglang" in result.refused


def test_llamacpp_without_port_is_refused() -> None:
    args = [a for a in COMPOSE_LLAMA["Args"] if a not in ("--port", "8080")]
    result = _import(running_engine(variant(COMPOSE_LLAMA, Args=args), LLAMA_IMAGE))
    assert result.refused is not None and "no --port" in result.refused


def test_vllm_without_host_and_port_reads_as_the_defaults() -> None:
    drop = {"--host", "0.0.0.0", "--port", "8000"}
    result = _import(running_engine(variant(
        DOCKER_RUN_VLLM, Args=[a for a in VLLM_ARGS if a not in drop]), VLLM_IMAGE))
    assert result.refused is None and result.port == 8000
    assert any("no --port: vLLM's default 8000" in n for n in result.notes)

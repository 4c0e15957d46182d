"""``docker inspect`` JSON read into RunningEngines: entrypoints of every known form, compose
labels, GPUs, ports, and secrets that never get through."""

from __future__ import annotations

import shlex

from servefleet.core.adopt import running_engine, running_engines
from servefleet.core.adopt.inspect import SECRET_VALUE
from tests.core.adopt_docs import (
    COMPOSE_LLAMA,
    DOCKER_RUN_VLLM,
    HF_SECRET,
    LLAMA_ARGS,
    LLAMA_IMAGE,
    POSTGRES,
    VLLM_ARGS,
    VLLM_DIGEST,
    VLLM_IMAGE,
    variant,
)


def test_docker_run_vllm() -> None:
    engine = running_engine(DOCKER_RUN_VLLM, VLLM_IMAGE)
    assert engine.container == "vllm-qwen"
    assert engine.engine == "vllm"
    assert engine.argv == tuple(VLLM_ARGS[1:])
    assert engine.image == "vllm/vllm-openai:v0.21.0"
    assert engine.image_digest == VLLM_DIGEST
    assert engine.engine_version == "0.21.0"
    # The image's own variables are not the operator's.
    assert engine.env == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}
    assert engine.secret_env == ("HF_TOKEN",)
    assert engine.host_network and engine.gpu_count == -1 and not engine.gpu_ids
    assert engine.restart_policy == "unless-stopped"
    assert engine.compose_project is None
    assert [(m.source, m.target, m.read_only) for m in engine.mounts] == [
        ("/data/hf", "/root/.cache/huggingface", False)]
    assert HF_SECRET not in repr(engine)


def test_compose_llamacpp() -> None:
    engine = running_engine(COMPOSE_LLAMA, LLAMA_IMAGE)
    assert (engine.container, engine.engine, engine.argv) == (
        "chat-llama-1", "llama.cpp", tuple(LLAMA_ARGS))
    assert engine.compose_project == "chat" and engine.compose_service == "llama"
    assert engine.compose_dir == "/home/op/chat"
    assert engine.compose_files == ("/home/op/chat/compose.yaml",)
    assert not engine.host_network and engine.published_ports == {8080: 8080}
    assert engine.gpu_count == -1 and engine.restart_policy == "always"
    assert engine.env == {}  # LLAMA_ARG_HOST comes from the image
    # The tag says no build number, and the image label is the base OS's: no version.
    assert engine.engine_version is None


def test_older_vllm_api_server_puts_the_model_first() -> None:
    doc = variant(DOCKER_RUN_VLLM, Path="python3", Args=[
        "-m", "vllm.entrypoints.openai.api_server", "--served-model-name", "qwen36",
        "--model", "Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000"])
    engine = running_engine(doc, VLLM_IMAGE)
    assert engine.engine == "vllm"
    assert engine.argv == ("Qwen/Qwen3.6-35B-A3B-FP8", "--served-model-name", "qwen36",
                           "--port", "8000")


def test_vllm_behind_a_shell() -> None:
    script = "exec vllm serve " + shlex.join(VLLM_ARGS[1:])
    doc = variant(DOCKER_RUN_VLLM, Path="/bin/sh", Args=["-c", script])
    assert running_engine(doc, VLLM_IMAGE).argv == tuple(VLLM_ARGS[1:])


def test_simulated_node_twin() -> None:
    doc = variant(COMPOSE_LLAMA, Path="python3",
                  Args=["/opt/servefleet-sim/cpu_twin.py", "llama.cpp", *LLAMA_ARGS])
    doc["Config"] = {**doc["Config"], "Image": "servefleet-sim/llamacpp-standin:latest",
                     "Env": ["STANDIN_ENGINE_VERSION=b8680", "SIM_ENGINE_VERSION=b7000",
                             "STANDIN_NODE_NAME=sim-5090", "OMP_NUM_THREADS=1", "MINE=1"]}
    engine = running_engine(doc, None, sim_env={"OMP_NUM_THREADS"})
    assert engine.simulated and engine.engine == "llama.cpp"
    assert engine.argv == tuple(LLAMA_ARGS)
    assert engine.engine_version == "b8680"
    assert engine.env == {"MINE": "1"}
    assert engine.image_digest is None


def test_secret_flag_value_is_masked() -> None:
    doc = variant(DOCKER_RUN_VLLM, Args=[*VLLM_ARGS, "--api-key", "sk-verysecretvalue123",
                                         "--hf-token=hf_abcdefghijklmnop"])
    engine = running_engine(doc, VLLM_IMAGE)
    assert engine.argv[-3:] == ("--api-key", SECRET_VALUE, f"--hf-token={SECRET_VALUE}")
    assert "sk-verysecretvalue123" not in repr(engine)
    assert "hf_abcdefghijklmnop" not in repr(engine)
    assert "--max-num-batched-tokens" in engine.argv  # "tokens" is not a secret


def test_secret_env_value_in_argv_is_masked() -> None:
    doc = variant(DOCKER_RUN_VLLM, Args=[*VLLM_ARGS, "--foo", HF_SECRET])
    engine = running_engine(doc, VLLM_IMAGE)
    assert engine.argv[-1] == SECRET_VALUE
    assert HF_SECRET not in repr(engine)


def test_listed_secret_name() -> None:
    doc = variant(DOCKER_RUN_VLLM)
    doc["Config"]["Env"].append("MY_CRED=abc123456")
    engine = running_engine(doc, VLLM_IMAGE, secret_names={"MY_CRED"})
    assert "MY_CRED" in engine.secret_env and "abc123456" not in repr(engine)


def test_only_engines_are_listed() -> None:
    sglang = variant(POSTGRES, Name="/sg", Path="python3",
                     Args=["-m", "sglang.launch_server", "--model-path", "x"])
    engines = running_engines([POSTGRES, COMPOSE_LLAMA, DOCKER_RUN_VLLM, sglang],
                              [VLLM_IMAGE, LLAMA_IMAGE])
    assert [(e.container, e.engine, e.other_engine) for e in engines] == [
        ("chat-llama-1", "llama.cpp", None), ("sg", None, "sglang"),
        ("vllm-qwen", "vllm", None)]
    assert "hunter2" not in repr(engines)


def test_pinned_gpus_and_missing_image() -> None:
    doc = variant(DOCKER_RUN_VLLM)
    doc["HostConfig"]["DeviceRequests"] = [{"Driver": "", "Count": 0, "DeviceIDs": ["0", "1"],
                                            "Capabilities": [["gpu"]]}]
    engine = running_engine(doc, None)
    assert engine.gpu_count == 2 and engine.gpu_ids == ("0", "1")
    assert engine.image_digest is None
    assert engine.env["PATH"]  # without the image, nothing tells the image's variables


def test_what_the_node_masked_is_read_as_masked() -> None:
    # The import's template sends a secret variable as its name alone and a masked
    # argument as SECRET_VALUE (servefleet.adapters.importer): both read as secrets.
    doc = variant(DOCKER_RUN_VLLM, Args=[*VLLM_ARGS, "--foo", SECRET_VALUE])
    doc["Config"]["Env"] = ["HF_TOKEN", *doc["Config"]["Env"][1:]]
    engine = running_engine(doc, VLLM_IMAGE)
    assert engine.secret_env == ("HF_TOKEN",)
    assert "HF_TOKEN" not in engine.env
    assert engine.argv[-2:] == ("--foo", SECRET_VALUE)
    assert "the value of --foo is a secret: it was not read" in engine.notes

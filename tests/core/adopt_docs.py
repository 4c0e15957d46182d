"""``docker inspect`` / ``docker image inspect`` documents for the import tests, in the shape
the Docker CLI prints them (Engine API ContainerInspect / ImageInspect, keys as Docker spells
them; fields the import does not read are abridged)."""

from __future__ import annotations

import copy
from typing import Any

HF_SECRET = "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42"
VLLM_IMAGE_ID = "sha256:" + "1" * 64
LLAMA_IMAGE_ID = "sha256:" + "2" * 64
VLLM_DIGEST = "sha256:a230095847e93bd4df9888b33dab956fa9504537b828a23657d2b26fed57b5c9"
LLAMA_DIGEST = "sha256:5c9266b4f92f1ab0d26dd0f2ede2e65d3853cad99ff86ba219db8fe6d464b995"

VLLM_IMAGE: dict[str, Any] = {
    "Id": VLLM_IMAGE_ID,
    "RepoTags": ["vllm/vllm-openai:v0.21.0"],
    "RepoDigests": [f"vllm/vllm-openai@{VLLM_DIGEST}"],
    "Config": {
        "Env": ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin",
                "NVIDIA_VISIBLE_DEVICES=all", "VLLM_USAGE_SOURCE=production-docker-image"],
        "Entrypoint": ["vllm", "serve"], "Cmd": None, "Labels": {}},
}
LLAMA_IMAGE: dict[str, Any] = {
    "Id": LLAMA_IMAGE_ID,
    "RepoTags": ["ghcr.io/ggml-org/llama.cpp:server-cuda"],
    "RepoDigests": [f"ghcr.io/ggml-org/llama.cpp@{LLAMA_DIGEST}"],
    "Config": {"Env": ["PATH=/usr/bin:/bin", "LLAMA_ARG_HOST=0.0.0.0"],
               "Entrypoint": ["/app/llama-server"], "Cmd": None,
               "Labels": {"org.opencontainers.image.version": "22.04"}},
}

# `docker run -d --name vllm-qwen --gpus all --network host --ipc host
#   -v /data/hf:/root/.cache/huggingface -e HF_TOKEN=… --restart unless-stopped
#   vllm/vllm-openai:v0.21.0 Qwen/Qwen3.6-35B-A3B-FP8 --served-model-name qwen36 …`
VLLM_ARGS = [
    "serve", "Qwen/Qwen3.6-35B-A3B-FP8", "--served-model-name", "qwen36",
    "--host", "0.0.0.0", "--port", "8000", "--gpu-memory-utilization", "0.50",
    "--max-model-len", "131072", "--max-num-seqs", "32", "--max-num-batched-tokens", "16384",
    "--kv-cache-dtype", "fp8_e4m3", "--enable-chunked-prefill", "--enable-prefix-caching",
    "--no-async-scheduling", "--attention-backend", "FLASHINFER", "--reasoning-parser",
    "qwen3", "--tool-call-parser", "qwen3_coder", "--enable-auto-tool-choice",
    "--default-chat-template-kwargs", '{"enable_thinking": false}', "--disable-log-requests",
]
DOCKER_RUN_VLLM: dict[str, Any] = {
    "Id": "a" * 64,
    "Created": "2026-05-01T10:00:00.000000000Z",
    "Path": "vllm",
    "Args": VLLM_ARGS,
    "State": {"Status": "running", "Running": True, "Paused": False, "Restarting": False,
              "OOMKilled": False, "Dead": False, "Pid": 4242, "ExitCode": 0},
    "Image": VLLM_IMAGE_ID,
    "Name": "/vllm-qwen",
    "RestartCount": 0,
    "HostConfig": {
        "NetworkMode": "host", "PortBindings": {},
        "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0},
        "IpcMode": "host",
        "DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": None,
                            "Capabilities": [["gpu"]], "Options": {}}],
    },
    "Mounts": [{"Type": "bind", "Source": "/data/hf", "Destination": "/root/.cache/huggingface",
                "Mode": "", "RW": True, "Propagation": "rprivate"}],
    "Config": {
        "Hostname": "gpu-box", "User": "", "Tty": False,
        "Env": [f"HF_TOKEN={HF_SECRET}", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1",
                "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin:/bin",
                "NVIDIA_VISIBLE_DEVICES=all", "VLLM_USAGE_SOURCE=production-docker-image"],
        "Cmd": VLLM_ARGS[1:],
        "Image": "vllm/vllm-openai:v0.21.0",
        "Entrypoint": ["vllm", "serve"],
        "Labels": {},
    },
    "NetworkSettings": {"Ports": {}, "Networks": {"host": {"NetworkID": "f" * 64}}},
}

# `docker compose up -d` of the operator's own compose.yaml (service `llama`, ports 8080:8080,
# deploy.resources.reservations.devices: [{driver: nvidia, count: all, capabilities: [gpu]}]).
LLAMA_ARGS = [
    "-m", "/models/Qwen3.6-35B-A3B-Q4_K_M.gguf", "--alias", "qwen36-q4", "--host", "0.0.0.0",
    "--port", "8080", "--ctx-size", "32768", "-np", "1", "-ngl", "all", "-fa", "on",
    "-ctk", "q8_0", "-ctv", "q8_0", "-b", "2048", "-ub", "512", "--jinja", "--metrics",
    "-lv", "4", "--no-cache-prompt",
]
COMPOSE_LLAMA: dict[str, Any] = {
    "Id": "b" * 64,
    "Created": "2026-05-01T11:00:00.000000000Z",
    "Path": "/app/llama-server",
    "Args": LLAMA_ARGS,
    "State": {"Status": "running", "Running": True, "Pid": 5151, "ExitCode": 0},
    "Image": LLAMA_IMAGE_ID,
    "Name": "/chat-llama-1",
    "HostConfig": {
        "NetworkMode": "chat_default",
        "PortBindings": {"8080/tcp": [{"HostIp": "", "HostPort": "8080"}]},
        "RestartPolicy": {"Name": "always", "MaximumRetryCount": 0},
        "DeviceRequests": [{"Driver": "nvidia", "Count": -1, "DeviceIDs": None,
                            "Capabilities": [["gpu"]], "Options": None}],
    },
    "Mounts": [{"Type": "bind", "Source": "/srv/models", "Destination": "/models",
                "Mode": "ro", "RW": False, "Propagation": "rprivate"}],
    "Config": {
        "Hostname": "b" * 12,
        "Env": ["PATH=/usr/bin:/bin", "LLAMA_ARG_HOST=0.0.0.0"],
        "Cmd": LLAMA_ARGS,
        "Image": "ghcr.io/ggml-org/llama.cpp:server-cuda",
        "Entrypoint": ["/app/llama-server"],
        "Labels": {
            "com.docker.compose.config-hash": "c" * 64,
            "com.docker.compose.container-number": "1",
            "com.docker.compose.oneoff": "False",
            "com.docker.compose.project": "chat",
            "com.docker.compose.project.config_files": "/home/op/chat/compose.yaml",
            "com.docker.compose.project.working_dir": "/home/op/chat",
            "com.docker.compose.service": "llama",
            "com.docker.compose.version": "2.36.0",
        },
    },
    "NetworkSettings": {"Ports": {"8080/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8080"}]}},
}

POSTGRES: dict[str, Any] = {
    "Id": "d" * 64, "Path": "docker-entrypoint.sh", "Args": ["postgres"],
    "State": {"Status": "running"}, "Image": "sha256:" + "3" * 64, "Name": "/db",
    "HostConfig": {"NetworkMode": "bridge"},
    "Config": {"Env": ["POSTGRES_PASSWORD=hunter2hunter2"], "Image": "postgres:16",
               "Labels": {}},
}


def variant(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with top-level keys replaced."""
    out = copy.deepcopy(doc)
    out.update(changes)
    return out

"""The load container run beside an engine whose image has no load generator.

llama.cpp's images carry no Python, so no ``vllm bench serve``. A bench of such an engine
runs the load program in a vLLM image instead, on the same node, as a one-shot compose
service (``bench``, under a Compose profile of that name so ``up`` never starts it) added
to the release's own compose files for the run: it shares the node's network (the
engine listens on ``127.0.0.1``), reads the release's ``engine.env`` (the API key the
engine asks for) and the node's Hugging Face cache (the tokenizer it counts with). The
release's files stay as they were: a bench never changes a release or its id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from servefleet.core.errors import ConfigError
from servefleet.core.models import Profile
from servefleet.core.render.layout import ENV_FILE, HF_CACHE_TARGET, LABEL_PREFIX

BENCH_SERVICE = "bench"
"""The compose service (and Compose profile) that runs the load program."""
BENCH_SERVICE_FILE = "bench-service.json"
"""Its compose file, in the deployment's folder beside ``bench.jsonl`` (not a release's)."""


def bench_service_file(image: str, hf_cache: str) -> str:
    """The compose file that adds the ``bench`` service (JSON, which Compose reads as YAML:
    every value quoted by construction)."""
    service = {
        "profiles": [BENCH_SERVICE],
        "image": image,
        "entrypoint": ["python3", "-u", "-"],
        "network_mode": "host",
        "restart": "no",
        "env_file": [ENV_FILE],
        "volumes": [{"type": "bind", "source": hf_cache, "target": HF_CACHE_TARGET,
                     "read_only": False, "bind": {"create_host_path": True}}],
        "labels": {f"{LABEL_PREFIX}role": BENCH_SERVICE},
    }
    return json.dumps({"services": {BENCH_SERVICE: service}}, indent=2) + "\n"


def default_bench_image(profiles: Iterable[Profile]) -> str:
    """The pinned image of the vLLM profile with the newest engine version (then by name),
    for a stack that names no ``benchImage``; :class:`ConfigError` when there is none."""
    vllm = [p for p in profiles if p.engine == "vllm"]
    if not vllm:
        raise ConfigError("a bench of an engine without `vllm bench serve` runs it from a "
                          "vLLM image beside the engine: set `servefleet:benchImage` in the "
                          "stack (e.g. vllm/vllm-openai:v0.26.0), or add a vLLM profile")
    newest = max(vllm, key=lambda p: (_version_key(p.engine_version), p.name))
    return newest.image.pinned


def _version_key(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.lstrip("v").split("."):
        digits = "".join(c for c in piece if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)

"""The node read: one command per node and interval (:mod:`read_program` run with
``python3 -I -S``), its spec on stdin so that an API key never reaches a command line."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from servefleet.core.models.watch import WatchConfig

HTTP_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class WatchedDeployment:
    """One deployment the watcher reads."""

    node: str
    name: str
    port: int
    engine: str
    """``vllm`` or ``llama.cpp``."""
    model: str | None
    """The served model name the canary asks for."""
    profile: str
    utilization: float | None = None
    """The share of GPU memory the engine takes (vLLM), for the unified-memory wait."""

    @property
    def key(self) -> str:
        """``node/deployment``."""
        return f"{self.node}/{self.name}"


def program_source() -> str:
    """The read program's source, sent with every read (about 5 KB)."""
    return resources.files("servefleet.adapters.watch").joinpath(
        "read_program.py").read_text("utf-8")


def read_command() -> list[str]:
    """The argv of the read (constant: every value arrives on stdin)."""
    return ["python3", "-I", "-S", "-c", program_source()]


def read_spec(deployments: Sequence[WatchedDeployment], config: WatchConfig,
              api_keys: Mapping[str, str | None]) -> bytes:
    """The stdin of the read."""
    spec: dict[str, Any] = {
        "deployments": [{"name": d.name, "port": d.port, "engine": d.engine,
                         "model": d.model, "api_key": api_keys.get(d.name)}
                        for d in deployments],
        "canary": config.canary, "canary_timeout": config.canary_timeout_seconds,
        "http_timeout": HTTP_TIMEOUT_SECONDS,
    }
    return json.dumps(spec).encode()


def read_timeout(config: WatchConfig, deployments: int) -> float:
    """The longest a read may take: each deployment's HTTP calls and canary, plus slack."""
    per = 2 * HTTP_TIMEOUT_SECONDS + (config.canary_timeout_seconds if config.canary else 0)
    return per * max(deployments, 1) + 20

"""Real engines for the simulated fleet, built or installed once per machine and cached.

A simulated node runs the real engine on every happy path: the CPU build of vLLM and
llama.cpp's ``llama-server`` built from source, each with a tiny model of the architecture
the shipped profiles serve. Nothing here is baked into an image: an engine install is a
folder on this machine that the node's compose override bind-mounts read-only into the
stand-in base image (Debian bookworm with python3), so one install serves every node.

Every install is keyed by what it was made from and lives under
``${SERVEFLEET_CACHE:-~/.cache/servefleet}/engines``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Log = Callable[[str], None]

ENGINE_MOUNT = "/opt/servefleet-engine"
"""Where an engine install is mounted inside a simulated node's container."""
MODELS_MOUNT = "/opt/servefleet-models"
"""Where the tiny models are mounted inside a simulated node's container."""


def engines_cache_dir() -> Path:
    """``$SERVEFLEET_CACHE/engines`` or ``~/.cache/servefleet/engines``."""
    base = os.environ.get("SERVEFLEET_CACHE") or str(Path.home() / ".cache" / "servefleet")
    return Path(base).absolute() / "engines"


@dataclass(frozen=True)
class EngineInstall:
    """One real engine, ready to be mounted into a simulated node's container."""

    engine: str
    """``vllm`` or ``llama.cpp``, as profiles name engines."""
    version: str
    """The engine's own version string (``0.32.0``, ``b7000``…)."""
    root: Path
    """Folder on this machine, mounted read-only at :data:`ENGINE_MOUNT`."""
    entrypoint: tuple[str, ...]
    """argv prefix inside the container that stands where the real image's engine command
    stands (``/opt/servefleet-engine/bin/vllm`` takes ``serve MODEL --flags…``)."""
    models: Mapping[str, Path] = field(default_factory=dict)
    """Tiny model name → file or folder on this machine; mounted under
    :data:`MODELS_MOUNT`/<name>."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment the engine needs in the container (e.g. ``VLLM_TARGET_DEVICE=cpu``)."""


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path``: two ``sim up`` at once build or install once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

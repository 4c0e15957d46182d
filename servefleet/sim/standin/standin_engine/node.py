"""The simulated node: its GPU as described by environment variables, and its clock."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

GIB = 1 << 30
DEFAULT_TIME_SCALE = 0.007
MIB = 1 << 20


@dataclass(frozen=True)
class GpuSpec:
    """Defaults for a GPU model: what torch and nvidia-smi would report on it."""

    memory_gib: float
    """Total device memory as torch reports it (GiB)."""
    capability: tuple[int, int]
    """CUDA compute capability."""
    unified: bool
    """CPU and GPU share one memory pool (GB10, Jetson)."""


# Known GPUs; a name not listed falls back to the GB10 figures unless the
# environment gives them.
KNOWN_GPUS: dict[str, GpuSpec] = {
    "NVIDIA GB10": GpuSpec(128.0, (12, 1), True),
    "NVIDIA GeForce RTX 5090": GpuSpec(31.36, (12, 0), False),
    "NVIDIA GeForce RTX 4090": GpuSpec(23.53, (8, 9), False),
    "NVIDIA H100 80GB HBM3": GpuSpec(79.19, (9, 0), False),
    "NVIDIA H200": GpuSpec(139.8, (9, 0), False),
    "NVIDIA B200": GpuSpec(178.35, (10, 0), False),
    "NVIDIA A100-SXM4-80GB": GpuSpec(79.25, (8, 0), False),
}

DEFAULT_GPU = "NVIDIA GB10"


def _truthy(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Node:
    """The GPU of the simulated node."""

    gpu_name: str
    """Marketing name as CUDA reports it, e.g. ``NVIDIA GB10``."""
    memory_gib: float
    """Total device memory (GiB)."""
    unified: bool
    """Unified memory (DGX Spark): free memory is what the host has available."""
    capability: tuple[int, int]
    """Compute capability, e.g. (12, 1)."""

    @property
    def total_bytes(self) -> int:
        """Total device memory in bytes."""
        return int(self.memory_gib * GIB)

    @property
    def total_mib(self) -> int:
        """Total device memory in MiB (as llama.cpp prints it)."""
        return int(self.memory_gib * 1024)

    @property
    def device_name_for_files(self) -> str:
        """The GPU name as vLLM puts it into MoE config file names."""
        return self.gpu_name.replace(" ", "_")

    @property
    def capability_str(self) -> str:
        """``12.1``."""
        return f"{self.capability[0]}.{self.capability[1]}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Node:
        """Read ``STANDIN_GPU_*`` variables; unset ones come from the GPU's defaults."""
        name = env.get("STANDIN_GPU_NAME", "").strip() or DEFAULT_GPU
        spec = KNOWN_GPUS.get(name, KNOWN_GPUS[DEFAULT_GPU])
        memory = float(env.get("STANDIN_GPU_MEMORY_GIB", "") or spec.memory_gib)
        unified_raw = env.get("STANDIN_UNIFIED_MEMORY", "")
        unified = _truthy(unified_raw) if unified_raw.strip() else spec.unified
        cap_raw = env.get("STANDIN_COMPUTE_CAPABILITY", "").strip()
        if cap_raw:
            major, _, minor = cap_raw.partition(".")
            capability = (int(major), int(minor or "0"))
        else:
            capability = spec.capability
        return cls(gpu_name=name, memory_gib=memory, unified=unified, capability=capability)


class SimClock:
    """Sleeps a scaled-down version of every simulated duration.

    The boot log prints real-looking durations; the process sleeps them times
    ``scale`` so a simulated boot takes seconds instead of minutes.
    """

    def __init__(self, scale: float, slowdown: float = 1.0) -> None:
        self.scale = scale
        self.slowdown = slowdown
        self.simulated = 0.0
        """Simulated seconds spent so far (what the log's durations add up to)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str], slowdown: float = 1.0) -> SimClock:
        """``STANDIN_TIME_SCALE`` (default 0.007: a 400 s simulated boot takes about 3 s)."""
        raw = env.get("STANDIN_TIME_SCALE", "").strip()
        return cls(float(raw) if raw else DEFAULT_TIME_SCALE, slowdown)

    def figure(self, seconds: float) -> float:
        """The duration the log reports for a phase (slowed down by a slow-boot fault)."""
        return seconds * self.slowdown

    def spend(self, seconds: float) -> float:
        """Sleep for a simulated phase; returns the figure to print."""
        reported = self.figure(seconds)
        if reported > 0 and self.scale > 0:
            time.sleep(reported * self.scale)
        self.simulated += max(0.0, reported)
        return reported


def environ() -> Mapping[str, str]:
    """The process environment (a function so tests can see where it is read)."""
    return os.environ

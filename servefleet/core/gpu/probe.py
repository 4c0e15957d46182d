"""The GPU probe's reading: what a node's GPUs, driver and host memory look like.

The probe script (``servefleet/adapters/gpu_probe/probe_script.py``) runs on the node and
prints one JSON object; :func:`parse_probe_json` turns it into a :class:`GpuProbeResult`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MIB = 1024 * 1024
GIB = 1024 * MIB


class GpuModel(BaseModel):
    """Base of the GPU models: servefleet's model conventions (frozen, no extra fields,
    attribute docstrings), kept local so the inventory models may import this package
    without an import cycle."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ProbedProcess(GpuModel):
    """A process holding a CUDA context on the GPU."""

    pid: int
    """Process id on the node (host PID namespace)."""
    name: str | None = None
    """Executable path or name; None when the node would not tell."""
    used_memory_bytes: int | None = None
    """Device memory the process holds; None where the driver does not account it
    (unified memory, some containers)."""


class MigMode(GpuModel):
    """Multi-Instance GPU mode; None when the GPU has no MIG or the source did not say."""

    current: bool | None = None
    """MIG enabled now."""
    pending: bool | None = None
    """MIG enabled after the next GPU reset (NVML only; nvidia-smi's query is not asked)."""


class ProbedGpu(GpuModel):
    """One GPU as the probe read it."""

    index: int
    """NVML / nvidia-smi index."""
    name: str
    """Product name, e.g. ``NVIDIA H200``."""
    uuid: str | None = None
    """``GPU-…`` identifier, stable across reboots."""
    pci_bus_id: str | None = None
    """PCI bus id (NVML only)."""
    compute_capability: str | None = None
    """CUDA compute capability as ``major.minor`` (``9.0``, ``12.1``)."""
    memory_total_bytes: int | None = None
    """Device memory; None when the GPU reports none (unified memory, e.g. GB10)."""
    memory_free_bytes: int | None = None
    """Free device memory at probe time; None as above."""
    memory_source: Literal["device", "host"] = "device"
    """``host`` when the GPU had no memory figures and the host's memory is the pool."""
    persistence_mode: bool | None = None
    """Driver persistence mode."""
    mig_mode: MigMode = Field(default_factory=MigMode)
    """MIG mode, current and pending."""
    processes: tuple[ProbedProcess, ...] = ()
    """Compute processes on this GPU."""


class HostFacts(GpuModel):
    """The node itself, read next to the GPUs."""

    arch: str | None = None
    """``uname -m`` (``x86_64``, ``aarch64``)."""
    mem_total_bytes: int | None = None
    """``MemTotal`` of ``/proc/meminfo``."""
    mem_available_bytes: int | None = None
    """``MemAvailable`` of ``/proc/meminfo``: what vLLM can take on unified memory."""


class CudaMemory(GpuModel):
    """One device's memory as CUDA reports it (``cuMemGetInfo``, what
    ``torch.cuda.mem_get_info`` and so vLLM read)."""

    index: int
    total_bytes: int
    free_bytes: int


class GpuProbeResult(GpuModel):
    """Everything one run of the GPU probe reported."""

    schema_version: int = 1
    """Version of the probe's output format."""
    source: Literal["nvml", "nvidia-smi", "none"]
    """Where the facts came from; ``none`` when neither NVML nor nvidia-smi answered."""
    driver_version: str | None = None
    """NVIDIA driver version, e.g. ``580.159.04``."""
    cuda_driver_version: str | None = None
    """Highest CUDA version the driver supports, e.g. ``13.0``."""
    nvml_version: str | None = None
    """NVML library version (NVML only)."""
    gpus: tuple[ProbedGpu, ...] = ()
    """The GPUs, in index order."""
    host: HostFacts = Field(default_factory=HostFacts)
    """Architecture and memory of the node."""
    errors: tuple[str, ...] = ()
    """Why a source could not be used or a fact not read."""
    cuda_memory: tuple[CudaMemory, ...] | None = None
    """Per device, the memory CUDA reports (``servefleet probe`` only); None: not read."""

    def gpu_memory(self, gpu: ProbedGpu) -> tuple[int | None, int | None]:
        """``(total, free)`` bytes of the pool this GPU allocates from: its own memory, or the
        host's (MemTotal, MemAvailable) when ``memory_source`` is ``host``."""
        if gpu.memory_source == "host":
            return self.host.mem_total_bytes, self.host.mem_available_bytes
        return gpu.memory_total_bytes, gpu.memory_free_bytes


def parse_probe_json(text: str) -> GpuProbeResult:
    """Parse the probe script's stdout; :class:`ValueError` naming the problem otherwise."""
    try:
        return GpuProbeResult.model_validate_json(text.strip() or "null")
    except ValidationError as error:
        raise ValueError(f"GPU probe output is not a probe result: {error}") from error

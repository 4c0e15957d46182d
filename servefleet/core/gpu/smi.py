"""nvidia-smi's outputs, parsed and typed.

The parsing is the probe script's own (:mod:`servefleet.core.gpu.probe_parse`, which the
node runs as the first part of the probe): this module only gives its dicts types, so the
node and the controller cannot read the same output two ways.
:func:`result_from_nvidia_smi` is the probe result of the script's nvidia-smi route.
"""

from __future__ import annotations

from collections.abc import Iterable

from servefleet.core.gpu import probe_parse
from servefleet.core.gpu.probe import (
    GpuModel,
    GpuProbeResult,
    HostFacts,
)

SMI_GPU_FIELDS = tuple(probe_parse.SMI_GPU_FIELDS.split(","))
"""Columns the probe asks ``nvidia-smi --query-gpu`` for, in order."""
SMI_APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
"""Columns the probe asks ``nvidia-smi --query-compute-apps`` for, in order."""


class SmiGpuRow(GpuModel):
    """One line of ``nvidia-smi --query-gpu=<SMI_GPU_FIELDS> --format=csv,noheader,nounits``."""

    index: int
    """GPU index."""
    name: str
    """Product name."""
    uuid: str | None
    """GPU UUID."""
    driver_version: str | None
    """Driver version."""
    memory_total_bytes: int | None
    """``memory.total`` (MiB there) in bytes; None for ``[N/A]`` (unified memory)."""
    memory_free_bytes: int | None
    """``memory.free`` in bytes; None for ``[N/A]``."""
    compute_capability: str | None
    """``compute_cap``, e.g. ``9.0``."""
    persistence_mode: bool | None
    """``Enabled`` / ``Disabled``."""
    mig_current: bool | None
    """Current MIG mode; None for ``[N/A]`` (no MIG on this GPU)."""


class SmiComputeApp(GpuModel):
    """One line of ``nvidia-smi --query-compute-apps=<SMI_APP_FIELDS> …``."""

    gpu_uuid: str
    """UUID of the GPU the process runs on."""
    pid: int
    """Process id."""
    name: str | None
    """Process name or path."""
    used_memory_bytes: int | None
    """``used_memory`` (MiB there) in bytes; None for ``[N/A]``."""


smi_value = probe_parse.smi_value
"""One nvidia-smi field, stripped; None for ``N/A`` and every bracketed placeholder."""
parse_smi_q = probe_parse.parse_smi_q
"""``driver_version`` and ``cuda_version`` from the header of ``nvidia-smi -q``."""


def parse_smi_gpus_csv(text: str) -> list[SmiGpuRow]:
    """Parse the ``--query-gpu`` output (memory in MiB there, bytes here)."""
    return [SmiGpuRow(**row) for row in probe_parse.parse_smi_gpus_csv(text)]


def parse_smi_apps_csv(text: str) -> list[SmiComputeApp]:
    """Parse the ``--query-compute-apps`` output; lines that are not four columns (``No
    running processes found``) are skipped."""
    return [SmiComputeApp(**app) for app in probe_parse.parse_smi_apps_csv(text)]


def parse_meminfo(text: str) -> HostFacts:
    """MemTotal / MemAvailable of ``/proc/meminfo`` (kB there, bytes here); no arch."""
    return HostFacts(**probe_parse.parse_meminfo(text))


def cuda_version_from_nvml(version: int) -> str:
    """NVML's CUDA driver version integer as text: ``13000`` → ``13.0``, ``12080`` → ``12.8``."""
    return str(probe_parse.cuda_version_string(version))


def result_from_nvidia_smi(gpus_csv: str, apps_csv: str | None, q_text: str | None,
                           host: HostFacts, errors: Iterable[str] = ()) -> GpuProbeResult:
    """The probe result the script builds on its nvidia-smi route, from the same outputs."""
    built = probe_parse.build_from_smi(gpus_csv, apps_csv, q_text, host.model_dump(),
                                       list(errors))
    return GpuProbeResult.model_validate(built)

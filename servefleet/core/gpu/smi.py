"""nvidia-smi's outputs, parsed: the typed twins of the probe script's own parsers.

The script must stay self-contained, so it carries its own copies; tests feed both the same
outputs. :func:`result_from_nvidia_smi` builds the probe result of the script's nvidia-smi
route from them.
"""

from __future__ import annotations

from collections.abc import Iterable

from servefleet.core.gpu.probe import (
    MIB,
    GpuModel,
    GpuProbeResult,
    HostFacts,
    MigMode,
    ProbedGpu,
    ProbedProcess,
)

SMI_GPU_FIELDS = (
    "index", "name", "uuid", "driver_version", "memory.total", "memory.free", "compute_cap",
    "persistence_mode", "mig.mode.current",
)
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


def smi_value(raw: str) -> str | None:
    """One nvidia-smi field, stripped; None for ``N/A``, ``[N/A]``, ``[Not Supported]`` and
    every other bracketed placeholder (``[Unknown Error]``, ``[Insufficient Permissions]``)."""
    value = raw.strip()
    if not value or value.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    if value.startswith("[") and value.endswith("]"):
        return None
    return value


def _smi_int(raw: str) -> int | None:
    value = smi_value(raw)
    return None if value is None else int(value)


def _smi_mib(raw: str) -> int | None:
    value = _smi_int(raw)
    return None if value is None else value * MIB


def _smi_enabled(raw: str) -> bool | None:
    value = smi_value(raw)
    if value is None:
        return None
    if value.lower() not in ("enabled", "disabled"):
        raise ValueError(f"expected Enabled or Disabled, got {value!r}")
    return value.lower() == "enabled"


def parse_smi_gpus_csv(text: str) -> list[SmiGpuRow]:
    """Parse the ``--query-gpu`` output (memory in MiB there, bytes here)."""
    tail_len = len(SMI_GPU_FIELDS) - 2
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(",")
        if len(parts) < len(SMI_GPU_FIELDS):
            raise ValueError(f"unexpected nvidia-smi --query-gpu line: {line!r}")
        tail = parts[-tail_len:]
        rows.append(SmiGpuRow(
            index=int(parts[0]),
            # A product name could hold a comma; no other column can.
            name=",".join(parts[1:-tail_len]).strip(),
            uuid=smi_value(tail[0]),
            driver_version=smi_value(tail[1]),
            memory_total_bytes=_smi_mib(tail[2]),
            memory_free_bytes=_smi_mib(tail[3]),
            compute_capability=smi_value(tail[4]),
            persistence_mode=_smi_enabled(tail[5]),
            mig_current=_smi_enabled(tail[6]),
        ))
    return rows


def parse_smi_apps_csv(text: str) -> list[SmiComputeApp]:
    """Parse the ``--query-compute-apps`` output; lines that are not four columns (``No
    running processes found``) are skipped."""
    apps = []
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < len(SMI_APP_FIELDS):
            continue
        apps.append(SmiComputeApp(
            gpu_uuid=parts[0].strip(),
            pid=int(parts[1]),
            # A process path may hold commas: it is everything between pid and memory.
            name=smi_value(",".join(parts[2:-1])),
            used_memory_bytes=_smi_mib(parts[-1]),
        ))
    return apps


def parse_smi_q(text: str) -> dict[str, str | None]:
    """``driver_version`` and ``cuda_version`` from the header of ``nvidia-smi -q``."""
    keys = {"Driver Version": "driver_version", "CUDA Version": "cuda_version"}
    found: dict[str, str | None] = dict.fromkeys(keys.values())
    for line in text.splitlines():
        # Header lines start at column 0; the per-GPU sections are indented.
        if line[:1].isspace() or ":" not in line:
            continue
        key, _, value = line.partition(":")
        name = keys.get(key.strip())
        if name is not None and found[name] is None:
            found[name] = smi_value(value)
    return found


def parse_meminfo(text: str) -> HostFacts:
    """MemTotal / MemAvailable of ``/proc/meminfo`` (kB there, bytes here); no arch."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0]) * (1024 if fields[1:2] == ["kB"] else 1)
    return HostFacts(mem_total_bytes=values.get("MemTotal"),
                     mem_available_bytes=values.get("MemAvailable"))


def cuda_version_from_nvml(version: int) -> str:
    """NVML's CUDA driver version integer as text: ``13000`` → ``13.0``, ``12080`` → ``12.8``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def result_from_nvidia_smi(gpus_csv: str, apps_csv: str | None, q_text: str | None,
                           host: HostFacts, errors: Iterable[str] = ()) -> GpuProbeResult:
    """The probe result the script builds on its nvidia-smi route, from the same outputs."""
    rows = parse_smi_gpus_csv(gpus_csv)
    apps = parse_smi_apps_csv(apps_csv) if apps_csv is not None else []
    header = parse_smi_q(q_text) if q_text is not None else {}
    gpus = tuple(
        ProbedGpu(
            index=row.index, name=row.name, uuid=row.uuid,
            compute_capability=row.compute_capability,
            memory_total_bytes=row.memory_total_bytes,
            memory_free_bytes=row.memory_free_bytes,
            memory_source="device" if row.memory_total_bytes is not None else "host",
            persistence_mode=row.persistence_mode,
            mig_mode=MigMode(current=row.mig_current),
            processes=tuple(
                ProbedProcess(pid=a.pid, name=a.name, used_memory_bytes=a.used_memory_bytes)
                for a in apps if a.gpu_uuid == row.uuid
            ),
        )
        for row in rows
    )
    driver = (rows[0].driver_version if rows else None) or header.get("driver_version")
    return GpuProbeResult(
        source="nvidia-smi", driver_version=driver,
        cuda_driver_version=header.get("cuda_version"), gpus=gpus, host=host,
        errors=tuple(errors),
    )

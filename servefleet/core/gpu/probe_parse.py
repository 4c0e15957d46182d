#!/usr/bin/env python3
"""GPU probe that runs on a node and prints one JSON object describing its NVIDIA GPUs.

servefleet sends it over SSH as ``python3 -`` on stdin, as one program: this module (the
pure parsing) followed by :mod:`servefleet.adapters.gpu_probe.probe_script` (the reads and
:func:`main`), joined by :func:`servefleet.adapters.gpu_probe.probe_script_source`. So it
must stay self-contained: standard library only, no servefleet imports (but the later
part's imports of this one, which stay on this machine), and syntax that Python 3.7 still
accepts (nodes run whatever python3 their distribution ships). Being pure, it lives in the
core: :mod:`servefleet.core.gpu.smi` types its dicts for the controller, so the node and
the controller parse nvidia-smi with the same code.

Sources, in order:

1. NVML through the ``pynvml`` module (package ``nvidia-ml-py``);
2. if pynvml is missing or NVML fails to initialise, ``nvidia-smi`` with exactly three
   invocations (:data:`SMI_QUERY_GPU`, :data:`SMI_QUERY_APPS`, :data:`SMI_Q`);
3. if neither answers, ``source: "none"`` with the reasons in ``errors``.

The output always goes to stdout as one JSON object and the exit status is 0, whatever
was found: the caller decides what a missing GPU means. Keys: ``schema_version``,
``source``, ``driver_version``, ``cuda_driver_version`` (``"13.0"``), ``nvml_version``,
``gpus`` (index, name, uuid, pci_bus_id, compute_capability, memory_total_bytes,
memory_free_bytes, memory_source, persistence_mode, mig_mode {current, pending},
processes [{pid, name, used_memory_bytes}]), ``host`` (arch, mem_total_bytes,
mem_available_bytes) and ``errors``.

On unified-memory GPUs (GB10) NVML answers "Not Supported" for memory: the GPU's memory
figures are then null, ``memory_source`` is ``"host"``, and the pool is described by
``host`` (``/proc/meminfo`` MemTotal / MemAvailable).

With ``--cuda`` (``servefleet probe``; never in a rollout's preflight, since it opens a CUDA
context on every GPU) the script also reads ``cuda_memory``: each device's total and free
memory as CUDA reports them (``cuMemGetInfo`` through ``libcuda``, where
``torch.cuda.mem_get_info`` ends), which is what vLLM multiplies by
``gpu_memory_utilization``: a GB10 reports 121.69 GiB there, an RTX 5090 31.37 GiB.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 1
MIB = 1024 * 1024

SMI_GPU_FIELDS = (
    "index,name,uuid,driver_version,memory.total,memory.free,compute_cap,"
    "persistence_mode,mig.mode.current"
)
SMI_QUERY_GPU = [
    "nvidia-smi", "--query-gpu=" + SMI_GPU_FIELDS, "--format=csv,noheader,nounits",
]
SMI_QUERY_APPS = [
    "nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
]
SMI_Q = ["nvidia-smi", "-q"]
# nvidia-smi blocks for a long time when a GPU has fallen off the bus; never hang the probe.
SMI_TIMEOUT_SECONDS = 30
# Number of columns after ``name`` in SMI_GPU_FIELDS: the name is whatever lies between.
_SMI_GPU_TAIL = 7


# --------------------------------------------------------------------------- pure parsing


def smi_value(raw: str) -> str | None:
    """One nvidia-smi field, stripped; None for ``N/A``, ``[N/A]``, ``[Not Supported]`` and
    every other bracketed placeholder (``[Unknown Error]``, ``[Insufficient Permissions]``)."""
    value = raw.strip()
    if not value or value.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    if value.startswith("[") and value.endswith("]"):
        return None
    return value


def smi_int(raw: str) -> int | None:
    """An integer nvidia-smi field, or None when it is a placeholder."""
    value = smi_value(raw)
    return None if value is None else int(value)


def smi_enabled(raw: str) -> bool | None:
    """``Enabled`` / ``Disabled`` as a bool, None when the field is a placeholder."""
    value = smi_value(raw)
    if value is None:
        return None
    lowered = value.lower()
    if lowered == "enabled":
        return True
    if lowered == "disabled":
        return False
    raise ValueError(f"expected Enabled or Disabled, got {value!r}")


def parse_smi_gpus_csv(text: str) -> list[dict[str, Any]]:
    """Parse :data:`SMI_QUERY_GPU` output: one line per GPU, memory in MiB."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(",")
        if len(parts) < 2 + _SMI_GPU_TAIL:
            raise ValueError(f"unexpected nvidia-smi --query-gpu line: {line!r}")
        tail = parts[-_SMI_GPU_TAIL:]
        total_mib = smi_int(tail[2])
        free_mib = smi_int(tail[3])
        gpus.append({
            "index": int(parts[0]),
            # A product name could hold a comma; every other column cannot.
            "name": ",".join(parts[1:-_SMI_GPU_TAIL]).strip(),
            "uuid": smi_value(tail[0]),
            "driver_version": smi_value(tail[1]),
            "memory_total_bytes": None if total_mib is None else total_mib * MIB,
            "memory_free_bytes": None if free_mib is None else free_mib * MIB,
            "compute_capability": smi_value(tail[4]),
            "persistence_mode": smi_enabled(tail[5]),
            "mig_current": smi_enabled(tail[6]),
        })
    return gpus


def parse_smi_apps_csv(text: str) -> list[dict[str, Any]]:
    """Parse :data:`SMI_QUERY_APPS` output: one line per compute process, memory in MiB.

    Lines that are not four CSV columns (``No running processes found``) are skipped.
    """
    apps = []
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < 4:
            continue
        used_mib = smi_int(parts[-1])
        apps.append({
            "gpu_uuid": parts[0].strip(),
            "pid": int(parts[1]),
            # A process path may hold commas: it is everything between pid and memory.
            "name": smi_value(",".join(parts[2:-1])),
            "used_memory_bytes": None if used_mib is None else used_mib * MIB,
        })
    return apps


def parse_smi_q(text: str) -> dict[str, str | None]:
    """Read ``Driver Version`` and ``CUDA Version`` from the header of ``nvidia-smi -q``."""
    found: dict[str, str | None] = {"driver_version": None, "cuda_version": None}
    keys = {"Driver Version": "driver_version", "CUDA Version": "cuda_version"}
    for line in text.splitlines():
        # The header lines are not indented; per-GPU sections are.
        if line[:1].isspace() or ":" not in line:
            continue
        key, _, value = line.partition(":")
        name = keys.get(key.strip())
        if name is not None and found[name] is None:
            found[name] = smi_value(value)
    return found


def parse_meminfo(text: str) -> dict[str, int | None]:
    """MemTotal and MemAvailable from ``/proc/meminfo`` (kB there) in bytes."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            factor = 1024 if fields[1:2] == ["kB"] else 1
            values[key.strip()] = int(fields[0]) * factor
    return {
        "mem_total_bytes": values.get("MemTotal"),
        "mem_available_bytes": values.get("MemAvailable"),
    }


def cuda_version_string(version: int | None) -> str | None:
    """NVML's CUDA driver version integer (``13000``) as ``"13.0"`` (``12080`` → ``"12.8"``)."""
    if version is None:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"


def host_facts(arch: str | None, meminfo_text: str | None) -> dict[str, Any]:
    """The ``host`` block: architecture (``uname -m``) and system memory."""
    memory = parse_meminfo(meminfo_text) if meminfo_text is not None else {
        "mem_total_bytes": None, "mem_available_bytes": None,
    }
    return {"arch": arch, **memory}


def _text(value: Any) -> str:
    # Older pynvml releases return bytes, newer ones str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _mode(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _gpu(index: int, name: str, uuid: str | None, pci_bus_id: str | None,
         compute_capability: str | None, total: int | None, free: int | None,
         persistence: bool | None, mig_current: bool | None, mig_pending: bool | None,
         processes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "index": index,
        "name": name,
        "uuid": uuid,
        "pci_bus_id": pci_bus_id,
        "compute_capability": compute_capability,
        "memory_total_bytes": total,
        "memory_free_bytes": free,
        # Unified memory (GB10): NVML has no device figure, the host's pool is the memory.
        "memory_source": "device" if total is not None else "host",
        "persistence_mode": persistence,
        "mig_mode": {"current": mig_current, "pending": mig_pending},
        "processes": processes,
    }


def _result(source: str, driver: str | None, cuda: str | None, nvml_version: str | None,
            gpus: list[dict[str, Any]], host: dict[str, Any],
            errors: list[str]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "source": source,
        "driver_version": driver,
        "cuda_driver_version": cuda,
        "nvml_version": nvml_version,
        "gpus": gpus,
        "host": host,
        "errors": list(errors),
    }


def build_from_nvml_reading(reading: dict[str, Any], host: dict[str, Any],
                            errors: list[str]) -> dict[str, Any]:
    """Turn a raw NVML reading (the shape :func:`read_nvml` returns, and the shape of
    ``fixtures/nvml/h200-driver580.json``) into the probe's output."""
    gpus = []
    for device in reading.get("devices", []):
        memory = device.get("memory")
        capability = device.get("compute_capability")
        mig = device.get("mig_mode")
        processes = [
            {
                "pid": int(proc["pid"]),
                "name": proc.get("name"),
                "used_memory_bytes": proc.get("used_gpu_memory"),
            }
            for proc in device.get("compute_processes", [])
        ]
        gpus.append(_gpu(
            index=int(device["index"]),
            name=_text(device["name"]),
            uuid=device.get("uuid"),
            pci_bus_id=device.get("pci_bus_id"),
            compute_capability=(
                None if capability is None else f"{capability[0]}.{capability[1]}"
            ),
            total=None if memory is None else memory.get("total"),
            free=None if memory is None else memory.get("free"),
            persistence=_mode(device.get("persistence_mode")),
            mig_current=None if mig is None else _mode(mig[0]),
            mig_pending=None if mig is None else _mode(mig[1]),
            processes=processes,
        ))
    return _result(
        "nvml", reading.get("driver_version"),
        cuda_version_string(reading.get("cuda_driver_version")),
        reading.get("nvml_version"), gpus, host, errors,
    )


def build_from_smi(gpus_csv: str, apps_csv: str | None, q_text: str | None,
                   host: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    """Turn the three nvidia-smi outputs into the probe's output (apps and ``-q`` may be
    missing when those invocations failed)."""
    parsed = parse_smi_gpus_csv(gpus_csv)
    apps = parse_smi_apps_csv(apps_csv) if apps_csv is not None else []
    header = parse_smi_q(q_text) if q_text is not None else {
        "driver_version": None, "cuda_version": None,
    }
    gpus = []
    for row in parsed:
        processes = [
            {"pid": a["pid"], "name": a["name"], "used_memory_bytes": a["used_memory_bytes"]}
            for a in apps if a["gpu_uuid"] == row["uuid"]
        ]
        gpus.append(_gpu(
            index=row["index"], name=row["name"], uuid=row["uuid"], pci_bus_id=None,
            compute_capability=row["compute_capability"],
            total=row["memory_total_bytes"], free=row["memory_free_bytes"],
            persistence=row["persistence_mode"], mig_current=row["mig_current"],
            # The query interface is fixed to the current MIG mode only.
            mig_pending=None, processes=processes,
        ))
    driver = parsed[0]["driver_version"] if parsed else None
    return _result(
        "nvidia-smi", driver or header["driver_version"], header["cuda_version"], None,
        gpus, host, errors,
    )


def build_none(host: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    """The output when neither NVML nor nvidia-smi answered."""
    return _result("none", None, None, None, [], host, [
        *errors, "no GPU information: neither NVML (pynvml) nor nvidia-smi answered on this node",
    ])

"""The GPU probe's reads (NVML, nvidia-smi, CUDA, the host) and its entry point,
:func:`main`: the last part of the program sent to a node, after
:mod:`servefleet.core.gpu.probe_parse`, whose docstring describes the program
(:func:`servefleet.adapters.gpu_probe.probe_script_source` joins them). Imported here, this
module gives every name of the program, the parsing's too.
"""

from __future__ import annotations

from typing import Any

from servefleet.core.gpu.probe_parse import (
    MIB,
    SCHEMA_VERSION,
    SMI_GPU_FIELDS,
    SMI_Q,
    SMI_QUERY_APPS,
    SMI_QUERY_GPU,
    SMI_TIMEOUT_SECONDS,
    _text,
    build_from_nvml_reading,
    build_from_smi,
    build_none,
    cuda_version_string,
    host_facts,
    parse_meminfo,
    parse_smi_apps_csv,
    parse_smi_gpus_csv,
    parse_smi_q,
    smi_enabled,
    smi_int,
    smi_value,
)

__all__ = [  # the program's names, the parsing's too
    "MIB", "SCHEMA_VERSION", "SMI_GPU_FIELDS", "SMI_Q", "SMI_QUERY_APPS", "SMI_QUERY_GPU",
    "SMI_TIMEOUT_SECONDS", "build_from_nvml_reading", "build_from_smi", "build_none",
    "cuda_version_string", "host_facts", "main", "parse_meminfo", "parse_smi_apps_csv",
    "parse_smi_gpus_csv", "parse_smi_q", "probe", "probe_nvml", "probe_smi", "read_cuda_memory",
    "read_host", "read_nvml", "run_smi", "smi_enabled", "smi_int", "smi_value",
]

# isort: split
# ---- node script part: the node gets the lines below, those above stay here ----
import contextlib
import ctypes
import json
import os
import shutil
import subprocess
import sys

# --------------------------------------------------------------------------- reading


def _nvml_call(nvml: Any, errors: list[str], what: str, fn: Any, *args: Any) -> Any:
    """Call one NVML query; None when the GPU does not support it, or on error (recorded)."""
    try:
        return fn(*args)
    except nvml.NVMLError as error:
        if getattr(error, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
            return None
        errors.append(f"NVML: {what}: {error}")
        return None


def _process_name(nvml: Any, pid: int) -> str | None:
    try:
        return _text(nvml.nvmlSystemGetProcessName(pid))
    except nvml.NVMLError:
        pass
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip() or None
    except OSError:
        return None


def read_nvml(nvml: Any, errors: list[str]) -> dict[str, Any]:
    """Read every fact the probe reports through an initialised pynvml module."""
    cuda = _nvml_call(nvml, errors, "CUDA driver version", nvml.nvmlSystemGetCudaDriverVersion)
    nvml_version = _nvml_call(nvml, errors, "NVML version", nvml.nvmlSystemGetNVMLVersion)
    reading: dict[str, Any] = {
        "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
        "cuda_driver_version": cuda,
        "nvml_version": None if nvml_version is None else _text(nvml_version),
        "device_count": nvml.nvmlDeviceGetCount(),
        "devices": [],
    }
    for index in range(reading["device_count"]):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        label = f"GPU {index}"
        memory = _nvml_call(nvml, errors, label + " memory", nvml.nvmlDeviceGetMemoryInfo, handle)
        pci = _nvml_call(nvml, errors, label + " PCI info", nvml.nvmlDeviceGetPciInfo, handle)
        uuid = _nvml_call(nvml, errors, label + " UUID", nvml.nvmlDeviceGetUUID, handle)
        procs = _nvml_call(nvml, errors, label + " processes",
                           nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
        mig = _nvml_call(nvml, errors, label + " MIG mode", nvml.nvmlDeviceGetMigMode, handle)
        reading["devices"].append({
            "index": index,
            "name": _text(nvml.nvmlDeviceGetName(handle)),
            "uuid": None if uuid is None else _text(uuid),
            "pci_bus_id": None if pci is None else _text(pci.busId),
            "compute_capability": _nvml_call(
                nvml, errors, label + " compute capability",
                nvml.nvmlDeviceGetCudaComputeCapability, handle),
            # GB10 (unified memory) answers Not Supported here: None, not a crash.
            "memory": None if memory is None else {
                "total": int(memory.total), "free": int(memory.free), "used": int(memory.used),
            },
            "persistence_mode": _nvml_call(nvml, errors, label + " persistence mode",
                                           nvml.nvmlDeviceGetPersistenceMode, handle),
            "mig_mode": None if mig is None else [int(mig[0]), int(mig[1])],
            "compute_processes": [
                {
                    "pid": int(p.pid),
                    "name": _process_name(nvml, int(p.pid)),
                    # pynvml gives None where the driver cannot account per process.
                    "used_gpu_memory": None if p.usedGpuMemory is None else int(p.usedGpuMemory),
                }
                for p in procs
            ],
        })
    return reading


def probe_nvml(host: dict[str, Any], errors: list[str]) -> dict[str, Any] | None:
    """The NVML route; None (with the reason in ``errors``) when it cannot be used."""
    try:
        import pynvml
    except ImportError:
        errors.append("pynvml not installed (package nvidia-ml-py)")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        errors.append(f"NVML: {error}")
        return None
    try:
        return build_from_nvml_reading(read_nvml(pynvml, errors), host, errors)
    except pynvml.NVMLError as error:
        errors.append(f"NVML: {error}")
        return None
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def run_smi(argv: list[str], errors: list[str]) -> str | None:
    """Run one nvidia-smi invocation; its stdout, or None with the reason in ``errors``."""
    what = " ".join(argv[:2])
    try:
        done = subprocess.run(argv, capture_output=True, timeout=SMI_TIMEOUT_SECONDS,
                              check=False)
    except subprocess.TimeoutExpired:
        errors.append(f"{what}: no answer within {SMI_TIMEOUT_SECONDS} s")
        return None
    except OSError as error:
        errors.append(f"{what}: {error}")
        return None
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        # nvidia-smi prints its reason ("couldn't communicate with the NVIDIA driver") on stdout.
        reason = (done.stderr.decode("utf-8", "replace").strip() or out.strip())
        reason = reason.splitlines()[0] if reason else ""
        errors.append(f"{what} failed (exit {done.returncode}): {reason}")
        return None
    return out


def probe_smi(host: dict[str, Any], errors: list[str]) -> dict[str, Any] | None:
    """The nvidia-smi route; None (with the reason in ``errors``) when it cannot be used."""
    if shutil.which("nvidia-smi") is None:
        errors.append("nvidia-smi not found on PATH")
        return None
    gpus_csv = run_smi(SMI_QUERY_GPU, errors)
    if gpus_csv is None:
        return None
    apps_csv = run_smi(SMI_QUERY_APPS, errors)
    q_text = run_smi(SMI_Q, errors)
    try:
        return build_from_smi(gpus_csv, apps_csv, q_text, host, errors)
    except ValueError as error:
        errors.append(f"nvidia-smi output not understood: {error}")
        return None


def read_host() -> dict[str, Any]:
    """The ``host`` block of this machine."""
    try:
        with open("/proc/meminfo") as meminfo:
            text: str | None = meminfo.read()
    except OSError:
        text = None
    return host_facts(os.uname().machine, text)


def read_cuda_memory(errors: list[str]) -> list[dict[str, Any]] | None:
    """``[{index, total_bytes, free_bytes}]`` from the CUDA driver API, or None (why in
    ``errors``). Each device's primary context is retained only for the reading."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        errors.append(f"CUDA memory not read: libcuda.so.1 not loadable ({error})")
        return None

    def check(what: str, status: int) -> None:
        if status != 0:
            raise RuntimeError(f"{what} returned CUDA error {status}")

    found: list[dict[str, Any]] = []
    try:
        check("cuInit", cuda.cuInit(0))
        count = ctypes.c_int(0)
        check("cuDeviceGetCount", cuda.cuDeviceGetCount(ctypes.byref(count)))
        for index in range(count.value):
            device, context = ctypes.c_int(0), ctypes.c_void_p()
            check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), index))
            check("cuDevicePrimaryCtxRetain",
                  cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
            try:
                check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(context))
                free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
                check("cuMemGetInfo", cuda.cuMemGetInfo_v2(ctypes.byref(free),
                                                           ctypes.byref(total)))
                found.append({"index": index, "total_bytes": total.value,
                              "free_bytes": free.value})
            finally:
                cuda.cuDevicePrimaryCtxRelease(device)
    except (RuntimeError, AttributeError) as error:
        errors.append(f"CUDA memory not read: {error}")
        return found or None
    return found


def probe(cuda: bool = False) -> dict[str, Any]:
    """Run the probe: NVML first, then nvidia-smi, then report that neither answered;
    ``cuda``: also read the memory CUDA reports."""
    errors: list[str] = []
    host = read_host()
    result = probe_nvml(host, errors)
    if result is None:
        result = probe_smi(host, errors)
    if result is None:
        result = build_none(host, errors)
    if cuda:
        result["cuda_memory"] = read_cuda_memory(result["errors"])
    return result


def main() -> int:
    """Print the probe's JSON object; exit 0 whenever one was printed."""
    try:
        result = probe(cuda="--cuda" in sys.argv[1:])
    except Exception as error:
        # A bug here must still reach the operator as data, not as a traceback on stderr.
        result = build_none(host_facts(None, None),
                           [f"probe failed: {type(error).__name__}: {error}"])
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

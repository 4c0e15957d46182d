"""The deploy preflight's questions of a probe reading: is there room for the engine, and
who else uses the GPUs?"""

from __future__ import annotations

from collections.abc import Collection

from servefleet.core.gpu.inventory_check import Mismatch
from servefleet.core.gpu.probe import GIB, GpuProbeResult


def free_memory_check(result: GpuProbeResult, utilization: float, unified: bool, *,
                      ignore_pids: Collection[int] = ()) -> str | None:
    """Will vLLM start with ``--gpu-memory-utilization utilization``? None when it will,
    else one line saying which GPU is short and by how much.

    vLLM refuses to start when free memory is below ``total × utilization`` ("Free memory on
    device … is less than desired GPU memory utilization", ``vllm/v1/worker/utils.py
    request_memory()``). On unified memory (GB10) the pool is the host's, so MemTotal and
    MemAvailable stand in for total and free. Memory held by ``ignore_pids`` (the previous
    engine the rollout stops first) counts as free on discrete GPUs; on unified memory it is
    not accounted per process, so it cannot be credited.
    """
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization}")
    if result.source == "none" or not result.gpus:
        return "GPU memory could not be read: " + ("; ".join(result.errors) or "no GPUs found")
    problems = []
    if unified:
        first = result.gpus[0]
        # Only where the device has no figures of its own is the host's memory the pool.
        total, free = result.gpu_memory(first) if first.memory_source == "device" else (
            result.host.mem_total_bytes, result.host.mem_available_bytes)
        if total is None or free is None:
            return "unified memory: host memory (/proc/meminfo) could not be read"
        need = total * utilization
        if free < need:
            problems.append(
                f"unified memory: {free / GIB:.1f} GiB available of {total / GIB:.1f} GiB, "
                f"utilization {utilization:g} needs {need / GIB:.1f} GiB; lower "
                "gpu_memory_utilization or free host memory (page cache, other containers)")
    else:
        for gpu in result.gpus:
            total, free = result.gpu_memory(gpu)
            if total is None or free is None:
                problems.append(f"GPU {gpu.index}: memory could not be read")
                continue
            free += sum(p.used_memory_bytes or 0 for p in gpu.processes if p.pid in ignore_pids)
            need = total * utilization
            if free < need:
                problems.append(
                    f"GPU {gpu.index} ({gpu.name}): {free / GIB:.1f} GiB free of "
                    f"{total / GIB:.1f} GiB, utilization {utilization:g} needs "
                    f"{need / GIB:.1f} GiB; lower gpu_memory_utilization or stop the other "
                    "GPU processes")
    return "; ".join(problems) or None


def foreign_processes(result: GpuProbeResult, own_pids: Collection[int] = ()) -> list[Mismatch]:
    """One warning per GPU process that is not the deployment's own."""
    found = []
    for gpu in result.gpus:
        for proc in gpu.processes:
            if proc.pid in own_pids:
                continue
            used = (f", {proc.used_memory_bytes / GIB:.1f} GiB"
                    if proc.used_memory_bytes is not None else "")
            found.append(Mismatch(
                field=f"gpus[{gpu.index}].processes", expected=None,
                observed=f"{proc.pid} {proc.name or '?'}", severity="warning",
                message=f"GPU {gpu.index} is used by another process: pid {proc.pid} "
                        f"({proc.name or 'unknown'}{used})",
            ))
    return found

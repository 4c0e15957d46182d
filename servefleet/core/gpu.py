"""What a node's GPUs look like, as the GPU probe read them, and how that compares.

The probe script (``servefleet/adapters/gpu_probe/probe_script.py``) runs on the node and
prints one JSON object; :func:`parse_probe_json` turns it into a :class:`GpuProbeResult`.
The nvidia-smi parsers here are the typed twins of the script's own (the script must stay
self-contained); tests feed both the same outputs.

:func:`compare_with_inventory` lists how the reading differs from what the inventory says
(:class:`ExpectedGpuFacts`); :func:`free_memory_check` and :func:`foreign_processes` are the
deploy preflight's questions.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MIB = 1024 * 1024
GIB = 1024 * MIB

DISCRETE_MEMORY_TOLERANCE = 0.03
"""Relative slack between nominal and reported device memory. Reported totals sit a little
under the datasheet figure (H200 "141 GB" reads 140.4 GiB, RTX 5090 "32 GB" 31.8 GiB,
H100 "80 GB" 79.6 GiB); 3 % absorbs that and still catches a 40 GB card listed as 48."""

UNIFIED_MEMORY_TOLERANCE = 0.10
"""Slack for unified-memory pools, compared against the host's MemTotal: "128 GB" of LPDDR5x
is 128e9 bytes (119.2 GiB) and firmware reserves part of it before Linux counts it."""


class _Model(BaseModel):
    # Same conventions as every servefleet model; kept local so the inventory models may
    # import this module without an import cycle.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


# --------------------------------------------------------------------------- probe result


class ProbedProcess(_Model):
    """A process holding a CUDA context on the GPU."""

    pid: int
    """Process id on the node (host PID namespace)."""
    name: str | None = None
    """Executable path or name; None when the node would not tell."""
    used_memory_bytes: int | None = None
    """Device memory the process holds; None where the driver does not account it
    (unified memory, some containers)."""


class MigMode(_Model):
    """Multi-Instance GPU mode; None when the GPU has no MIG or the source did not say."""

    current: bool | None = None
    """MIG enabled now."""
    pending: bool | None = None
    """MIG enabled after the next GPU reset (NVML only; nvidia-smi's query is not asked)."""


class ProbedGpu(_Model):
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


class HostFacts(_Model):
    """The node itself, read next to the GPUs."""

    arch: str | None = None
    """``uname -m`` (``x86_64``, ``aarch64``)."""
    mem_total_bytes: int | None = None
    """``MemTotal`` of ``/proc/meminfo``."""
    mem_available_bytes: int | None = None
    """``MemAvailable`` of ``/proc/meminfo``: what vLLM can take on unified memory."""


class CudaMemory(_Model):
    """One device's memory as CUDA reports it (``cuMemGetInfo``, what
    ``torch.cuda.mem_get_info`` and so vLLM read)."""

    index: int
    total_bytes: int
    free_bytes: int


class GpuProbeResult(_Model):
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


# --------------------------------------------------------------------------- nvidia-smi


SMI_GPU_FIELDS = (
    "index", "name", "uuid", "driver_version", "memory.total", "memory.free", "compute_cap",
    "persistence_mode", "mig.mode.current",
)
"""Columns the probe asks ``nvidia-smi --query-gpu`` for, in order."""
SMI_APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
"""Columns the probe asks ``nvidia-smi --query-compute-apps`` for, in order."""


class SmiGpuRow(_Model):
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


class SmiComputeApp(_Model):
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


# --------------------------------------------------------------------------- comparison


class ExpectedGpu(_Model):
    """One kind of GPU the inventory says the node has."""

    name: str
    """Product name; matches when its words appear in order in the reported name, so
    ``NVIDIA H100`` matches ``NVIDIA H100 80GB HBM3`` and ``RTX 5090`` matches
    ``NVIDIA GeForce RTX 5090``."""
    count: int = Field(1, ge=1)
    """How many such GPUs."""
    memory_gib: float = Field(gt=0)
    """Nominal memory per GPU in GiB; for unified memory, the shared pool."""
    cuda_memory_gib: float | None = None
    """Memory per GPU as CUDA reports it (``Gpu.cuda_memory_gib``); None: not set."""
    unified_memory: bool = False
    """CPU and GPU share the host's memory (GB10)."""
    compute_capability: str
    """``major.minor``, e.g. ``12.1``."""


class ExpectedGpuFacts(_Model):
    """What the inventory says about a node's GPUs, driver and architecture."""

    gpus: tuple[ExpectedGpu, ...] = ()
    """GPU kinds; every reported GPU must belong to one of them."""
    driver_version: str | None = None
    """Driver version or a leading part of it: ``580.142`` matches ``580.142`` and
    ``580.142.07`` (whole dot-separated parts, so not ``580.1420``); None skips the check."""
    cuda_version: str | None = None
    """CUDA driver version, matched the same way (``13`` matches ``13.0``)."""
    arch: str | None = None
    """``x86_64`` or ``aarch64`` (``amd64`` / ``arm64`` accepted as aliases)."""


class Mismatch(_Model):
    """One way the node differs from the inventory or from what a deploy needs."""

    field: str
    """Where, e.g. ``driver_version`` or ``gpus[0].memory_gib``."""
    expected: str | None
    """The inventory's value, as text."""
    observed: str | None
    """What the probe read, as text; None when it could not be read."""
    severity: Literal["error", "warning"]
    """``error`` fails the check; ``warning`` is reported only."""
    message: str
    """One line for the operator: what differs and what to do."""


_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def version_matches(expected: str, observed: str) -> bool:
    """True when ``expected``'s dot-separated parts equal the first parts of ``observed``."""
    want = expected.strip().split(".")
    have = observed.strip().split(".")
    return have[: len(want)] == want


def gpu_name_matches(expected: str, observed: str) -> bool:
    """True when ``expected``'s words appear, consecutively and in order, in ``observed``
    (case-insensitive)."""
    want = expected.lower().split()
    have = observed.lower().split()
    return bool(want) and any(
        have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1)
    )


def _check_memory(result: GpuProbeResult, gpu: ProbedGpu, want: ExpectedGpu, field: str,
                  discrete_tolerance: float, unified_tolerance: float) -> list[Mismatch]:
    if want.unified_memory and gpu.memory_source == "host":
        # NVML answered "Not Supported" (GB10): the pool is the host's memory.
        total, tolerance, what = result.host.mem_total_bytes, unified_tolerance, "host MemTotal"
    elif want.unified_memory:
        # The device reports its pool itself; still the unified pool, with its slack.
        total, tolerance, what = gpu.memory_total_bytes, unified_tolerance, "unified memory"
    else:
        total, tolerance, what = gpu.memory_total_bytes, discrete_tolerance, "device memory"
    found: list[Mismatch] = []
    if not want.unified_memory and gpu.memory_source == "host":
        found.append(Mismatch(
            field=f"{field}.unified_memory", expected="false", observed="true",
            severity="warning",
            message=(f"GPU {gpu.index} ({gpu.name}) reports no device memory, as unified-memory "
                     "GPUs do; set unified_memory: true in the inventory if that is right"),
        ))
    if total is None:
        found.append(Mismatch(
            field=f"{field}.memory_gib", expected=f"{want.memory_gib:g}", observed=None,
            severity="warning",
            message=f"GPU {gpu.index} ({gpu.name}): {what} could not be read",
        ))
        return found
    observed_gib = total / GIB
    if abs(observed_gib - want.memory_gib) > want.memory_gib * tolerance:
        found.append(Mismatch(
            field=f"{field}.memory_gib", expected=f"{want.memory_gib:g}",
            observed=f"{observed_gib:.1f}", severity="error",
            message=(f"GPU {gpu.index} ({gpu.name}): {what} is {observed_gib:.1f} GiB, the "
                     f"inventory says {want.memory_gib:g} GiB (±{tolerance:.0%}); fix memory_gib "
                     "or check the hardware"),
        ))
    return found


def compare_with_inventory(
    result: GpuProbeResult,
    expected: ExpectedGpuFacts,
    *,
    discrete_tolerance: float = DISCRETE_MEMORY_TOLERANCE,
    unified_tolerance: float = UNIFIED_MEMORY_TOLERANCE,
) -> list[Mismatch]:
    """Every way the probe reading differs from the inventory; empty when it matches.

    Arch is compared whatever the source; GPU facts only when a source answered (otherwise
    one error says the GPUs could not be read, with the probe's reasons).
    """
    found: list[Mismatch] = []
    if expected.arch is not None:
        want_arch = _ARCH_ALIASES.get(expected.arch, expected.arch)
        have_arch = result.host.arch
        if have_arch is None or _ARCH_ALIASES.get(have_arch, have_arch) != want_arch:
            found.append(Mismatch(
                field="arch", expected=expected.arch, observed=have_arch, severity="error",
                message=f"node architecture is {have_arch or 'unknown'}, the inventory says "
                        f"{expected.arch}",
            ))
    if result.source == "none":
        reasons = "; ".join(result.errors) or "no reason given"
        found.append(Mismatch(
            field="gpus", expected=", ".join(f"{g.count}x {g.name}" for g in expected.gpus),
            observed=None, severity="error",
            message=f"GPUs could not be read: {reasons}",
        ))
        return found

    for name, want_version in (("driver_version", expected.driver_version),
                               ("cuda_version", expected.cuda_version)):
        if want_version is None:
            continue
        have_version = (result.driver_version if name == "driver_version"
                        else result.cuda_driver_version)
        if have_version is None:
            found.append(Mismatch(
                field=name, expected=want_version, observed=None, severity="warning",
                message=f"{name.replace('_', ' ')} could not be read (source {result.source})",
            ))
        elif not version_matches(want_version, have_version):
            found.append(Mismatch(
                field=name, expected=want_version, observed=have_version, severity="error",
                message=f"{name.replace('_', ' ')} is {have_version}, the inventory says "
                        f"{want_version}; update the inventory after a deliberate upgrade",
            ))

    claimed: set[int] = set()
    for i, want in enumerate(expected.gpus):
        field = f"gpus[{i}]"
        matching = [g for g in result.gpus
                    if g.index not in claimed and gpu_name_matches(want.name, g.name)]
        claimed.update(g.index for g in matching)
        if len(matching) != want.count:
            found.append(Mismatch(
                field=f"{field}.count", expected=str(want.count), observed=str(len(matching)),
                severity="error",
                message=f"{len(matching)} GPU(s) named like {want.name!r} found, the inventory "
                        f"says {want.count}",
            ))
        for gpu in matching:
            if want.compute_capability != gpu.compute_capability:
                found.append(Mismatch(
                    field=f"{field}.compute_capability", expected=want.compute_capability,
                    observed=gpu.compute_capability, severity="error",
                    message=f"GPU {gpu.index} ({gpu.name}) has compute capability "
                            f"{gpu.compute_capability or 'unknown'}, the inventory says "
                            f"{want.compute_capability}",
                ))
            found.extend(_check_memory(result, gpu, want, field, discrete_tolerance,
                                       unified_tolerance))
            found.extend(_check_cuda_memory(result, gpu, want, field))
    for gpu in result.gpus:
        if gpu.index not in claimed:
            found.append(Mismatch(
                field="gpus", expected=None, observed=gpu.name, severity="error",
                message=f"GPU {gpu.index} ({gpu.name}) is not in the inventory",
            ))
    return found


CUDA_MEMORY_TOLERANCE = 0.005
"""``cuda_memory_gib`` within this share of what CUDA reports is the same figure."""


def _check_cuda_memory(result: GpuProbeResult, gpu: ProbedGpu, want: ExpectedGpu,
                       field: str) -> list[Mismatch]:
    """The memory CUDA reports against ``cuda_memory_gib``: every memory calculation of
    servefleet (planner, rules) sizes against it, so a missing or stale figure is said."""
    reading = next((c for c in result.cuda_memory or () if c.index == gpu.index), None)
    if reading is None:
        return []
    observed = reading.total_bytes / GIB
    where = f"{field}.cuda_memory_gib"
    if want.cuda_memory_gib is None:
        return [Mismatch(
            field=where, expected=None, observed=f"{observed:.2f}", severity="warning",
            message=(f"GPU {gpu.index} ({gpu.name}): CUDA reports {observed:.2f} GiB of its "
                     f"{want.memory_gib:g} GiB, which vLLM multiplies by "
                     f"gpu_memory_utilization; set cuda_memory_gib: {observed:.2f} (and "
                     "memory_source) so plans and rules size against it"))]
    if abs(observed - want.cuda_memory_gib) > want.cuda_memory_gib * CUDA_MEMORY_TOLERANCE:
        return [Mismatch(
            field=where, expected=f"{want.cuda_memory_gib:g}", observed=f"{observed:.2f}",
            severity="warning",
            message=(f"GPU {gpu.index} ({gpu.name}): CUDA reports {observed:.2f} GiB, the "
                     f"inventory says {want.cuda_memory_gib:g}; set cuda_memory_gib: "
                     f"{observed:.2f}"))]
    return []


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

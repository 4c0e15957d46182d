"""How a probe reading compares with what the inventory says about a node's GPUs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servefleet.core.gpu.probe import GIB, GpuModel, GpuProbeResult, ProbedGpu

DISCRETE_MEMORY_TOLERANCE = 0.03
"""Relative slack between nominal and reported device memory. Reported totals sit a little
under the datasheet figure (H200 "141 GB" reads 140.4 GiB, RTX 5090 "32 GB" 31.8 GiB,
H100 "80 GB" 79.6 GiB); 3 % absorbs that and still catches a 40 GB card listed as 48."""

UNIFIED_MEMORY_TOLERANCE = 0.10
"""Slack for unified-memory pools, compared against the host's MemTotal: "128 GB" of LPDDR5x
is 128e9 bytes (119.2 GiB) and firmware reserves part of it before Linux counts it."""

CUDA_MEMORY_TOLERANCE = 0.005
"""``cuda_memory_gib`` within this share of what CUDA reports is the same figure."""


class ExpectedGpu(GpuModel):
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


class ExpectedGpuFacts(GpuModel):
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


class Mismatch(GpuModel):
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

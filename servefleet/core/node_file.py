"""A node's inventory file written from what the node itself reported (``servefleet node
add``): every value read from the node carries its source as a YAML comment.

Pure: the probe's reading (:class:`~servefleet.core.gpu.GpuProbeResult`), the SSH settings
and the pinned key in, the file's text out. The caller validates the text with the same
loader ``validate`` uses before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from servefleet.core.errors import ConfigError
from servefleet.core.gpu import GpuProbeResult
from servefleet.core.gpu.probe import GIB, ProbedGpu

SOURCE_NAMES = {"nvml": "NVML", "nvidia-smi": "nvidia-smi"}
"""How a comment names the probe's source."""
ARCHES = ("x86_64", "aarch64")


@dataclass(frozen=True)
class PinnedKey:
    """The host key to pin and how the operator accepted it."""

    line: str
    """``ssh-ed25519 AAAA…``."""
    fingerprint: str
    """``SHA256:…``."""
    how: str
    """``confirmed by the operator``, ``given with --host-key``, ``accepted with --yes
    without confirmation``."""


@dataclass(frozen=True)
class NodeFileInput:
    """Everything the file says: the connection, the key, the reading, and extras."""

    name: str
    address: str
    user: str
    port: int
    identity_file: str | None
    """``None``: the SSH agent."""
    key: PinnedKey
    probe: GpuProbeResult
    day: str
    """``2026-11-29``: when the node was read."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further top-level settings (a simulated node's test-bed settings), with
    :attr:`extra_note` as their comment."""
    extra_ssh: dict[str, Any] = field(default_factory=dict)
    """Further ``ssh`` settings."""
    extra_note: str = ""


def _scalar(value: Any) -> str:
    """One YAML scalar, quoted where YAML needs it (``'12.0'`` stays a string)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("...").strip()


def _gib(value: int | float) -> float:
    return round(value / GIB, 2)


@dataclass(frozen=True)
class _GpuGroup:
    gpu: ProbedGpu
    count: int


def _groups(probe: GpuProbeResult) -> list[_GpuGroup]:
    """Identical GPUs (name, memory, compute capability) as one entry with a count."""
    groups: dict[tuple[Any, ...], _GpuGroup] = {}
    for gpu in probe.gpus:
        key = (gpu.name, probe.gpu_memory(gpu)[0], gpu.compute_capability, gpu.memory_source)
        found = groups.get(key)
        groups[key] = _GpuGroup(gpu, 1 if found is None else found.count + 1)
    return list(groups.values())


def check_reading(name: str, address: str, probe: GpuProbeResult) -> None:
    """Refuse a reading a node file cannot be written from: no GPU, an architecture the
    inventory does not know, a GPU without a compute capability or memory figure. The
    message names the node, the address, what the probe said, and the fix."""
    where = f"node add {name}: {address}"
    if not probe.gpus:
        reasons = "; ".join(probe.errors) or "no GPU listed"
        raise ConfigError(f"{where}: no GPU could be read ({reasons}); install the NVIDIA "
                          "driver (nvidia-smi) or pynvml on the node, then run again; "
                          "nothing was written")
    if probe.host.arch not in ARCHES:
        raise ConfigError(f"{where}: architecture {probe.host.arch!r} (uname -m) is not one "
                          f"servefleet deploys to ({', '.join(ARCHES)}); nothing was written")
    for gpu in probe.gpus:
        total, _free = probe.gpu_memory(gpu)
        if gpu.compute_capability is None or not total:
            raise ConfigError(f"{where}: GPU {gpu.index} ({gpu.name}) reported no "
                              f"{'compute capability' if total else 'memory'}; update the "
                              "NVIDIA driver, or write the node file by hand from "
                              "nodes/example.yaml.sample; nothing was written")


def _gpu_lines(probe: GpuProbeResult, group: _GpuGroup, source: str) -> list[str]:
    gpu = group.gpu
    total, _free = probe.gpu_memory(gpu)
    assert total is not None and gpu.compute_capability is not None  # check_reading
    unified = gpu.memory_source == "host"
    cuda = {c.index: c for c in probe.cuda_memory or ()}.get(gpu.index)
    memory_gib = _gib(total)
    if cuda is not None:
        # A unified pool read from /proc/meminfo may sit just under CUDA's own figure.
        memory_gib = max(memory_gib, _gib(cuda.total_bytes))
    memory_from = "/proc/meminfo MemTotal (unified memory: the host's pool)" if unified \
        else source
    lines = [f"  - name: {_scalar(gpu.name)}  # {source}",
             f"    count: {group.count}  # {source}",
             f"    memory_gib: {memory_gib}  # {memory_from}",
             f"    unified_memory: {_scalar(unified)}  # {source}: "
             + ("no device memory figure" if unified else "device memory of its own"),
             f"    compute_capability: {_scalar(gpu.compute_capability)}  # {source}"]
    if cuda is not None:
        lines.append(f"    cuda_memory_gib: {_gib(cuda.total_bytes)}  # CUDA cuMemGetInfo "
                     "(what vLLM sizes against)")
        if unified and not gpu.processes:
            lines.append(f"    boot_free_gib: {_gib(cuda.free_bytes)}  # CUDA cuMemGetInfo "
                         "free, no process on the GPU")
        where = source.removeprefix("from ")
        lines.append(f"    memory_source: {_scalar('CUDA on the node, ' + where)}")
    else:
        lines.append("    # cuda_memory_gib: not read (no CUDA driver library answered); a "
                     "GPU of the known-GPU table gets its figure from there when loaded")
    return lines


def render_node_file(given: NodeFileInput) -> str:
    """The node file's text: header, connection, pinned key, then the facts read, each
    with its source."""
    probe, day = given.probe, given.day
    check_reading(given.name, given.address, probe)
    source = f"from {SOURCE_NAMES.get(probe.source, probe.source)} on {day}"
    key = given.key
    lines = [
        "# yaml-language-server: $schema=../schemas/node.schema.json",
        f"# Written by `servefleet node add` on {day} from what {given.address} reported "
        "over SSH;",
        "# each value read from the node names its source. `servefleet probe "
        f"{given.name}` compares it again.",
        f"address: {_scalar(given.address)}",
        "ssh:",
        f"  user: {_scalar(given.user)}",
        f"  port: {given.port}",
    ]
    if given.identity_file is not None:
        lines.append(f"  identity_file: {_scalar(given.identity_file)}")
    else:
        lines.append("  agent: true")
    lines += [f"  {k}: {_scalar(v)}" for k, v in given.extra_ssh.items()]
    lines += [f"  # {key.fingerprint}, {key.how} on {day}",
              "  host_keys:",
              f"    - {_scalar(key.line)}",
              f"arch: {_scalar(probe.host.arch)}  # uname -m on {day}",
              "gpus:"]
    for group in _groups(probe):
        lines += _gpu_lines(probe, group, source)
    if probe.host.mem_total_bytes:
        lines.append(f"host_memory_gib: {_gib(probe.host.mem_total_bytes)}  # /proc/meminfo "
                     f"MemTotal on {day}")
    if probe.driver_version:
        lines.append(f"driver_version: {_scalar(probe.driver_version)}  # {source}")
    if probe.cuda_driver_version:
        lines.append(f"cuda_version: {_scalar(probe.cuda_driver_version)}  # {source} "
                     "(the highest CUDA the driver supports)")
    if "base_dir" not in given.extra:
        lines.append("# base_dir, hf_cache, models_dir, ports: servefleet's defaults until "
                     "set here (see nodes/example.yaml.sample)")
    if given.extra:
        lines.append(f"# {given.extra_note}")
        lines.append(yaml.safe_dump(given.extra, sort_keys=False, width=200).rstrip())
    return "\n".join(lines) + "\n"

"""The node file ``node add`` writes, from a probe's reading: a GB10's unified memory (CUDA's
own figures and what it reports free), identical GPUs counted, each value with its source,
and readings a file cannot be written from refused."""

from __future__ import annotations

import pytest
import yaml

from servefleet.core.errors import ConfigError
from servefleet.core.gpu import GpuProbeResult
from servefleet.core.gpu.probe import GIB, CudaMemory, HostFacts, ProbedGpu
from servefleet.core.models import Node
from servefleet.core.node_file import NodeFileInput, PinnedKey, render_node_file

KEY = PinnedKey("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHWrinkP5271G+hYsu19FVutAVLAaXGxtzVCSx8KdwfB",
                "SHA256:abc", "confirmed by the operator")


def given(probe: GpuProbeResult) -> NodeFileInput:
    return NodeFileInput(name="spark-1", address="192.168.1.20", user="servefleet", port=22,
                         identity_file=None, key=KEY, probe=probe, day="2026-11-29")


def loaded(text: str) -> Node:
    return Node.model_validate({"name": "spark-1", **yaml.safe_load(text)})


def test_gb10_unified_memory_from_cuda() -> None:
    probe = GpuProbeResult(
        source="nvidia-smi", driver_version="580.142", cuda_driver_version="13.0",
        gpus=(ProbedGpu(index=0, name="NVIDIA GB10", compute_capability="12.1",
                        memory_source="host"),),
        host=HostFacts(arch="aarch64", mem_total_bytes=int(119.6 * GIB),
                       mem_available_bytes=int(110 * GIB)),
        cuda_memory=(CudaMemory(index=0, total_bytes=int(121.69 * GIB),
                                free_bytes=int(101.8 * GIB)),))
    text = render_node_file(given(probe))
    gpu = loaded(text).primary_gpu
    assert (gpu.unified_memory, gpu.memory_gib, gpu.cuda_memory_gib, gpu.boot_free_gib) == (
        True, 121.69, 121.69, 101.8)
    assert "boot_free_gib: 101.8  # CUDA cuMemGetInfo free, no process on the GPU" in text
    assert "  agent: true\n" in text and "# SHA256:abc, confirmed by the operator on " \
        "2026-11-29" in text


def test_identical_gpus_are_counted_once() -> None:
    gpu = {"name": "NVIDIA H200", "compute_capability": "9.0",
           "memory_total_bytes": 150_109_880_320}
    probe = GpuProbeResult(source="nvml", gpus=tuple(ProbedGpu(index=i, **gpu)
                                                     for i in range(4)),
                           host=HostFacts(arch="x86_64"))
    text = render_node_file(given(probe))
    node = loaded(text)
    assert [(g.name, g.count) for g in node.gpus] == [("NVIDIA H200", 4)]
    assert "count: 4  # from NVML on 2026-11-29" in text


@pytest.mark.parametrize(("probe", "reason"), [
    (GpuProbeResult(source="none", errors=("nvidia-smi not found on PATH",),
                    host=HostFacts(arch="x86_64")), "no GPU could be read"),
    (GpuProbeResult(source="nvml", gpus=(ProbedGpu(index=0, name="X", compute_capability="9.0",
                                                   memory_total_bytes=GIB),),
                    host=HostFacts(arch="ppc64le")), "architecture 'ppc64le'"),
])
def test_unusable_readings_are_refused(probe: GpuProbeResult, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as error:
        render_node_file(given(probe))
    assert "node add spark-1: 192.168.1.20" in str(error.value)
    assert "nothing was written" in str(error.value)

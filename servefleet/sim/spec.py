"""What a simulated node is: its name, its address slot and the GPU it pretends to have.

The default fleet mirrors the reference fleet of the operator's notes: two DGX Spark (GB10,
128 GiB unified memory) and one RTX 5090 desktop (32 GiB). Every simulated node runs on this
machine's CPU, so its inventory states this machine's architecture (``uname -m``): a drift
check reads it for real, and GB10's aarch64 cannot be imitated without emulation.
"""

from __future__ import annotations

import platform
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field

HOST_ARCH = cast(Literal["x86_64", "aarch64"],
                 {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(),
                                                          platform.machine().lower()))
"""The CPU architecture of this machine, which every simulated node shares."""

MAX_NODES = 250
"""Node addresses are 10.77.<index>.2, so the index must fit one octet (1-254)."""


class SimGpu(BaseModel):
    """The GPU a simulated node reports (through the stand-in ``nvidia-smi`` and engine)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Device name as NVML spells it, e.g. ``NVIDIA GB10``."""
    memory_gib: int = Field(gt=0)
    """Memory per device in GiB; for a unified-memory device the shared pool."""
    unified_memory: bool
    """CPU and GPU share one memory pool (GB10)."""
    compute_capability: str
    """``major.minor``, e.g. ``12.1``."""
    cuda_memory_gib: float | None = None
    """Memory as CUDA reports it on the real GPU (written to the inventory, so plans size
    as on the real node)."""
    boot_free_gib: float | None = None
    """The most the real node frees at boot (written to the inventory)."""
    memory_source: str | None = None
    """Where the two figures above come from."""


class NodeSpec(BaseModel):
    """One simulated node as ``sim up`` starts it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Node name; also the inventory file name and part of the network namespace name."""
    index: int = Field(ge=1, le=MAX_NODES)
    """Address slot: the node lives at 10.77.<index>.2, its host side at 10.77.<index>.1."""
    arch: Literal["x86_64", "aarch64"]
    """CPU architecture written into the inventory (the processes run on this machine's)."""
    gpu: SimGpu
    """The single GPU kind this node pretends to have."""
    host_memory_gib: int = Field(gt=0)
    """System memory written into the inventory."""
    driver_version: str = "580.142"
    """NVIDIA driver version the stand-in ``nvidia-smi`` reports."""
    cuda_version: str = "13.0"
    """CUDA driver version the stand-in ``nvidia-smi`` reports."""
    docker: bool = True
    """Start a Docker Engine on the node; sshd-only nodes serve SSH benchmarks."""

    @property
    def netns(self) -> str:
        """Name of the node's network namespace (``ip netns``)."""
        return f"sfsim-{self.name}"

    @property
    def host_veth(self) -> str:
        """Host side of the node's veth pair (at most 15 characters, a kernel limit)."""
        return f"sfsim{self.index}"

    @property
    def address(self) -> str:
        """The node's own IP address, inside its namespace."""
        return f"10.77.{self.index}.2"

    @property
    def host_address(self) -> str:
        """The host side of the point-to-point link the node is reached through."""
        return f"10.77.{self.index}.1"


GB10 = SimGpu(name="NVIDIA GB10", memory_gib=128, unified_memory=True, compute_capability="12.1",
              cuda_memory_gib=121.69, boot_free_gib=102.2,
              memory_source="a real GB10, as nodes/dgx-spark-1.yaml states it")
"""DGX Spark's GPU: Grace Blackwell, 128 GiB LPDDR5X shared with the CPU, SM 12.1."""
RTX_5090 = SimGpu(name="NVIDIA GeForce RTX 5090", memory_gib=32, unified_memory=False,
                  compute_capability="12.0", cuda_memory_gib=31.37,
                  memory_source="a real RTX 5090, as nodes/rtx5090.yaml states it")
"""GeForce RTX 5090: 32 GiB GDDR7, SM 12.0."""


def reference_fleet(*, docker: bool = True) -> list[NodeSpec]:
    """The three nodes of the reference fleet, in address order."""
    return [
        NodeSpec(name="sim-spark-1", index=1, arch=HOST_ARCH, gpu=GB10, host_memory_gib=128,
                 docker=docker),
        NodeSpec(name="sim-spark-2", index=2, arch=HOST_ARCH, gpu=GB10, host_memory_gib=128,
                 docker=docker),
        NodeSpec(name="sim-5090", index=3, arch=HOST_ARCH, gpu=RTX_5090, host_memory_gib=64,
                 docker=docker),
    ]


def fleet_specs(nodes: int = 3, *, sshd_only: bool = False) -> list[NodeSpec]:
    """``nodes`` nodes: the reference fleet first, then ``sim-node-K`` (K = 4…) shaped like
    the RTX 5090 node. ``sshd_only`` starts no Docker Engine on any of them."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"--nodes must be between 1 and {MAX_NODES}, not {nodes}")
    specs = reference_fleet(docker=not sshd_only)[:nodes]
    for index in range(len(specs) + 1, nodes + 1):
        specs.append(NodeSpec(name=f"sim-node-{index}", index=index, arch=HOST_ARCH,
                              gpu=RTX_5090, host_memory_gib=64, docker=not sshd_only))
    return specs

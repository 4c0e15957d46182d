"""GPUs whose memory, as CUDA reports it, is known from a real reading: what a node file that
gives only the box's figure is planned from.

A GB10 is sold as 128 GB and CUDA reports 121.69 GiB of it; an RTX 5090 is sold as 32 GB and
CUDA reports 31.37 GiB. vLLM multiplies ``gpu_memory_utilization`` by CUDA's figure, so a
node file written with the box's figure over-plans every KV pool by 4–8 % (and misses the
GB10's unified memory, which changes the reserve). Each row names the reading it comes from;
a GPU without a real reading is not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

TABLE_SOURCE_PREFIX = "known-GPU table: "
"""How ``memory_source`` starts when the figures were filled from :data:`KNOWN_GPUS`."""


@dataclass(frozen=True)
class KnownGpu:
    """What CUDA reports for one GPU model, and where that was read."""

    cuda_memory_gib: float
    """``torch.cuda.mem_get_info()`` total, in GiB."""
    unified_memory: bool
    boot_free_gib: float | None
    """The most CUDA reports free when an engine starts (unified memory); ``None``: not
    limited beyond the total."""
    marketing_gib: float
    """The figure on the box (GB), which operators often write as ``memory_gib``."""
    source: str


KNOWN_GPUS: dict[str, KnownGpu] = {
    "NVIDIA GB10": KnownGpu(
        cuda_memory_gib=121.69, unified_memory=True, boot_free_gib=101.3, marketing_gib=128,
        source="GB10 boots in MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47: 121.69 GiB "
               "total, 101.3-102.2 GiB free at boot (the lower figure kept)"),
    "NVIDIA GeForce RTX 5090": KnownGpu(
        cuda_memory_gib=31.37, unified_memory=False, boot_free_gib=None, marketing_gib=32,
        source="vLLM's own log on an RTX 5090, total_gpu_memory (31.37GiB) "
               "(vllm-project/vllm#14452)"),
    "NVIDIA H200": KnownGpu(
        cuda_memory_gib=139.80, unified_memory=False, boot_free_gib=None, marketing_gib=141,
        source="torch.cuda.mem_get_info() on an H200, driver 580.159.04, 2026-11-28: "
               "150,109,880,320 bytes"),
}
"""By NVML's device name."""


def known_gpu(name: str) -> KnownGpu | None:
    """The row for an NVML device name (case and spacing as written are forgiven)."""
    wanted = " ".join(name.split()).casefold()
    for key, row in KNOWN_GPUS.items():
        if key.casefold() == wanted:
            return row
    return None

"""How ``servefleet doctor`` checks the NVIDIA runtime on a simulated node.

A simulated node has no GPU and its dockerd no NVIDIA runtime, so ``docker run --gpus all``
cannot work there. Its one-shot container runs the stand-in image instead, without
``--gpus``, and asks the node's stand-in ``nvidia-smi`` (:mod:`.nvidia_smi`, mounted with
the node's ``gpu.json``): the check still starts a real container on the node's own Docker
Engine (a stopped daemon or a missing image fails it, as on a real node), and the report
says what differs.
"""

from __future__ import annotations

from pathlib import Path

from servefleet.core.doctor import NVIDIA_SMI_QUERY, GpuContainer
from servefleet.core.models import Node
from servefleet.sim import image
from servefleet.sim.nvidia_smi import GPU_JSON_ENV

NVIDIA_SMI = Path(__file__).with_name("nvidia_smi.py")
IMAGE = image.image_name("vllm") + ":latest"
"""Every simulated node has the stand-in images (they hold python3)."""
WHAT = ("sim node, no GPU: the stand-in nvidia-smi in a one-shot container without --gpus")
"""How the report names the check on a simulated node."""


def gpu_container(node: Node) -> GpuContainer | None:
    """The one-shot container of a simulated node; ``None`` for a real node (it gets
    :class:`GpuContainer`'s ``--gpus all`` with the real ``nvidia-smi``)."""
    if node.sim is None:
        return None
    return GpuContainer(
        options=("--pull", "never", "--network", "none", "--entrypoint", "python3",
                 "--volume", f"{node.sim.control_dir}:/standin-control:ro",
                 "--volume", f"{NVIDIA_SMI}:/opt/servefleet-sim/nvidia_smi.py:ro",
                 "--env", f"{GPU_JSON_ENV}=/standin-control/gpu.json"),
        image=IMAGE,
        command=("-I", "-S", "/opt/servefleet-sim/nvidia_smi.py", *NVIDIA_SMI_QUERY),
        what=WHAT,
    )

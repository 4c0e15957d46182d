"""What a node's GPUs look like, as the GPU probe read them, and how that compares.

The probe script (``servefleet/adapters/gpu_probe/probe_script.py``) runs on the node and
prints one JSON object; :func:`parse_probe_json` turns it into a :class:`GpuProbeResult`.
The nvidia-smi parsers here type the dicts of the script's own (:mod:`.probe_parse`, the
pure first part of the program the node runs).

:func:`compare_with_inventory` lists how the reading differs from what the inventory says
(:class:`ExpectedGpuFacts`); :func:`free_memory_check` and :func:`foreign_processes` are the
deploy preflight's questions.

* :mod:`~servefleet.core.gpu.probe`: the probe's result.
* :mod:`~servefleet.core.gpu.probe_parse`: the probe's pure part (the node runs it).
* :mod:`~servefleet.core.gpu.smi`: nvidia-smi's outputs, parsed and typed.
* :mod:`~servefleet.core.gpu.inventory_check`: the reading against the inventory.
* :mod:`~servefleet.core.gpu.preflight`: the deploy preflight's questions.
"""

from servefleet.core.gpu.inventory_check import (
    CUDA_MEMORY_TOLERANCE,
    DISCRETE_MEMORY_TOLERANCE,
    UNIFIED_MEMORY_TOLERANCE,
    ExpectedGpu,
    ExpectedGpuFacts,
    Mismatch,
    compare_with_inventory,
    gpu_name_matches,
    version_matches,
)
from servefleet.core.gpu.preflight import foreign_processes, free_memory_check
from servefleet.core.gpu.probe import (
    GIB,
    MIB,
    CudaMemory,
    GpuProbeResult,
    HostFacts,
    MigMode,
    ProbedGpu,
    ProbedProcess,
    parse_probe_json,
)
from servefleet.core.gpu.smi import (
    SMI_APP_FIELDS,
    SMI_GPU_FIELDS,
    SmiComputeApp,
    SmiGpuRow,
    cuda_version_from_nvml,
    parse_meminfo,
    parse_smi_apps_csv,
    parse_smi_gpus_csv,
    parse_smi_q,
    result_from_nvidia_smi,
    smi_value,
)

__all__ = [
    "CUDA_MEMORY_TOLERANCE",
    "DISCRETE_MEMORY_TOLERANCE",
    "GIB",
    "MIB",
    "SMI_APP_FIELDS",
    "SMI_GPU_FIELDS",
    "UNIFIED_MEMORY_TOLERANCE",
    "CudaMemory",
    "ExpectedGpu",
    "ExpectedGpuFacts",
    "GpuProbeResult",
    "HostFacts",
    "MigMode",
    "Mismatch",
    "ProbedGpu",
    "ProbedProcess",
    "SmiComputeApp",
    "SmiGpuRow",
    "compare_with_inventory",
    "cuda_version_from_nvml",
    "foreign_processes",
    "free_memory_check",
    "gpu_name_matches",
    "parse_meminfo",
    "parse_probe_json",
    "parse_smi_apps_csv",
    "parse_smi_gpus_csv",
    "parse_smi_q",
    "result_from_nvidia_smi",
    "smi_value",
    "version_matches",
]

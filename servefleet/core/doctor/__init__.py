"""``servefleet doctor``: everything a node needs, read in one round trip and judged here.

* :mod:`~servefleet.core.doctor.facts`: the doctor script's output, parsed.
* :mod:`~servefleet.core.doctor.judge`: one :class:`Check` per need, each with its fix.
"""

from servefleet.core.doctor.facts import (
    DOCTOR_END,
    DOCTOR_HEADER,
    DiskFact,
    DoctorFacts,
    parse_doctor,
)
from servefleet.core.doctor.judge import (
    DEFAULT_GPU_IMAGE,
    NVIDIA_SMI_QUERY,
    Check,
    DoctorSettings,
    GpuContainer,
    RoundTrip,
    StagedHere,
    clock_skew,
    failed,
    judge,
    line,
    placed_ports,
    ssh_failed,
    staged_weights,
)

__all__ = [
    "DEFAULT_GPU_IMAGE",
    "DOCTOR_END",
    "DOCTOR_HEADER",
    "NVIDIA_SMI_QUERY",
    "Check",
    "DiskFact",
    "DoctorFacts",
    "DoctorSettings",
    "GpuContainer",
    "RoundTrip",
    "StagedHere",
    "clock_skew",
    "failed",
    "judge",
    "line",
    "parse_doctor",
    "placed_ports",
    "ssh_failed",
    "staged_weights",
]

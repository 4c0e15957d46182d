"""What the doctor script found on a node, and the parser of its output.

The script (:mod:`servefleet.adapters.doctor`) prints ``key=value`` lines, a key repeated
where there are several values (``gpu_out=``, ``disk=``, ``port=``). Its first lines are the
deploy preflight's (``docker_version=``, ``compose=`` …), read by the one preflight parser,
:func:`servefleet.core.observed.parse_preflight`; the rest are the doctor's own.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servefleet.core.models.common import StrictModel
from servefleet.core.observed import PreflightFacts, parse_preflight

DOCTOR_HEADER = "@@doctor"
"""First line of the script's output."""
DOCTOR_END = "@@doctor-end"
"""Last line: output without it was cut short."""

DiskKind = Literal["images", "hf_cache", "models"]
"""What a folder's free space is for: Docker images, the Hugging Face cache, local models."""


class DiskFact(StrictModel):
    """Free space on the file system that holds one folder of the node."""

    kind: DiskKind
    """What the folder is for."""
    path: str
    """The folder as the inventory (or Docker) names it."""
    checked: str | None = None
    """The folder ``df`` read: ``path`` or, while it does not exist yet, its nearest
    existing parent; ``None`` when ``df`` failed."""
    free_bytes: int | None = None
    """Free space for an unprivileged writer (``df``'s *Available*)."""


class DoctorFacts(StrictModel):
    """Everything the doctor script found on a node, in one round trip."""

    complete: bool
    """The output ended with :data:`DOCTOR_END` (nothing was cut short)."""
    preflight: PreflightFacts
    """Docker and Compose, as the deploy preflight reads them."""
    docker_missing: bool = False
    """No ``docker`` command on the node's ``PATH``."""
    user: str | None = None
    """The SSH user (``id -un``)."""
    uid: int | None = None
    """Its uid."""
    groups: tuple[str, ...] = ()
    """Its groups (``id -nG``)."""
    python3: str | None = None
    """Version of the ``python3`` on the SSH user's ``PATH`` (``3.12.3``); ``None`` when
    there is none. servefleet reads the node and probes its GPUs with it."""
    docker_root: str | None = None
    """Docker's root dir (``docker info``), where images live; ``None`` when the daemon did
    not answer."""
    runtimes: tuple[str, ...] = ()
    """Container runtimes the daemon knows (``nvidia`` when the toolkit registered one)."""
    gpu_exit: int | None = None
    """Exit status of the one-shot GPU container; ``None`` when it was not run."""
    gpu_output: tuple[str, ...] = ()
    """Its output (stdout and stderr), the last lines."""
    disks: tuple[DiskFact, ...] = ()
    """Free space under Docker's root dir, the HF cache and the models folder."""
    base_writable: Literal["yes", "creatable", "no"] | None = None
    """``base_dir`` accepts a new file (``yes``); does not exist yet but its nearest
    existing parent is writable (``creatable``); neither (``no``)."""
    base_error: str | None = None
    """Why a file could not be written there."""
    base_parent: str | None = None
    """The nearest existing parent of a missing ``base_dir``."""
    ports: dict[int, bool | None] = Field(default_factory=dict)
    """Port → something listens on it (``None``: could not be told)."""
    running: dict[str, int | None] = Field(default_factory=dict)
    """servefleet deployments with a running container → the port their current release's
    manifest names (``None``: none found)."""
    fast_link_state: str | None = None
    """``operstate`` of the fast link's interface; ``missing`` when there is none."""
    fast_link_addresses: tuple[str, ...] = ()
    """Its addresses as ``ip -o addr`` prints them (``10.0.0.4/24``)."""
    node_time_start: float | None = None
    """The node's clock (``date +%s.%N``) when the script started."""
    node_time_end: float | None = None
    """The node's clock when the script ended."""


def _float(value: str) -> float | None:
    # A ``date`` without ``%N`` (busybox) prints it as it is: whole seconds, then.
    value = value.removesuffix(".%N").removesuffix(".N")
    try:
        return float(value)
    except ValueError:
        return None


def _int(value: str) -> int | None:
    return int(value) if value.lstrip("-").isdigit() else None


def _disk(value: str) -> DiskFact | None:
    """``<kind>\\t<path>\\t<free KiB>\\t<checked>`` (the last two empty when df failed)."""
    parts = value.split("\t")
    if len(parts) != 4 or parts[0] not in ("images", "hf_cache", "models"):
        return None
    kind, path, free, checked = parts
    return DiskFact(kind=kind, path=path, checked=checked or None,
                    free_bytes=int(free) * 1024 if free.isdigit() else None)


def parse_doctor(text: str) -> DoctorFacts:
    """Parse the doctor script's output; unknown keys are ignored, so an older or newer
    script still parses."""
    lines = text.splitlines()
    values: dict[str, str] = {}
    gpu_output: list[str] = []
    disks: list[DiskFact] = []
    ports: dict[int, bool | None] = {}
    running: dict[str, int | None] = {}
    addresses: list[str] = []
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "gpu_out":
            gpu_output.append(value)
        elif key == "disk":
            disk = _disk(value)
            if disk is not None:
                disks.append(disk)
        elif key == "port":
            number, _, state = value.partition(" ")
            if number.isdigit():
                ports[int(number)] = {"yes": True, "no": False}.get(state)
        elif key == "running":
            deployment, _, number = value.partition(" ")
            if deployment:
                running[deployment] = int(number) if number.isdigit() else None
        elif key == "fast_link_addr":
            addresses.append(value.strip())
        else:
            values[key] = value.strip()
    writable = values.get("base_writable")
    return DoctorFacts(
        complete=bool(lines) and lines[-1].strip() == DOCTOR_END,
        preflight=parse_preflight(text),
        docker_missing=values.get("docker_missing") == "yes",
        user=values.get("user") or None,
        uid=_int(values.get("uid", "")),
        groups=tuple(values.get("groups", "").split()),
        python3=values.get("python3") or None,
        docker_root=values.get("docker_root") or None,
        runtimes=tuple(values.get("runtimes", "").split()),
        gpu_exit=_int(values.get("gpu_exit", "")),
        gpu_output=tuple(gpu_output),
        disks=tuple(disks),
        base_writable=writable if writable in ("yes", "creatable", "no") else None,
        base_error=values.get("base_error") or None,
        base_parent=values.get("base_parent") or None,
        ports=ports,
        running=running,
        fast_link_state=values.get("fast_link_state") or None,
        fast_link_addresses=tuple(a for a in addresses if a),
        node_time_start=_float(values.get("date_start", "")),
        node_time_end=_float(values.get("date_end", "")),
    )

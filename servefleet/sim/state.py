"""``state.json``: exactly what ``sim up`` started, so ``down`` stops that and nothing else.

Written after every step of ``up`` (atomically, by rename), so even an ``up`` that failed
half-way leaves a record ``down`` can clean up from. A file lock serialises ``up``, ``down``
and ``status``; leases let several test sessions share one running fleet.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict, Field

from servefleet.core.errors import SimError
from servefleet.sim import procs
from servefleet.sim.layout import SimLayout
from servefleet.sim.spec import NodeSpec

STATE_VERSION = 1


class NodeState(BaseModel):
    """What runs for one node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: NodeSpec
    """The node as it was started."""
    netns: str
    """Network namespace created for it."""
    netns_inode: int | None = None
    """Inode of that namespace: tells it from a namespace of the same name made later."""
    host_veth: str
    """Host side of its veth pair."""
    sshd: procs.ProcessRecord | None = None
    """Its sshd."""
    containerd: procs.ProcessRecord | None = None
    """Its containerd (Docker nodes)."""
    dockerd: procs.ProcessRecord | None = None
    """Its dockerd (Docker nodes)."""
    image_store: str | None = None
    """Key of the image store its Docker data root was linked from."""
    recipe: int = 1
    """Version of the way the node was set up (``servefleet.sim.fleet.NODE_RECIPE``)."""


class FleetState(BaseModel):
    """The whole fleet."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = STATE_VERSION
    """Format version of this file."""
    storage_driver: str | None = None
    """Docker storage driver of every node (overlay2 or vfs)."""
    image_store: str | None = None
    """Key of the current image store."""
    base_sha256: str | None = None
    """sha256 of the base root tar the image store was made from."""
    rootfs_name: str | None = None
    """File name of that tar (names its recipe)."""
    nodes: dict[str, NodeState] = Field(default_factory=dict)
    """Nodes by name."""
    inventory_files: list[str] = Field(default_factory=list)
    """Inventory files ``up`` wrote (removed by ``down``)."""


def load(layout: SimLayout) -> FleetState:
    """The recorded state; empty when nothing was started."""
    try:
        raw = layout.state_file.read_text()
    except FileNotFoundError:
        return FleetState()
    try:
        return FleetState.model_validate(json.loads(raw))
    except ValueError as error:
        raise SimError(f"{layout.state_file} is not a state file this version understands "
                       f"({error.__class__.__name__}); stop what it names by hand, then "
                       "delete it") from None


def save(layout: SimLayout, state: FleetState) -> None:
    """Write the state atomically; removes the file when nothing is recorded."""
    layout.root.mkdir(parents=True, exist_ok=True)
    if not state.nodes and not state.inventory_files:
        layout.state_file.unlink(missing_ok=True)
        return
    partial = layout.state_file.with_suffix(f".json.{os.getpid()}")
    partial.write_text(state.model_dump_json(indent=1) + "\n")
    partial.rename(layout.state_file)


@contextlib.contextmanager
def locked(layout: SimLayout) -> Iterator[None]:
    """Hold the fleet's lock (blocking) for the duration of the block."""
    layout.root.mkdir(parents=True, exist_ok=True)
    with open(layout.lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def add_lease(layout: SimLayout, pid: int) -> None:
    """Record that process ``pid`` uses the fleet."""
    layout.leases_dir.mkdir(parents=True, exist_ok=True)
    started = procs.start_time_of(pid)
    (layout.leases_dir / str(pid)).write_text(f"{started}\n")


def drop_lease(layout: SimLayout, pid: int) -> list[int]:
    """Forget the lease of ``pid``; returns the pids of leases still held by live processes
    (stale leases of dead processes are removed)."""
    (layout.leases_dir / str(pid)).unlink(missing_ok=True)
    return live_leases(layout)


def live_leases(layout: SimLayout) -> list[int]:
    """Pids of the live processes holding a lease (stale leases are removed)."""
    live: list[int] = []
    if not layout.leases_dir.is_dir():
        return live
    for lease in layout.leases_dir.iterdir():
        try:
            holder = int(lease.name)
            started = int(lease.read_text().strip())
        except ValueError:
            lease.unlink(missing_ok=True)
            continue
        if procs.start_time_of(holder) == started:
            live.append(holder)
        else:
            lease.unlink(missing_ok=True)
    return live

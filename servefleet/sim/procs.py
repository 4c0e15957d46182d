"""Starting and stopping the fleet's daemons by pid, without ever signalling a stranger.

A pid alone can be reused after its process died; every recorded process therefore also
carries its start time (``/proc/<pid>/stat`` field 22), and a pid whose start time differs
is treated as gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from servefleet.core.errors import SimError
from servefleet.sim.programs import find_program


class ProcessRecord(BaseModel):
    """A process the fleet started: enough to find it again and nothing else."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pid: int
    """Process id."""
    start_time: int
    """Start time in clock ticks since boot; tells a live process from a reused pid."""
    argv0: str
    """The program, for status output."""


def start_time_of(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = raw[raw.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); field 22 (starttime) is fields[19]. A zombie has exited.
    if fields[0] == "Z":
        return None
    return int(fields[19])


def record_of(pid: int, argv0: str) -> ProcessRecord:
    """A record of the running process ``pid``."""
    started = start_time_of(pid)
    if started is None:
        raise SimError(f"{argv0} (pid {pid}) exited right after it started")
    return ProcessRecord(pid=pid, start_time=started, argv0=argv0)


def is_alive(record: ProcessRecord) -> bool:
    """Whether the recorded process still runs (and the pid was not reused)."""
    return start_time_of(record.pid) == record.start_time


def spawn(argv: Sequence[str], *, log: Path, netns: str | None = None,
          env: dict[str, str] | None = None) -> ProcessRecord:
    """Start ``argv`` detached from us (own session, stdin from /dev/null, output to
    ``log``), inside the network namespace ``netns`` when given.

    ``nsenter --net`` only switches the network namespace and then executes the program in
    place, so the pid returned is the daemon's own. (``ip netns exec`` would also remount
    /sys, which breaks dockerd's cgroup detection.)
    """
    full = list(argv)
    if netns is not None:
        full = [find_program("nsenter"), f"--net=/var/run/netns/{netns}", "--", *full]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out, open(os.devnull, "rb") as devnull:
        try:
            process = subprocess.Popen(full, stdin=devnull, stdout=out, stderr=out,
                                       start_new_session=True, close_fds=True, env=env)
        except OSError as error:
            raise SimError(f"cannot start {argv[0]}: {error}") from None
    # The child is reaped by init once we exit; poll() here only catches an instant failure.
    if process.poll() is not None:
        raise SimError(f"{argv[0]} exited at once with status {process.returncode}; "
                       f"see {log}")
    return record_of(process.pid, Path(argv[0]).name)


def _signal(record: ProcessRecord, sig: int, *, group: bool) -> None:
    if not is_alive(record):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            # The daemons lead their own session (start_new_session): their per-connection
            # children (sshd) share the group and go with them.
            os.killpg(record.pid, sig)
        else:
            os.kill(record.pid, sig)


def stop(record: ProcessRecord, *, timeout: float = 10.0, group: bool = False) -> bool:
    """SIGTERM the recorded process, SIGKILL it after ``timeout`` seconds. True when it was
    running. Never signals a process whose start time does not match the record."""
    if not is_alive(record):
        return False
    _signal(record, signal.SIGTERM, group=group)
    if not wait_gone([record], timeout):
        _signal(record, signal.SIGKILL, group=group)
        wait_gone([record], 5.0)
    return True


def wait_gone(records: Sequence[ProcessRecord], timeout: float) -> bool:
    """Wait until none of ``records`` runs; True if that happened within ``timeout``.

    A daemon started by this very process stays a zombie until reaped; :func:`start_time_of`
    counts a zombie as gone, and the subprocess module reaps it on a later Popen."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if not any(is_alive(r) for r in records):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def wait_until(ready: Callable[[], bool], record: ProcessRecord, *, timeout: float,
               delay: float, max_delay: float, exited: str, late: str,
               tail: Callable[[], str]) -> None:
    """Poll ``ready`` (the pause doubling from ``delay`` up to ``max_delay``) until it holds.
    :class:`SimError` ``<exited>: <tail>`` when ``record``'s process dies first, and
    ``<late> within N s: <tail>`` after ``timeout`` seconds (``tail``: its log's end)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if not is_alive(record):
            raise SimError(f"{exited}: {tail()}")
        if time.monotonic() >= deadline:
            raise SimError(f"{late} within {timeout:.0f} s: {tail()}")
        time.sleep(delay)
        delay = min(delay * 2, max_delay)


def netns_inode(netns: str) -> int | None:
    """The inode of the named network namespace, or None when it does not exist."""
    try:
        return os.stat(f"/var/run/netns/{netns}").st_ino
    except FileNotFoundError:
        return None


def pids_in_netns(inode: int) -> list[int]:
    """Every process whose network namespace is the one with ``inode``: everything that
    runs "on" a simulated node (sshd, its sessions, dockerd, containerd, containers)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry.name}/ns/net").st_ino == inode:
                found.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def kill_netns_processes(inode: int, *, timeout: float = 5.0) -> list[int]:
    """SIGKILL what still runs in the namespace with ``inode`` (the power switch of a
    simulated node); returns the pids that were found."""
    pids = pids_in_netns(inode)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pids_in_netns(inode) and time.monotonic() < deadline:
        time.sleep(0.02)
    return pids

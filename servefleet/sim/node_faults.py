"""Faults a simulated node can suffer below the engine: its SSH link or its sshd dying, its
disk filling up. The engine's own faults (crash, hang, OOM at boot) are the stand-in's
control file (``servefleet/sim/standin/standin_engine/faults.py``).

Each fault acts on the real processes and files of the node, as it would on a machine:
``cut_ssh_sessions`` kills the per-connection sshd processes (the client sees its
connection reset mid-command, the remote command loses its session); ``stop_sshd`` takes
the daemon down with every session, and ``start_sshd`` brings it back with the same host
key; ``stop_dockerd`` stops the node's Docker Engine (as ``systemctl stop docker``: its
containers stop with it) until ``start_dockerd``; ``fill_disk`` makes a folder's file system
refuse new files (ENOSPC) until ``free_disk``. Used by the fault suite
(``bench/fault_suite.py``) and fleet tests.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
from pathlib import Path

from servefleet.core.errors import SimError
from servefleet.sim import dockerd, procs, sshd, state
from servefleet.sim.layout import SimLayout

FILLER = ".servefleet-sim-filler"
"""Folder of the files that fill a small file system (removed by :func:`free_disk`)."""


def _node_state(layout: SimLayout, name: str) -> state.NodeState:
    current = state.load(layout)
    if name not in current.nodes:
        raise SimError(f"no simulated node {name!r} is running (servefleet sim up)")
    return current.nodes[name]


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(word) for word in text.split()]


def cut_ssh_sessions(layout: SimLayout, name: str) -> int:
    """Kill every SSH connection of the node (its sshd's per-connection processes, with
    SIGKILL: no goodbye on the wire). Returns how many were cut."""
    record = _node_state(layout, name).sshd
    if record is None or not procs.is_alive(record):
        return 0
    cut = 0
    for child in _children(record.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
            cut += 1
    return cut


def stop_sshd(layout: SimLayout, name: str) -> None:
    """Take the node's sshd down with every session, as when the node drops off the
    network: the daemon stops, and so does each open connection (a session leads a process
    session of its own, so stopping the daemon alone would leave it open)."""
    with state.locked(layout):
        record = _node_state(layout, name).sshd
        if record is None or not procs.is_alive(record):
            return
        sessions = _children(record.pid)
        procs.stop(record, timeout=2.0, group=True)
        for child in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def start_sshd(layout: SimLayout, name: str) -> None:
    """Start the node's sshd again (same config, same host key) and wait until it listens."""
    with state.locked(layout):
        current = state.load(layout)
        node = current.nodes.get(name)
        if node is None:
            raise SimError(f"no simulated node {name!r} is running (servefleet sim up)")
        if node.sshd is not None and procs.is_alive(node.sshd):
            return
        files = layout.node(name)
        record = sshd.start(node.spec, files)
        nodes = {**current.nodes, name: node.model_copy(update={"sshd": record})}
        state.save(layout, current.model_copy(update={"nodes": nodes}))
    sshd.wait_ready(node.spec, files, record)


def stop_dockerd(layout: SimLayout, name: str) -> None:
    """Stop the node's dockerd and its containerd, as ``systemctl stop docker`` would: the
    daemon stops its running containers and the socket stops answering. Its data root
    (images, stopped containers) stays for :func:`start_dockerd`."""
    with state.locked(layout):
        node = _node_state(layout, name)
        for record in (node.dockerd, node.containerd):
            if record is not None and procs.is_alive(record):
                procs.stop(record, timeout=15.0)
        # dockerd leaves its network sandbox's bind mount under the exec root.
        dockerd.unmount_below(layout.node(name).docker_exec / "netns")


def start_dockerd(layout: SimLayout, name: str) -> None:
    """Start the node's containerd and dockerd again (same data root and settings) and wait
    until dockerd answers."""
    with state.locked(layout):
        current = state.load(layout)
        node = _node_state(layout, name)
        if node.dockerd is not None and procs.is_alive(node.dockerd):
            return
        files = layout.node(name)
        driver = current.storage_driver or dockerd.detect_storage_driver(layout.root)
        containerd, engine = dockerd.start_engine(
            data_root=files.docker_data, exec_root=files.docker_exec, config_dir=files.root,
            log=files.dockerd_log, storage_driver=driver, netns=node.spec.netns, name=name)
        updated = node.model_copy(update={"containerd": containerd, "dockerd": engine})
        state.save(layout, current.model_copy(update={"nodes": {**current.nodes,
                                                                 name: updated}}))
    dockerd.wait_ready(files.docker_sock, engine, name=name, log=files.dockerd_log)


def mount_small_disk(folder: Path, *, inodes: int = 4096, size_mib: int = 256) -> None:
    """Mount a tmpfs of ``inodes`` files over ``folder`` (empty or not yet there): a file
    system the suite can fill without touching the machine's own disk."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.path.ismount(folder):
        return
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,nr_inodes={inodes},"
                    "mode=0755", "servefleet-sim-disk", str(folder)],
                   check=True, capture_output=True)


def unmount_small_disk(folder: Path) -> None:
    """Undo :func:`mount_small_disk` (lazily: a container may still hold a file)."""
    if os.path.ismount(folder):
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


def fill_disk(folder: Path) -> int:
    """Fill the file system under ``folder``: first its blocks (one file written until
    ENOSPC), then its inodes (empty files until ENOSPC), so that neither a write nor a new
    file (a symlink, a rename's temporary) succeeds. Returns the files made. Only for a
    small file system of its own (:func:`mount_small_disk`)."""
    if not os.path.ismount(folder):
        raise SimError(f"{folder} is not a small file system of its own: mount one with "
                       "mount_small_disk first")
    filler = folder / FILLER
    with contextlib.suppress(FileExistsError):
        filler.mkdir()
    chunk = b"\0" * (1 << 20)
    try:
        with open(filler / "blocks", "ab") as blocks:
            while True:
                blocks.write(chunk)
                blocks.flush()
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
    count = 0
    while True:
        try:
            (filler / str(count)).touch(exist_ok=False)
        except OSError as error:
            if error.errno == errno.ENOSPC:
                return count
            raise
        count += 1


def free_disk(folder: Path) -> None:
    """Remove what :func:`fill_disk` wrote."""
    shutil.rmtree(folder / FILLER, ignore_errors=True)

"""The node lock: one rollout (deploy, rollback) at a time per node.

The lock is the folder ``<base_dir>/.servefleet-lock`` (``mkdir`` is atomic) holding an
``owner`` line: who (``user@host``), which process, since when, and what for. A second
rollout fails fast naming the holder. A lock left behind by a rollout that died is never
broken silently: the operator removes it with ``--force-unlock`` after checking.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import socket
from datetime import datetime

from servefleet.adapters import remote
from servefleet.adapters.ssh import SshTransport
from servefleet.core.errors import LockHeld, RemoteError, ServefleetError

_OWNER_RE = re.compile(r"^(?P<who>\S+) pid=(?P<pid>\d+) ")


def whoami() -> str:
    """``user@host`` of this control machine, as written into locks, manifests and audits."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def lock_owner(operation: str, now: datetime) -> str:
    """The owner line: ``user@host pid=N since=<UTC time> op=<operation>``."""
    return f"{whoami()} pid={os.getpid()} since={now.strftime('%Y-%m-%dT%H:%M:%SZ')} " \
           f"op={operation}"


def stale_hint(owner: str) -> str:
    """A hint when the holder is a process of this machine that no longer runs."""
    match = _OWNER_RE.match(owner)
    if not match or match["who"] != whoami():
        return ""
    pid = int(match["pid"])
    if pid == os.getpid():
        return " (held by this very process)"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f" (process {pid} on this machine is gone: the lock is stale)"
    except PermissionError:
        pass
    return ""


class NodeLock:
    """Hold a node's lock for the duration of a ``with`` block."""

    def __init__(self, transport: SshTransport, owner: str, *, force: bool = False) -> None:
        self.transport = transport
        self.owner = owner
        self.force = force
        self.held = False

    def acquire(self, *then: list[str]) -> str:
        """Take the lock and run ``then`` commands in the same round trip; return their
        stdout. Raises :class:`LockHeld` naming the holder."""
        node = self.transport.node
        command = remote.acquire_lock(node.base_dir, self.owner, force=self.force)
        if then:
            command = remote.sequence(command, *then)
        result = self.transport.run(command, check=False, idempotent=False,
                                    what="take the node lock")
        if result.exit_status == remote.LOCK_HELD_EXIT:
            holder = result.text().strip() or "unknown"
            raise LockHeld(
                f"{node.name}: another rollout holds the node lock: {holder}"
                f"{stale_hint(holder)}; wait for it to finish, or if it died, run again with "
                f"--force-unlock (removes {node.base_dir}/{remote.LOCK_DIR})")
        self.held = True
        if not result.ok:
            # The lock may be ours and the follow-up command failed: release, then report.
            self.release()
            tail = self.transport.mask(result.stderr.decode("utf-8", "replace")[-500:])
            raise RemoteError(node.name, "take the node lock", result.exit_status, tail)
        return result.text()

    def release(self) -> None:
        """Give the lock back (only if it is still ours); best effort."""
        if not self.held:
            return
        self.held = False
        # Unreachable now: the lock stays, and the next rollout names it as stale.
        with contextlib.suppress(ServefleetError):
            self.transport.run(remote.release_lock(self.transport.node.base_dir, self.owner),
                               check=False, what="release the node lock")

    def __enter__(self) -> NodeLock:
        if not self.held:
            self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

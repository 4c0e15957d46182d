"""The node lock: one rollout (deploy, rollback) at a time per node.

The lock is the folder ``<base_dir>/.servefleet-lock`` (``mkdir`` is atomic) holding an
``owner`` line — who (``user@host``), which process, since when, what for, and the lock's
id — and a ``state`` line the holder rewrites before every phase that changes what serves
(see :mod:`servefleet.core.lockinfo`). A second rollout fails fast naming the holder, its
phase and the lock id. A lock left behind is never broken silently: as with Terraform's
``force-unlock LOCK_ID``, the operator removes exactly that lock with
``servefleet unlock NODE LOCK_ID`` (or ``deploy --force-unlock LOCK_ID``; Pulumi:
``servefleet:forceUnlock``); a live lock with another id stays. A holder that gave up
(second signal) marks its lock ``abandoned``; the next rollout takes such a lock over. So
does a rollout from the same ``user@host`` whose holder process is provably gone (killed
with SIGKILL, a crashed or rebooted controller): no guess is involved, the process table of
this very machine says so. A holder on another machine is never presumed dead.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import socket
from datetime import UTC, datetime
from pathlib import Path

from servefleet.adapters import remote
from servefleet.adapters.runtime import Transport
from servefleet.core.errors import LockHeld, RemoteError, ServefleetError
from servefleet.core.lockinfo import LockInfo, parse_lock

STATE_TIMEOUT_SECONDS = 30


def whoami() -> str:
    """``user@host`` of this control machine, as written into locks, manifests and audits."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def new_lock_id() -> str:
    """A fresh lock id: 12 hex digits, short enough to type."""
    return secrets.token_hex(6)


def lock_owner(operation: str, now: datetime, lock_id: str | None = None) -> str:
    """The owner line: ``user@host pid=N since=<UTC time> op=<operation> id=<lock id>``.
    ``operation`` is one word: the line is read back field by field, and a lock whose id
    cannot be read is never taken over when its holder dies."""
    if not operation or any(c.isspace() for c in operation):
        raise ValueError(f"lock operation {operation!r} must be one word")
    return f"{whoami()} pid={os.getpid()} since={now.strftime('%Y-%m-%dT%H:%M:%SZ')} " \
           f"op={operation} id={lock_id or new_lock_id()}"


def _started_after(pid: int, since: str | None) -> bool:
    """Whether process ``pid`` of this machine started after the UTC time ``since`` (then
    the pid was reused and the lock's holder is gone). False when it cannot be told."""
    if since is None:
        return False
    try:
        lock_time = datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22 of stat: start time in clock ticks after boot
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text()
                    .splitlines() if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    # The lock's time has whole seconds: a process started in the same second may be it.
    return started > lock_time.timestamp() + 1


def holder_is_gone(info: LockInfo | None) -> bool:
    """The lock's holder is a process of this machine (same ``user@host``) that no longer
    runs, or whose pid now belongs to a process started after the lock was taken."""
    if info is None or info.pid is None or info.who != whoami() or info.pid == os.getpid():
        return False
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return _started_after(info.pid, info.since)


def stale_hint(info: LockInfo | None) -> str:
    """A hint when the holder is a process of this machine that no longer runs."""
    if info is not None and info.pid is not None and info.pid == os.getpid() \
            and info.who == whoami():
        return " (held by this very process)"
    if holder_is_gone(info):
        assert info is not None
        return f" (process {info.pid} on this machine is gone: the lock is stale)"
    return ""


def held_message(node: str, base_dir: str, info: LockInfo | None, raw: str) -> str:
    """One line: who holds the lock, where their rollout was, and how to remove it."""
    holder = (info.owner if info else raw.strip()) or "unknown"
    where = f"; it was {info.where()}" if info is not None else ""
    if info is not None and info.abandoned:
        where += f" and gave up ({info.abandoned})"
    if info is not None and info.lock_id:
        how = (f"run `servefleet unlock {node} {info.lock_id}` (or deploy --force-unlock "
               f"{info.lock_id}; Pulumi: pulumi config set --path "
               f"'servefleet:forceUnlock.{node}' {info.lock_id})")
    else:
        how = f"remove {base_dir}/{remote.LOCK_DIR} on the node"
    return (f"{node}: another rollout holds the node lock: {holder}"
            f"{stale_hint(info)}{where}; wait for it to finish, or if it died, {how}")


class NodeLock:
    """Hold a node's lock for the duration of a rollout."""

    def __init__(self, transport: Transport, operation: str, now: datetime, *,
                 unlock_id: str | None = None) -> None:
        self.transport = transport
        self.lock_id = new_lock_id()
        self.owner = lock_owner(operation, now, self.lock_id)
        self.unlock_id = unlock_id
        self.held = False
        self.taken_over: LockInfo | None = None
        """The abandoned lock this one replaced, if any (its phase says what to repair)."""
        self.holder_gone = False
        """The replaced lock's holder was a process of this machine that is gone."""

    def acquire(self, *then: list[str], stdin: bytes | None = None) -> str:
        """Take the lock and run ``then`` commands in the same round trip (``stdin`` goes to
        them: the lock command reads none); return their stdout. Raises :class:`LockHeld`
        naming the holder and the lock id."""
        node = self.transport.node
        command = remote.acquire_lock(node.base_dir, self.owner, unlock_id=self.unlock_id)
        if then:
            command = remote.sequence(command, *then)
        result = self.transport.run(command, stdin=stdin, check=False, idempotent=False,
                                    what="take the node lock")
        text = result.text()
        if result.exit_status == remote.LOCK_HELD_EXIT:
            info = parse_lock(text)
            if self.unlock_id is None and info is not None and info.lock_id \
                    and holder_is_gone(info):
                # A controller of this machine died holding it: take it over, by its id
                # (a lock taken meanwhile by anyone else has another id and stays).
                self.unlock_id = info.lock_id
                taken = self.acquire(*then, stdin=stdin)
                self.taken_over, self.holder_gone = info, True
                return taken
            raise LockHeld(held_message(node.name, node.base_dir, info, text))
        self.held = True
        if text.startswith(remote.LOCK_TAKEN_OVER):
            old, _, text = text.partition(remote.LOCK_TAKEN_OVER_END + "\n")
            self.taken_over = parse_lock(old.partition("\n")[2])
        if not result.ok:
            # The lock may be ours and the follow-up command failed: release, then report.
            self.release()
            tail = self.transport.mask(result.stderr.decode("utf-8", "replace")[-500:])
            raise RemoteError(node.name, "take the node lock", result.exit_status, tail)
        return text

    def record(self, line: str) -> bool:
        """Rewrite the lock's state line (best effort: False when it could not)."""
        if not self.held:
            return False
        try:
            done = self.transport.run(
                remote.set_lock_state(self.transport.node.base_dir, self.owner, line),
                check=False, timeout=STATE_TIMEOUT_SECONDS, what="record the rollout phase")
        except ServefleetError:
            return False
        return done.ok

    def abandon(self, line: str) -> None:
        """Give up without releasing: the lock stays, its state line says why, and the next
        rollout takes it over (see :func:`remote.acquire_lock`)."""
        self.record(line)
        self.held = False

    def release(self) -> None:
        """Give the lock back (only if it is still ours); best effort."""
        if not self.held:
            return
        self.held = False
        # Removing it only while it is ours is safe to repeat: after a dropped link, once
        # more over a new connection. Unreachable still: the lock stays, and the next
        # rollout from this machine takes it over (its holder is gone by then).
        with contextlib.suppress(ServefleetError):
            self.transport.run(remote.release_lock(self.transport.node.base_dir, self.owner),
                               check=False, idempotent=True, what="release the node lock")

    def __enter__(self) -> NodeLock:
        if not self.held:
            self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def force_unlock(transport: Transport, lock_id: str) -> str:
    """Remove the node's lock if its id is ``lock_id``; returns ``removed`` or ``not
    locked``. Raises :class:`LockHeld` when the lock has another id (a live rollout)."""
    node = transport.node
    result = transport.run(remote.force_unlock(node.base_dir, lock_id), check=False,
                           idempotent=True, what="remove the node lock")
    text = result.text()
    if result.exit_status == remote.LOCK_HELD_EXIT:
        info = parse_lock(text)
        raise LockHeld(f"{node.name}: the node lock has id {info.lock_id if info else '?'}, "
                       f"not {lock_id}: left in place ({(info.owner if info else text.strip())}"
                       f"{stale_hint(info)}); check the id that `servefleet plan` prints")
    if not result.ok:
        raise RemoteError(node.name, "remove the node lock", result.exit_status,
                          transport.mask(result.stderr.decode("utf-8", "replace")[-500:]))
    return "removed" if "removed" in text else "not locked"

"""The node lock as data: who holds it, under which id, and how far their rollout got.

The lock folder ``<base_dir>/.servefleet-lock`` holds two files, both plain text:

``owner``  one line, written when the lock is taken and never changed::

    user@host pid=4242 since=2026-11-24T15:00:00Z op=deploy id=3f9c1a2b7d4e

``state``  one line, rewritten (atomically) before every phase that changes what serves::

    phase=boot deployment=main release=ab12cd34 at=2026-11-24T15:01:10Z

and, when the rollout gave up on a second signal or could not restore, ``abandoned=<why>``
appended to that line. The node reader sends both files as its answer's ``lock``, so
a plan sees a rollout that died (or is still running) and in which phase. Modelled on
Terraform's ``force-unlock LOCK_ID``: the id is what an operator types to remove exactly
this lock and no other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OWNER_RE = re.compile(r"^(?P<who>\S+) pid=(?P<pid>\d+) since=(?P<since>\S+) "
                       r"op=(?P<op>\S+)(?: id=(?P<id>[0-9a-f]+))?")
_FIELD_RE = re.compile(r"(\w[\w-]*)=(\S+)")

PHASE_WORDS = {
    "lock": "while taking the lock",
    "preflight": "in preflight",
    "pull": "while pulling images",
    "upload": "while uploading",
    "build": "while building the overlay",
    "stop": "while stopping the old engine",
    "gpu": "in the GPU memory check",
    "up": "while starting the engine",
    "boot": "during the boot gate",
    "health": "during the health gate",
    "switch": "while switching current",
    "restore": "while restoring the previous release",
}
"""How a plan names the phase a rollout was in."""

ENGINE_PHASES = frozenset({"up", "boot", "health", "restore"})
"""Phases in which an engine runs that has not passed its gate yet."""


@dataclass(frozen=True)
class LockInfo:
    """A node lock as the node reader reported it."""

    owner: str
    """The owner line as written (``user@host pid=N since=T op=OP id=ID``)."""
    who: str | None = None
    """``user@host`` of the control machine holding it."""
    pid: int | None = None
    """Its process id there."""
    since: str | None = None
    """When it was taken (UTC, ISO 8601)."""
    operation: str | None = None
    """``deploy``, ``rollback``, ``health``…"""
    lock_id: str | None = None
    """The lock's id: what ``servefleet unlock NODE LOCK_ID`` takes (``None``: a lock
    written by an older servefleet, which has none)."""
    phase: str | None = None
    """The last phase the holder recorded (``stop``, ``boot``…), if any."""
    deployment: str | None = None
    """The deployment that phase was about."""
    release: str | None = None
    """The release that phase was about."""
    phase_at: str | None = None
    """When the holder entered that phase."""
    abandoned: str | None = None
    """Why the holder gave up and left the node to the next rollout (``None``: it did not
    say; it may still be running, or it died without a word)."""

    def where(self) -> str:
        """``during the boot gate at <time>`` (or ``before its first phase``)."""
        if self.phase is None:
            return f"before its first phase (lock taken {self.since or '?'})"
        words = PHASE_WORDS.get(self.phase, f"in phase {self.phase}")
        return f"{words} at {self.phase_at or '?'}"

    @property
    def engine_ungated(self) -> bool:
        """The holder was in a phase where an engine runs without a passed gate."""
        return self.phase in ENGINE_PHASES


def parse_lock(text: str | None) -> LockInfo | None:
    """The ``@@lock`` section's lines (owner line, then the state line); ``None`` when the
    node is not locked."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return None
    owner = lines[0]
    match = _OWNER_RE.match(owner)
    fields: dict[str, str] = {}
    for line in lines[1:]:
        fields.update(dict(_FIELD_RE.findall(line)))
    abandoned = next((line.partition("abandoned=")[2] for line in lines[1:]
                      if "abandoned=" in line), None)
    return LockInfo(
        owner=owner,
        who=match["who"] if match else None,
        pid=int(match["pid"]) if match else None,
        since=match["since"] if match else None,
        operation=match["op"] if match else None,
        lock_id=match["id"] if match and match["id"] else None,
        phase=fields.get("phase"),
        deployment=fields.get("deployment"),
        release=fields.get("release"),
        phase_at=fields.get("at"),
        abandoned=abandoned or None,
    )

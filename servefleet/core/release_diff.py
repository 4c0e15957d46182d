"""The one judgement of whether a node runs the release that is wanted.

``plan``, drift and the two Pulumi providers each ask it: :func:`release_diff` compares what
is wanted (:class:`Wanted`: a release id and its files) with what one deployment of a node
shows (:class:`Seen`: its ``current`` release, the release its engine runs, the current
release's files, whether the engine serves) and returns the differences, typed and without
wording. Each caller words them its own way and keeps the checks only it makes (flags,
image, secrets, GPU…).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeVar


@dataclass(frozen=True)
class Wanted:
    """What should run: the release and, when known, its files."""

    release_id: str | None
    """The wanted release; ``None``: not known (rendered without a secret value), so the
    current release is not compared with it and its files are checked against its own
    manifest (:attr:`Seen.recorded_hashes`)."""
    file_hashes: Mapping[str, str] | None = None
    """Path → sha256 of the wanted release's files; ``None``: not known."""
    files_digest: str | None = None
    """One digest over those files, for a caller that keeps only that; compared when no
    path-by-path hashes are given."""


@dataclass(frozen=True)
class Seen:
    """What one deployment of a node shows."""

    present: bool = True
    """The node has the deployment at all (its folder, or the caller's observation of it)."""
    current_release: str | None = None
    """Release ``current`` points to; ``None``: no ``current`` link."""
    running_release: str | None = None
    """Release the running engine was started from; ``None``: none runs, or not known."""
    file_hashes: Mapping[str, str] | None = None
    """Path → sha256 of the current release folder's files; ``None``: not read."""
    recorded_hashes: Mapping[str, str] | None = None
    """The hashes the current release's own manifest records, to check its files against
    when it is not the wanted release; ``None``: not given or not readable."""
    files_digest: str | None = None
    """One digest over the current release's files (see :attr:`Wanted.files_digest`)."""
    serving: bool | None = None
    """The engine serves (up, healthy, gated, as the caller judges it); ``None``: not
    judged."""


@dataclass(frozen=True)
class Absent:
    """The node has nothing of the deployment: nothing else is compared."""

    kind: ClassVar[Literal["absent"]] = "absent"


@dataclass(frozen=True)
class CurrentDiff:
    """``current`` is not the wanted release (or there is no ``current`` link)."""

    kind: ClassVar[Literal["current"]] = "current"
    want: str | None
    """The wanted release (``None`` only when ``have`` is ``None`` too: nothing to compare
    but the missing link)."""
    have: str | None
    """The node's current release; ``None``: no ``current`` link."""


@dataclass(frozen=True)
class RunningDiff:
    """The engine runs another release than the node's current one."""

    kind: ClassVar[Literal["running"]] = "running"
    want: str
    """The node's current release."""
    have: str
    """The release the running engine was started from."""


@dataclass(frozen=True)
class FilesDiff:
    """The current release folder's files differ from what it should hold."""

    kind: ClassVar[Literal["files"]] = "files"
    edited: tuple[str, ...]
    """Paths on both sides whose content differs (sorted)."""
    missing: tuple[str, ...]
    """Paths the folder lacks (sorted)."""
    added: tuple[str, ...]
    """Paths only the folder has (sorted)."""
    against: Literal["wanted", "recorded"]
    """What the files were compared with: the wanted release's files (the current release
    is the wanted one), or the hashes its own manifest records."""

    @property
    def paths(self) -> tuple[str, ...]:
        """Every differing path, sorted; empty when only digests were compared."""
        return tuple(sorted((*self.edited, *self.missing, *self.added)))


@dataclass(frozen=True)
class EngineDiff:
    """The engine does not serve (the caller knows why: down, unhealthy, ungated…)."""

    kind: ClassVar[Literal["engine"]] = "engine"


Difference = Absent | CurrentDiff | RunningDiff | FilesDiff | EngineDiff
"""One difference between what is wanted and what is seen."""

D = TypeVar("D", Absent, CurrentDiff, RunningDiff, FilesDiff, EngineDiff)


def release_diff(wanted: Wanted, seen: Seen) -> tuple[Difference, ...]:
    """Every difference between ``wanted`` and ``seen``, in this order: absent, current,
    running, files, engine (empty: the node runs the wanted release and it serves). Facts
    given as ``None`` are not compared."""
    if not seen.present:
        return (Absent(),)
    found: list[Difference] = []
    current = seen.current_release
    if current is None or (wanted.release_id is not None and current != wanted.release_id):
        found.append(CurrentDiff(wanted.release_id, current))
    # Which release runs says something only against a current one to run.
    if current is not None and seen.running_release is not None \
            and seen.running_release != current:
        found.append(RunningDiff(current, seen.running_release))
    files = _files(wanted, seen)
    if files is not None:
        found.append(files)
    if seen.serving is False:
        found.append(EngineDiff())
    return tuple(found)


def find(diffs: tuple[Difference, ...], kind: type[D]) -> D | None:
    """The difference of ``kind`` among ``diffs`` (there is at most one of each)."""
    return next((d for d in diffs if isinstance(d, kind)), None)


def _files(wanted: Wanted, seen: Seen) -> FilesDiff | None:
    if seen.current_release is None:
        return None
    # A release's files must be what it was deployed with: the wanted ones when it is the
    # wanted release, else what its own manifest records (a hand edit is a difference
    # either way; a caller that gives no record compares only the wanted release).
    against: Literal["wanted", "recorded"]
    if seen.current_release == wanted.release_id:
        want, digest, against = wanted.file_hashes, wanted.files_digest, "wanted"
    else:
        want, digest, against = seen.recorded_hashes, None, "recorded"
    have = seen.file_hashes
    if want is not None and have is not None:
        edited = tuple(sorted(p for p in want.keys() & have.keys() if want[p] != have[p]))
        missing = tuple(sorted(want.keys() - have.keys()))
        added = tuple(sorted(have.keys() - want.keys()))
        if edited or missing or added:
            return FilesDiff(edited, missing, added, against)
        return None
    if digest is not None and seen.files_digest is not None and digest != seen.files_digest:
        return FilesDiff((), (), (), against)
    return None

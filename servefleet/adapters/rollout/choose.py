"""Which release a failure restores and which a rollback goes to."""

from __future__ import annotations

from collections.abc import Sequence

from servefleet.core.errors import ConfigError
from servefleet.core.observed import ObservedDeployment, ReleaseInfo


def restore_candidate(observed: ObservedDeployment | None, failed: str) -> str | None:
    """The release a failure restores: what was current (it served), else ``last-good``
    (the last release that passed its gate here: a failed repair of the current release
    lands here or on ``previous``), else ``previous``; never the release that just failed,
    and only one whose folder is on the node."""
    if observed is None:
        return None
    for release in (observed.current_release, observed.last_good, observed.previous_release):
        if release and release != failed and release in observed.releases:
            return release
    return None


EDITED_MARK = ".edited-"
"""Infix of a release folder moved aside by a repair (``<id>.edited-<UTC time>``)."""


def choose_rollback(infos: Sequence[ReleaseInfo], current: str | None, to: str | None,
                    where: str) -> ReleaseInfo:
    """The release a rollback goes to: ``to``; else the one ``previous`` names (what was
    current before); else the newest one made before ``current``. A hand-edited copy kept
    aside by a repair (``<id>.edited-<time>``) is never chosen by default: only by name."""
    known = {info.release_id: info for info in infos}
    if to is not None:
        if to not in known:
            raise ConfigError(f"{where}: no release {to!r} on the node (there: "
                              f"{', '.join(known) or 'none'})")
        return known[to]
    candidates = [i for i in infos if i.release_id != current and EDITED_MARK not in i.release_id]
    previous = next((i for i in candidates if i.previous), None)
    if previous is not None:
        return previous
    current_info = known.get(current or "")
    older = [i for i in candidates
             if current_info is None or i.created_at < current_info.created_at]
    if not older:
        raise ConfigError(f"{where}: no release older than the current {current or '-'} to "
                          "roll back to (see `servefleet releases`; --to RELEASE picks one)")
    return older[0]  # infos are newest first

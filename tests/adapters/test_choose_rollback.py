"""Which release a rollback goes to (pure: release listings in, choice out)."""

from __future__ import annotations

import pytest

from servefleet.adapters.rollout import choose_rollback
from servefleet.core.errors import ConfigError
from servefleet.core.observed import ReleaseInfo


def info(release_id: str, created: str, *, current: bool = False,
         previous: bool = False) -> ReleaseInfo:
    return ReleaseInfo(release_id=release_id, manifest={"created_at": created},
                       current=current, previous=previous)


# Newest first, as list_releases returns them.
EDITED = [info("c3.edited-20261124T150000Z", "2026-11-24T12:00:00Z"),
          info("c3", "2026-11-24T12:00:00Z", current=True),
          info("b2", "2026-11-23T12:00:00Z"),
          info("a1", "2026-11-22T12:00:00Z")]


def test_previous_is_the_default() -> None:
    infos = [info("c3", "3", current=True), info("b2", "2"), info("a1", "1", previous=True)]
    assert choose_rollback(infos, "c3", None, "n/main").release_id == "a1"


def test_without_previous_the_newest_older_release_and_never_an_edited_copy() -> None:
    assert choose_rollback(EDITED, "c3", None, "n/main").release_id == "b2"


def test_previous_pointing_at_current_is_ignored() -> None:
    infos = [info("c3", "3", current=True, previous=True), info("b2", "2")]
    assert choose_rollback(infos, "c3", None, "n/main").release_id == "b2"


def test_to_picks_any_release_by_name_even_an_edited_copy() -> None:
    chosen = choose_rollback(EDITED, "c3", "c3.edited-20261124T150000Z", "n/main")
    assert chosen.release_id == "c3.edited-20261124T150000Z"


def test_unknown_to_names_what_is_there() -> None:
    with pytest.raises(ConfigError, match=r"n/main: no release 'zz' on the node \(there: "):
        choose_rollback(EDITED, "c3", "zz", "n/main")


def test_nothing_older_to_roll_back_to() -> None:
    only = [info("c3", "3", current=True), info("c3.edited-x", "3")]
    with pytest.raises(ConfigError, match="no release older than the current c3"):
        choose_rollback(only, "c3", None, "n/main")


def test_unknown_current_takes_the_newest_other_release() -> None:
    infos = [info("b2", "2"), info("a1", "1")]
    assert choose_rollback(infos, None, None, "n/main").release_id == "b2"

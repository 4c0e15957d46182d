"""The one comparer of a wanted release with what a node's deployment shows."""

from __future__ import annotations

from servefleet.core.release_diff import (
    Absent,
    CurrentDiff,
    EngineDiff,
    FilesDiff,
    RunningDiff,
    Seen,
    Wanted,
    find,
    release_diff,
)

FILES = {"compose.yaml": "a1", "engine.env": "b2", "manifest-extra.txt": "c3"}
WANTED = Wanted("r2", file_hashes=FILES)


def test_the_wanted_release_serving_is_no_difference() -> None:
    seen = Seen(current_release="r2", running_release="r2", file_hashes=dict(FILES),
                serving=True)
    assert release_diff(WANTED, seen) == ()


def test_absent_is_the_only_difference() -> None:
    assert release_diff(WANTED, Seen(present=False, serving=False)) == (Absent(),)
    assert Absent.kind == "absent"


def test_current_differs_or_is_missing() -> None:
    other = release_diff(WANTED, Seen(current_release="r1", file_hashes={}))
    assert other == (CurrentDiff("r2", "r1"),)
    assert other[0].kind == "current"
    assert release_diff(WANTED, Seen()) == (CurrentDiff("r2", None),)
    # Without a wanted id only the missing link is a difference.
    assert release_diff(Wanted(None), Seen(current_release="r1")) == ()
    assert release_diff(Wanted(None), Seen()) == (CurrentDiff(None, None),)


def test_running_is_compared_with_the_current_release() -> None:
    diffs = release_diff(WANTED, Seen(current_release="r2", running_release="r1"))
    assert diffs == (RunningDiff(want="r2", have="r1"),)
    assert diffs[0].kind == "running"
    # Nothing runs (or it is not known which release does): no difference.
    assert release_diff(WANTED, Seen(current_release="r2")) == ()
    # With current differing from what is wanted, both are said, current first.
    assert release_diff(WANTED, Seen(current_release="r1", running_release="r0")) == \
        (CurrentDiff("r2", "r1"), RunningDiff("r1", "r0"))


def test_files_split_into_edited_missing_added() -> None:
    have = {"compose.yaml": "XX", "engine.env": "b2", "hand.txt": "d4"}
    files = find(release_diff(WANTED, Seen(current_release="r2", file_hashes=have)),
                 FilesDiff)
    assert files == FilesDiff(edited=("compose.yaml",), missing=("manifest-extra.txt",),
                              added=("hand.txt",), against="wanted")
    assert files.kind == "files"
    assert files.paths == ("compose.yaml", "hand.txt", "manifest-extra.txt")


def test_files_not_read_or_not_known_are_not_compared() -> None:
    assert release_diff(WANTED, Seen(current_release="r2", file_hashes=None)) == ()
    assert release_diff(Wanted("r2"), Seen(current_release="r2", file_hashes={})) == ()


def test_another_release_is_checked_against_its_own_record() -> None:
    # Without a record, only the current release is the difference.
    assert release_diff(WANTED, Seen(current_release="r1", file_hashes={"a": "1"})) == \
        (CurrentDiff("r2", "r1"),)
    seen = Seen(current_release="r1", file_hashes={"a": "1"}, recorded_hashes={"a": "0"})
    assert release_diff(WANTED, seen) == \
        (CurrentDiff("r2", "r1"), FilesDiff(("a",), (), (), against="recorded"))
    # An unknown wanted id: the record is all there is to compare with.
    assert release_diff(Wanted(None), seen) == (FilesDiff(("a",), (), (), "recorded"),)


def test_files_by_digest() -> None:
    wanted = Wanted("r2", files_digest="d1")
    differs = find(release_diff(wanted, Seen(current_release="r2", files_digest="d2")),
                   FilesDiff)
    assert differs is not None and differs.paths == () and differs.against == "wanted"
    assert release_diff(wanted, Seen(current_release="r2", files_digest="d1")) == ()
    assert release_diff(wanted, Seen(current_release="r2")) == ()


def test_engine_not_serving() -> None:
    diffs = release_diff(WANTED, Seen(current_release="r2", serving=False))
    assert diffs == (EngineDiff(),) and diffs[0].kind == "engine"
    assert release_diff(WANTED, Seen(current_release="r2", serving=None)) == ()


def test_order_and_find() -> None:
    seen = Seen(current_release="r2", running_release="r1", file_hashes={}, serving=False)
    diffs = release_diff(WANTED, seen)
    assert [d.kind for d in diffs] == ["running", "files", "engine"]
    assert find(diffs, CurrentDiff) is None
    assert find(diffs, RunningDiff) == RunningDiff("r2", "r1")

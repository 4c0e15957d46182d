"""The disk-full fault of a simulated node: a small file system of its own, filled."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from servefleet.core.errors import SimError
from servefleet.sim import node_faults


def test_a_full_disk_refuses_writes_new_files_and_symlinks(small_disk: Path) -> None:
    (small_disk / "kept").write_text("before\n")
    made = node_faults.fill_disk(small_disk)
    assert made > 0
    with pytest.raises(OSError) as write:
        (small_disk / "kept").write_text("x" * 65536)
    assert write.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as link:
        os.symlink("releases/abc", small_disk / "current.tmp")
    assert link.value.errno == errno.ENOSPC
    node_faults.free_disk(small_disk)
    os.symlink("releases/abc", small_disk / "current.tmp")
    assert os.readlink(small_disk / "current.tmp") == "releases/abc"


def test_only_a_small_file_system_of_its_own_is_filled(tmp_path: Path) -> None:
    with pytest.raises(SimError, match="not a small file system of its own"):
        node_faults.fill_disk(tmp_path)
    assert list(tmp_path.iterdir()) == []

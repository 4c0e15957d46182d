"""The gate record on a full disk: written in place when no new file can be made."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from servefleet.adapters import remote
from servefleet.sim import node_faults


def mark(base: Path, release: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    docker = bindir / "docker"
    # `docker ps -q` names the engine's container, `docker inspect` its start time.
    docker.write_text('#!/bin/sh\ncase "$1" in ps) echo c0ffee;; '
                      'inspect) echo 2026-11-24T19:00:00.5Z;; esac\n')
    docker.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run(remote.mark_gated(str(base), "main", release, "2026-11-24T19:01:00Z"),
                          env=env, capture_output=True, text=True, check=False)


def test_the_gate_record_is_written_in_place_on_a_full_disk(small_disk: Path,
                                                            tmp_path: Path) -> None:
    full_disk = small_disk
    folder = full_disk / "main"
    (folder / "releases" / "aaa").mkdir(parents=True)
    (folder / "releases" / "bbb").mkdir(parents=True)
    assert mark(full_disk, "bbb", tmp_path).returncode == 0
    assert os.readlink(folder / remote.LAST_GOOD) == "releases/bbb"
    node_faults.fill_disk(full_disk)
    done = mark(full_disk, "aaa", tmp_path)
    assert done.returncode == 0, done.stderr
    assert (folder / remote.GATED).read_text() == (
        "release=aaa started=2026-11-24T19:00:00.5Z at=2026-11-24T19:01:00Z\n")
    # last-good needs a new inode: it keeps naming the earlier gated release, and says so.
    assert os.readlink(folder / remote.LAST_GOOD) == "releases/bbb"
    assert "last-good not moved to aaa (no space)" in done.stderr
    assert not [p for p in folder.iterdir() if p.name.startswith(".gated.")]

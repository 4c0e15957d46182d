"""The node lock's take-over of a lock whose holder is provably gone, run by the real lock
scripts against a node folder (``fake_node``)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from servefleet.adapters.lock import NodeLock, holder_is_gone, whoami
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.errors import LockHeld
from servefleet.core.lockinfo import parse_lock
from servefleet.core.project import load_project
from tests.adapters.fake_node import FakeNodeTransport
from tests.reference_project import REPO_ROOT


def transport(tmp_path: Path) -> SshTransport:
    project = load_project(REPO_ROOT, "reference")
    node = project.nodes["rtx5090"].model_copy(update={"base_dir": str(tmp_path / "srv")})
    (tmp_path / "srv").mkdir()
    return cast(SshTransport, FakeNodeTransport(node, tmp_path / "node"))


def dead_pid() -> int:
    """The pid of a process of this machine that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def held_by(link: SshTransport, pid: int, who: str = "") -> NodeLock:
    """A lock whose owner line names ``pid`` (and ``who``), as its holder wrote it."""
    lock = NodeLock(link, "deploy", datetime.now(UTC))
    lock.owner = lock.owner.replace(f"pid={os.getpid()} ", f"pid={pid} ")
    if who:
        lock.owner = lock.owner.replace(whoami(), who, 1)
    lock.acquire()
    lock.record("phase=boot deployment=main release=abc123 at=2026-11-24T19:00:00Z")
    return lock


def test_a_lock_whose_holder_on_this_machine_is_gone_is_taken_over(tmp_path: Path) -> None:
    link = transport(tmp_path)
    ghost = held_by(link, dead_pid())
    assert holder_is_gone(parse_lock(ghost.owner))
    mine = NodeLock(link, "deploy", datetime.now(UTC))
    mine.acquire()
    assert mine.held and mine.holder_gone
    assert mine.taken_over is not None and mine.taken_over.lock_id == ghost.lock_id
    assert mine.taken_over.phase == "boot"  # what the next deploy must repair
    owner = (tmp_path / "srv" / ".servefleet-lock" / "owner").read_text()
    assert f"id={mine.lock_id}" in owner
    mine.release()


def test_a_live_holder_or_one_on_another_machine_keeps_the_lock(tmp_path: Path) -> None:
    link = transport(tmp_path)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        held_by(link, live.pid)
        with pytest.raises(LockHeld, match="another rollout holds the node lock"):
            NodeLock(link, "deploy", datetime.now(UTC)).acquire()
    finally:
        live.kill()
        live.wait()
    (tmp_path / "srv" / ".servefleet-lock" / "owner").unlink()
    (tmp_path / "srv" / ".servefleet-lock" / "state").unlink(missing_ok=True)
    (tmp_path / "srv" / ".servefleet-lock").rmdir()
    # Another machine's process table says nothing about its pid: never presumed dead.
    held_by(link, dead_pid(), who="ops@other-controller")
    with pytest.raises(LockHeld) as held:
        NodeLock(link, "deploy", datetime.now(UTC)).acquire()
    assert "ops@other-controller" in str(held.value) and "servefleet unlock" in str(held.value)


def test_a_reused_pid_started_after_the_lock_counts_as_gone() -> None:
    info = parse_lock(f"{whoami()} pid={os.getpid() - 0} since=2020-01-01T00:00:00Z "
                      "op=deploy id=0123456789ab")
    assert info is not None
    # This very process is never presumed gone, whatever its start time says.
    assert not holder_is_gone(info)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        old = parse_lock(f"{whoami()} pid={live.pid} since=2020-01-01T00:00:00Z "
                         "op=deploy id=0123456789ab")
        fresh = parse_lock(f"{whoami()} pid={live.pid} since=2099-01-01T00:00:00Z "
                           "op=deploy id=0123456789ab")
        assert holder_is_gone(old)  # the pid now belongs to a process started since
        assert not holder_is_gone(fresh)
    finally:
        live.kill()
        live.wait()


def test_an_operation_of_two_words_is_refused_so_a_dead_holder_s_lock_can_be_taken_over() -> None:
    from datetime import UTC, datetime

    from servefleet.adapters.lock import lock_owner
    from servefleet.core.lockinfo import parse_lock

    with pytest.raises(ValueError, match="one word"):
        lock_owner("gateway deploy", datetime.now(UTC))
    info = parse_lock(lock_owner("gateway-deploy", datetime.now(UTC), "8f7d6a0e0ad6"))
    assert info is not None and info.lock_id == "8f7d6a0e0ad6"

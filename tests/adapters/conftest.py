"""Fixtures of the adapter tests: a plain OpenSSH server on a loopback port."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loopback_sshd import LoopbackSshd, loopback_sshd


@pytest.fixture
def sshd(tmp_path: Path, need_program: Callable[[str], str]) -> Iterator[LoopbackSshd]:
    """A real ``sshd`` on 127.0.0.1 (its own ed25519 host key and client key); programs put
    in ``tmp_path / "bin"`` come first on its sessions' ``PATH``. A missing
    sshd skips the test outside CI and fails it under ``CI=true`` (``need_program``); so
    does one that cannot start here."""
    program = need_program("sshd")
    need_program("ssh-keygen")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    server = loopback_sshd(program, tmp_path / "sshd", path_prefix=bin_dir)
    try:
        running = server.__enter__()
    except (OSError, RuntimeError) as error:
        reason = f"a loopback sshd cannot start here: {error}"
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{reason} (CI=true: every component must start here)", pytrace=False)
        pytest.skip(reason)
    try:
        yield running
    finally:
        server.__exit__(None, None, None)

"""Fixtures for the stand-in engine tests (helpers live in ``standin_helpers``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The test modules here import the helpers by their (unique) module name.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from standin_helpers import StandIn

from servefleet.sim.standin import PLACEHOLDER_VLLM_DIR
from tests.conftest import require_program


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Any]:
    """Factory: ``standin("vllm", [...], env={...})``; every process is stopped at the end."""
    started: list[StandIn] = []

    def start(engine: str, args: list[str], env: dict[str, str] | None = None,
              vllm_site: Path = PLACEHOLDER_VLLM_DIR) -> StandIn:
        proc = StandIn(engine, args, env or {}, vllm_site)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def control_dir(tmp_path: Path) -> Path:
    """A fault control folder (``STANDIN_CONTROL_DIR``)."""
    folder = tmp_path / "standin-control"
    folder.mkdir()
    return folder


@pytest.fixture
def patched_vllm_site(tmp_path: Path) -> Path:
    """A copy of the placeholder vllm package with the PR #40798 overlay applied by git."""
    git = require_program("git")
    site = tmp_path / "dist-packages"
    shutil.copytree(PLACEHOLDER_VLLM_DIR / "vllm", site / "vllm")
    patch = Path(__file__).resolve().parents[3] / "profiles" / "patches" / \
        "vllm-pr40798-turboquant-workspace.diff"
    subprocess.run([git, "apply", "-p1", str(patch)], cwd=site, check=True)
    return site

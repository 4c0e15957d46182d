"""Fixtures of the CLI tests that run without the simulated fleet: a copy of the shipped
project, and the real ``servefleet`` group bound to it."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.reference_project import REPO_ROOT


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the shipped project (nodes, profiles, templates, reference stack); the
    reference nodes pin no host key, so nothing is ever sent to them."""
    root = tmp_path / "project"
    for folder in ("nodes", "profiles", "templates"):
        shutil.copytree(REPO_ROOT / folder, root / folder,
                        ignore=shutil.ignore_patterns("sim", "__pycache__"))
    for name in ("Pulumi.yaml", "Pulumi.reference.yaml"):
        shutil.copy(REPO_ROOT / name, root / name)
    return root


@pytest.fixture
def run(run_cli: Callable[..., Result], project: Path) -> Callable[..., Result]:
    """``run(*args, env=…)``: the real ``servefleet --project <copy> --stack reference``."""
    return functools.partial(run_cli, project=project, stack="reference")

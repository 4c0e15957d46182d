"""A copy of the shipped reference project for tests that edit it."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def copy_reference(tmp_path: Path) -> Path:
    """``tmp_path/project``: the shipped nodes (not the generated ``nodes/sim``), profiles
    and reference stack."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REPO_ROOT / "nodes", root / "nodes", ignore=shutil.ignore_patterns("sim"))
    shutil.copytree(REPO_ROOT / "profiles", root / "profiles")
    shutil.copy(REPO_ROOT / "Pulumi.reference.yaml", root / "Pulumi.reference.yaml")
    return root

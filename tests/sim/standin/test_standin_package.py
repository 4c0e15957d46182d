"""The placeholder vllm package, the PR #40798 overlay, and the engine's independence."""

from __future__ import annotations

import ast
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from servefleet.sim.standin import CONTEXT_DIR, DOCKERFILES, ENGINE_DIR, PLACEHOLDER_VLLM_DIR
from tests.conftest import require_program

REPO = Path(__file__).resolve().parents[3]
PATCH = REPO / "profiles" / "patches" / "vllm-pr40798-turboquant-workspace.diff"
TQ_FILE = Path("vllm/v1/attention/backends/turboquant_attn.py")


@pytest.fixture
def git() -> str:
    return require_program("git")


def _site_copy(tmp_path: Path) -> Path:
    site = tmp_path / "dist-packages"
    shutil.copytree(PLACEHOLDER_VLLM_DIR / "vllm", site / "vllm")
    return site


def test_the_overlay_applies_to_the_placeholder_with_git(tmp_path: Path, git: str) -> None:
    site = _site_copy(tmp_path)
    subprocess.run([git, "apply", "-p1", "--check", str(PATCH)], cwd=site, check=True)
    subprocess.run([git, "apply", "-p1", str(PATCH)], cwd=site, check=True)
    patched = (site / TQ_FILE).read_text()
    assert "def _reserve_workspace(self) -> None:" in patched
    assert "self._reserve_workspace()" in patched
    assert "from vllm.utils.math_utils import round_up" in patched
    # Applying twice fails: git apply allows no fuzz and no re-application.
    again = subprocess.run([git, "apply", "-p1", "--check", str(PATCH)], cwd=site,
                           capture_output=True, text=True, check=False)
    assert again.returncode != 0


def test_the_overlay_fails_loudly_on_other_content(tmp_path: Path, git: str) -> None:
    site = _site_copy(tmp_path)
    target = site / TQ_FILE
    text = target.read_text()
    # A neighbouring line of a hunk changed, as in another vLLM release.
    old = "self._init_reorder_batch_threshold(1, supports_spec_as_decode=False)"
    assert old in text
    target.write_text(text.replace(old, "self._init_reorder_batch_threshold(2)"))
    result = subprocess.run([git, "apply", "-p1", "--check", str(PATCH)], cwd=site,
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "patch does not apply" in result.stderr


def test_the_overlay_names_the_pr_it_backports() -> None:
    header = PATCH.read_text().split("diff --git", 1)[0]
    assert "PR #40798" in header
    assert "Share decode scratch workspace across layers" in header
    assert "_reserve_workspace" in header


def test_the_placeholder_keeps_the_real_file_and_version() -> None:
    text = (PLACEHOLDER_VLLM_DIR / TQ_FILE).read_text()
    assert text.startswith("# SPDX-License-Identifier: Apache-2.0\n")
    assert "_reserve_workspace" not in text  # 0.21.0 ships without the reservation
    assert "current_workspace_manager().get_simultaneous(" in text
    init = (PLACEHOLDER_VLLM_DIR / "vllm" / "__init__.py").read_text()
    assert '__version__ = "0.21.0"' in init
    # Byte for byte the file of the vllm 0.21.0 wheel (its RECORD lists this sha256 as
    # 8RwolHp6L6n4Dtv-ip2qxu9_lhcXY7TIRUgou5yClTk, 36593 bytes).
    data = (PLACEHOLDER_VLLM_DIR / TQ_FILE).read_bytes()
    assert len(data) == 36593
    assert hashlib.sha256(data).hexdigest() == (
        "f11c28947a7a2fa9f80edbfe8a9daac6ef7f96171763b4c8454828bb9c829539")


def test_the_engine_detects_the_overlay(tmp_path: Path, git: str, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(CONTEXT_DIR))
    from standin_engine import vllm_config

    site = _site_copy(tmp_path)
    monkeypatch.setattr(vllm_config, "placeholder_vllm_dir", lambda: str(site / "vllm"))
    assert vllm_config.tq_workspace_reserved() is False
    assert vllm_config.tq_continuation_call_line() == 747
    subprocess.run([git, "apply", "-p1", str(PATCH)], cwd=site, check=True)
    assert vllm_config.tq_workspace_reserved() is True
    assert vllm_config.installed_vllm_version() == "0.21.0"


def test_the_engine_never_imports_servefleet() -> None:
    for path in sorted(ENGINE_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            for name in names:
                assert not name.startswith("servefleet"), f"{path}: imports {name}"


def test_dockerfiles_start_from_the_base_image_argument() -> None:
    for path in DOCKERFILES.values():
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        assert lines[0] == "ARG BASE_IMAGE"
        assert lines[1] == "FROM ${BASE_IMAGE}"
    assert 'ENTRYPOINT ["vllm", "serve"]' in DOCKERFILES["vllm"].read_text()
    assert 'ENTRYPOINT ["/app/llama-server"]' in DOCKERFILES["llama.cpp"].read_text()


def test_dockerfiles_pass_hadolint(need_program) -> None:
    hadolint = need_program("hadolint")
    result = subprocess.run([hadolint, *map(str, DOCKERFILES.values())], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr

"""Dockerfile overlays: hadolint-clean, and the patch step really applies a patch to an
installed package (and really fails when a hunk no longer matches)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servefleet.core.errors import RenderError
from servefleet.core.project import load_project
from servefleet.core.render import RenderedRelease, render_release

IMAGE_PATCH_DIR = "/tmp/servefleet-patches"


def _render(tmp_project: Any, profile: str, node: str = "dgx-spark-1") -> RenderedRelease:
    project = load_project(tmp_project.root, tmp_project.stack({node: profile}))
    return render_release(project, project.deployments()[0], {"HF_TOKEN": "t"})


def _hadolint(hadolint_bin: str, dockerfile: bytes,
              tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "Dockerfile"
    path.write_bytes(dockerfile)
    # Default settings (no config file is looked up outside the cwd we pass).
    return subprocess.run([hadolint_bin, "--no-color", str(path)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)


def test_overlay_with_patch_and_pip_is_hadolint_clean(
        tmp_project: Any, overlay_profile: Callable[..., str], hadolint_bin: str,
        tmp_path: Path) -> None:
    release = _render(tmp_project, overlay_profile(pip=["pandas==2.2.3"]))
    assert release.builds_image
    assert sorted(release.files) == [".env", "Dockerfile", "compose.yaml", "engine.env",
                                     "patches.json", "patches/01-workspace.diff"]
    result = _hadolint(hadolint_bin, release.files["Dockerfile"], tmp_path)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
    text = release.files["Dockerfile"].decode()
    assert text.splitlines()[2:5] == [
        "ARG BASE_IMAGE=vllm/vllm-openai:v0.21.0@sha256:"
        "a230095847e93bd4df9888b33dab956fa9504537b828a23657d2b26fed57b5c9",
        "FROM ${BASE_IMAGE}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
    ]
    assert "RUN python3 -m pip install --no-cache-dir pandas==2.2.3\n" in text
    assert text.endswith("COPY patches.json /etc/servefleet/patches.json\n")


def test_hadolint_check_can_fail(
        tmp_project: Any, overlay_profile: Callable[..., str], hadolint_bin: str,
        tmp_path: Path) -> None:
    """The same Dockerfile, spoiled the way a careless template would: hadolint objects."""
    text = _render(tmp_project, overlay_profile(pip=["pandas==2.2.3"])).files["Dockerfile"]
    spoiled = text.replace(b"python3 -m pip install --no-cache-dir pandas==2.2.3",
                           b"pip install pandas")
    result = _hadolint(hadolint_bin, spoiled, tmp_path)
    assert result.returncode != 0
    assert "DL3013" in result.stdout and "DL3042" in result.stdout


def test_url_patch_is_fetched_and_checked_at_build(
        tmp_project: Any, hadolint_bin: str, tmp_path: Path, kit: Any) -> None:
    sha = "0f" * 32
    tmp_project.profile("from-url", {
        "extends": "qwen36-fp8",
        "patches": [{"url": "https://github.com/vllm-project/vllm/pull/40798.diff",
                     "sha256": sha, "pr": 40798}],
    })
    release = _render(tmp_project, "from-url")
    assert "patches/01-pr40798.diff" not in release.files  # fetched at build time
    text = release.files["Dockerfile"].decode()
    assert "COPY patches/" not in text
    assert f"printf '%s  %s\\n' {sha} \"$patch\" | sha256sum -c -; \\\n" in text
    assert "https://github.com/vllm-project/vllm/pull/40798.diff \"$patch\"" in text
    result = _hadolint(hadolint_bin, release.files["Dockerfile"], tmp_path)
    assert result.returncode == 0 and result.stdout == "", result.stdout
    marker = json.loads(release.files["patches.json"])
    assert marker["patches"][0]["source"] == "https://github.com/vllm-project/vllm/pull/40798.diff"


def test_pip_only_overlay_has_no_patch_step(
        tmp_project: Any, hadolint_bin: str, tmp_path: Path) -> None:
    tmp_project.profile("pandas", {"extends": "qwen36-fp8", "pip_packages": ["pandas==2.2.3"]})
    release = _render(tmp_project, "pandas")
    text = release.files["Dockerfile"].decode()
    assert "git apply" not in text and "COPY patches/" not in text
    assert _hadolint(hadolint_bin, release.files["Dockerfile"], tmp_path).returncode == 0
    assert json.loads(release.files["patches.json"]) == {
        "base_image": "vllm/vllm-openai:v0.21.0@sha256:"
                      "a230095847e93bd4df9888b33dab956fa9504537b828a23657d2b26fed57b5c9",
        "patches": [],
        "pip_packages": ["pandas==2.2.3"],
    }


def test_every_shipped_overlay_is_hadolint_clean(
        shipped_profile: str, kit: Any, hadolint_bin: str, tmp_path: Path) -> None:
    node = kit.node_for(kit.shipped_project(), shipped_profile)
    project = kit.shipped_project([{"node": node, "profile": shipped_profile}])
    release = render_release(project, project.deployments()[0], {"HF_TOKEN": "t"})
    if not release.builds_image:
        assert "Dockerfile" not in release.files and "patches.json" not in release.files
        return
    result = _hadolint(hadolint_bin, release.files["Dockerfile"], tmp_path)
    assert result.returncode == 0 and result.stdout == "", result.stdout
    profile = project.profiles[shipped_profile]
    marker = json.loads(release.files["patches.json"])
    assert [p["sha256"] for p in marker["patches"]] == [p.sha256 for p in profile.patches]
    for entry in marker["patches"]:
        if entry["source"].startswith("profiles/"):
            assert kit.sha256(release.files[entry["file"]]) == entry["sha256"]


# --- the patch step itself, run with bash against a placeholder installed package ---------

def _patch_script(dockerfile: bytes, patch_dir: Path) -> str:
    """The overlay's patch RUN instruction as the shell script the build runs."""
    lines = dockerfile.decode().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RUN set -eux;"))
    end = start
    while lines[end].endswith("\\"):
        end += 1
    script = "\n".join(lines[start:end + 1])[len("RUN "):]
    return script.replace(IMAGE_PATCH_DIR, str(patch_dir))


def _run_patch_step(release: RenderedRelease, tmp_path: Path, engine_py: str,
                    urls: dict[str, str] | None = None,
                    ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the patch step; ``urls`` maps a patch URL to the one fetched instead (file://)."""
    for tool in ("bash", "git", "sha256sum", "find"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is needed to run the overlay's patch step")
    site = tmp_path / "site-packages"
    (site / "vllm" / "__pycache__").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "engine.py").write_text(engine_py)
    (site / "vllm" / "__pycache__" / "engine.cpython-311.pyc").write_bytes(b"stale")
    patch_dir = tmp_path / "servefleet-patches"
    patch_dir.mkdir()
    for rel, content in release.files.items():  # what `COPY patches/ …` does
        if rel.startswith("patches/"):
            (patch_dir / rel.removeprefix("patches/")).write_bytes(content)
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    script = _patch_script(release.files["Dockerfile"], patch_dir)
    for url, replacement in (urls or {}).items():
        assert url in script
        script = script.replace(url, replacement)
    result = subprocess.run(["bash", "-o", "pipefail", "-c", script],
                            capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    return result, site


def test_patch_step_applies_to_the_installed_package(
        tmp_project: Any, overlay_profile: Callable[..., str], kit: Any,
        tmp_path: Path) -> None:
    release = _render(tmp_project, overlay_profile())
    result, site = _run_patch_step(release, tmp_path, kit.engine_py)
    assert result.returncode == 0, result.stderr
    assert (site / "vllm" / "engine.py").read_text() == \
        "def reserve():\n    return 4096\n# end\n"
    compiled = sorted((site / "vllm" / "__pycache__").glob("*.pyc"))
    assert [p.name.split(".")[0] for p in compiled] == ["__init__", "engine"]
    assert all(p.read_bytes() != b"stale" for p in compiled)  # recompiled from the patch
    assert not (site / "tests").exists()  # the diff's tests/ hunk is not for the package


def test_patch_step_fails_on_a_patch_that_breaks_the_syntax(
        tmp_project: Any, overlay_profile: Callable[..., str], kit: Any,
        tmp_path: Path) -> None:
    broken = kit.patch_diff.replace(b"+    return 4096", b"+    return (4096")
    release = _render(tmp_project, overlay_profile(diff=broken))
    result, _ = _run_patch_step(release, tmp_path, kit.engine_py)
    assert result.returncode != 0
    assert "SyntaxError" in result.stdout + result.stderr


def test_patch_step_fails_loudly_when_a_hunk_no_longer_matches(
        tmp_project: Any, overlay_profile: Callable[..., str], tmp_path: Path) -> None:
    release = _render(tmp_project, overlay_profile())
    drifted = "def reserve():\n    return 1\n# end\n"  # the installed version moved on
    result, site = _run_patch_step(release, tmp_path, drifted)
    assert result.returncode != 0
    assert "patch does not apply" in result.stderr
    assert (site / "vllm" / "engine.py").read_text() == drifted


def test_patch_step_refuses_a_patch_that_changes_nothing_in_the_package(
        tmp_project: Any, overlay_profile: Callable[..., str], kit: Any,
        tmp_path: Path) -> None:
    name = overlay_profile()
    profile_file = tmp_project.root / "profiles" / f"{name}.yaml"
    profile_file.write_text(profile_file.read_text().replace("pr: 40798", "pr: 40798\n  strip: 2"))
    release = _render(tmp_project, name)
    result, site = _run_patch_step(release, tmp_path, kit.engine_py)
    assert result.returncode != 0
    assert "01-workspace.diff changes no file of package vllm" in result.stderr
    assert (site / "vllm" / "engine.py").read_text() == kit.engine_py


@pytest.mark.parametrize("pinned_matches", [True, False])
def test_url_patch_step_checks_the_download_before_applying(
        pinned_matches: bool, tmp_project: Any, kit: Any, tmp_path: Path) -> None:
    url = "https://github.com/vllm-project/vllm/pull/40798.diff"
    tmp_project.profile("from-url", {
        "extends": "qwen36-fp8",
        "patches": [{"url": url, "pr": 40798,
                     "sha256": kit.sha256(kit.patch_diff) if pinned_matches else "2" * 64}],
    })
    release = _render(tmp_project, "from-url")
    served = tmp_path / "served.diff"  # stands in for the download
    served.write_bytes(kit.patch_diff)
    result, site = _run_patch_step(release, tmp_path, kit.engine_py,
                                   urls={url: served.as_uri()})
    patched = (site / "vllm" / "engine.py").read_text()
    if pinned_matches:
        assert result.returncode == 0, result.stderr
        assert patched == "def reserve():\n    return 4096\n# end\n"
    else:
        assert result.returncode != 0
        assert "FAILED" in result.stdout + result.stderr
        assert patched == kit.engine_py


def test_patch_sha_mismatch_names_profile_file_and_both_hashes(
        tmp_project: Any, overlay_profile: Callable[..., str], kit: Any) -> None:
    declared = "1" * 64
    name = overlay_profile(declared_sha=declared)
    actual = kit.sha256(kit.patch_diff)
    with pytest.raises(RenderError) as caught:
        _render(tmp_project, name)
    assert str(caught.value) == (
        f"dgx-spark-1/main: profile {name}: profiles/{name}.yaml: patches[0].sha256: patch "
        f"file profiles/patches/workspace.diff has sha256 {actual} but the profile pins "
        f"{declared}; if the new diff is intended, set patches[0].sha256 to {actual}, "
        "otherwise restore the file"
    )


def test_missing_patch_file_and_unpinned_pip_are_errors(
        tmp_project: Any, overlay_profile: Callable[..., str]) -> None:
    name = overlay_profile()
    (tmp_project.root / "profiles" / "patches" / "workspace.diff").unlink()
    with pytest.raises(RenderError, match=r"patch file profiles/patches/workspace\.diff does "
                                          r"not exist"):
        _render(tmp_project, name)
    tmp_project.profile("loose", {"extends": "qwen36-fp8", "pip_packages": ["pandas>=2"]})
    with pytest.raises(RenderError, match=r"pip package 'pandas>=2' is not pinned"):
        _render(tmp_project, "loose")


def test_patch_error_names_the_file_that_declares_the_patch(
        tmp_project: Any, overlay_profile: Callable[..., str]) -> None:
    parent = overlay_profile(declared_sha="3" * 64)
    tmp_project.profile("child", {"extends": parent, "vllm": {"max_num_seqs": 8}})
    with pytest.raises(RenderError, match=rf"profile child: profiles/{parent}\.yaml: "
                                          r"patches\[0\]\.sha256: patch file "
                                          r"profiles/patches/workspace\.diff has sha256"):
        _render(tmp_project, "child")

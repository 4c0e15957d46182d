"""The built wheel renders: it carries ``templates/`` and ``healthchecks/`` and finds them;
and ``servefleet init`` from it writes a config repo that validates, from its own
``profiles/``.

The sources are copied to a temporary folder and built there (``pip wheel``, nothing written
into the checkout); the wheel is installed with ``--no-deps`` into a fresh virtual
environment whose dependencies come from this test environment's site-packages (a ``.pth``
line, so nothing is downloaded but the build backend), and ``servefleet render`` runs from
that environment in a folder far from the checkout, on a copy of the project without
``templates/``, so only the wheel's own copy can serve. ``servefleet init`` then runs there
in an empty folder, and ``servefleet validate --stack home`` on what it wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.reference_project import REPO_ROOT

SOURCES = ("pyproject.toml", "setup.py", "README.md", "servefleet", "templates", "healthchecks",
           "profiles", "scenarios")


def _run(argv: list[str], cwd: Path, timeout: int = 300,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            check=False, env=env)
    assert result.returncode == 0, (argv, result.stdout[-2000:], result.stderr[-4000:])
    return result


def install_built_wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of the sources and install it (``--no-deps``) into a
    fresh virtual environment under ``tmp_path``; returns that environment's folder (its
    ``bin/servefleet`` is the wheel's)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy(path, source / name)
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
          str(source)], cwd=tmp_path)
    (wheel,) = wheels.glob("servefleet-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                            "['purelib'])"], cwd=tmp_path).stdout.strip())
    # Dependencies (pydantic, jinja2…) from this environment; servefleet only from the wheel.
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
          str(wheel)], cwd=tmp_path)
    return env_dir


@pytest.mark.slow
def test_built_wheel_renders_and_inits_from_its_own_data(tmp_path: Path) -> None:
    env_dir = install_built_wheel(tmp_path)
    python = env_dir / "bin" / "python"

    project = tmp_path / "project"
    for folder in ("nodes", "profiles"):
        shutil.copytree(REPO_ROOT / folder, project / folder,
                        ignore=shutil.ignore_patterns("sim", "__pycache__"))
    shutil.copy(REPO_ROOT / "Pulumi.reference.yaml", project / "Pulumi.reference.yaml")
    where = json.loads(_run([str(python), "-c", (
        "import json, servefleet\n"
        "from servefleet.core.render.templating import BUILTIN_TEMPLATES\n"
        "from servefleet.core.bootlog.failures import healthchecks_dir, signature_table\n"
        "from servefleet.core.resources import shipped_dir\n"
        "import servefleet.adapters.pulumi_program\n"  # what an init repo's __main__ imports
        "signature_table()\n"
        "print(json.dumps([servefleet.__file__, str(BUILTIN_TEMPLATES),"
        " str(healthchecks_dir()), str(shipped_dir('profiles'))]))")], cwd=project).stdout)
    for path in where:
        assert Path(path).is_relative_to(env_dir), where  # not the checkout's copies
        assert not Path(path).is_relative_to(REPO_ROOT), where

    out = tmp_path / "out"
    result = _run([str(env_dir / "bin" / "servefleet"), "--project", str(project), "--stack",
                   "reference", "render", "--all", "--out", str(out)], cwd=project)
    assert "Traceback" not in result.stderr
    compose = out / "dgx-spark-1" / "main" / "compose.yaml"
    assert compose.is_file(), sorted(str(p) for p in out.rglob("*"))
    assert "vllm" in compose.read_text()
    assert (out / "rtx5090" / "main" / "engine.env").stat().st_mode & 0o777 == 0o600

    # An operator's first step: `servefleet init` far from the checkout, then validate there.
    far = tmp_path / "operator"
    far.mkdir()
    servefleet = str(env_dir / "bin" / "servefleet")
    bare = {k: v for k, v in os.environ.items()
            if k not in ("SERVEFLEET_STACK", "SERVEFLEET_PROJECT")}
    created = _run([servefleet, "init", "fleet"], cwd=far, env=bare)
    assert "Traceback" not in created.stderr
    assert "  created        profiles/patches/vllm-pr40798-turboquant-workspace.diff" in \
        created.stdout
    assert "kept (exists)" not in created.stdout
    fleet = far / "fleet"
    assert {p.name for p in (fleet / "profiles").glob("*.yaml")} == {
        p.name for p in (REPO_ROOT / "profiles").glob("*.yaml")}
    checked = _run([servefleet, "validate", "--stack", "home"], cwd=fleet / "profiles",
                   env=bare)
    assert checked.stdout.splitlines()[-1].startswith("stack home: 0 error(s), 0 warning(s)")
    again = _run([servefleet, "init", str(fleet)], cwd=far, env=bare)
    assert "  created " not in again.stdout

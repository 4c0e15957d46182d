"""scripts/ensure-pulumi gives a working Pulumi CLI, and scripts/pulumi-env a local backend.

The first run on a machine builds the CLI from the Go module proxy (minutes); later runs use
the cache under ``${SERVEFLEET_CACHE:-~/.cache/servefleet}/pulumi``. In CI a CLI that cannot
be obtained fails these tests; elsewhere they are skipped with the script's reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import NoReturn

import pytest

from tests.reference_project import REPO_ROOT

# A cold build compiles the whole CLI on two cores; give it room, a cache hit needs none.
BUILD_TIMEOUT_S = 45 * 60
pytestmark = [pytest.mark.pulumi, pytest.mark.timeout(BUILD_TIMEOUT_S + 120)]

SCRIPT = REPO_ROOT / "scripts" / "ensure-pulumi"
ENV_SCRIPT = REPO_ROOT / "scripts" / "pulumi-env"
BUILD_INFO = ".servefleet-pulumi.json"
HELPERS = ("pulumi-language-python-exec", "pulumi-resource-pulumi-python")


def component_unavailable(reason: str) -> NoReturn:
    """The project rule for real components (as in tests/conftest.py): fail in CI, else skip."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} (CI=true: the Pulumi CLI must be obtainable)", pytrace=False)
    pytest.skip(reason)


def cache_root() -> Path:
    """Where the script caches its builds (same rule as the script)."""
    base = os.environ.get("SERVEFLEET_CACHE") or str(Path.home() / ".cache" / "servefleet")
    return Path(base).expanduser().resolve() / "pulumi"


def run_script(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ensure-pulumi with the test's interpreter (the one that has the SDK)."""
    return subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env=env if env is not None else dict(os.environ),
        check=False,
    )


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    """The bin dir the script prints (building the CLI once if it is not cached)."""
    proc = run_script()
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        component_unavailable(f"scripts/ensure-pulumi could not obtain the Pulumi CLI:\n{tail}")
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"stdout must hold only the bin dir, got {proc.stdout!r}"
    path = Path(lines[0])
    assert path.is_dir(), path
    return path


def is_cached_build(path: Path) -> bool:
    root = cache_root()
    return path.resolve() == root or root in path.resolve().parents


def pulumi_version(path: Path) -> str:
    out = subprocess.run(
        [str(path / "pulumi"), "version"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        check=True,
    )
    return out.stdout.strip()


def test_script_is_executable() -> None:
    assert os.access(SCRIPT, os.X_OK)


def test_bin_dir_has_cli_language_host_and_helpers(bin_dir: Path) -> None:
    names = ["pulumi", "pulumi-language-python"]
    if is_cached_build(bin_dir):
        names += HELPERS
    for name in names:
        exe = bin_dir / name
        assert exe.is_file() and os.access(exe, os.X_OK), f"{exe} missing or not executable"


def test_pulumi_version_matches_the_build(bin_dir: Path) -> None:
    version = pulumi_version(bin_dir)
    assert version.startswith("v3."), version
    if not is_cached_build(bin_dir):
        return  # the user's own CLI: any v3 will do
    info = json.loads((bin_dir / BUILD_INFO).read_text())
    sdk = metadata.version("pulumi")
    assert info["sdk_version"] == sdk, "the cache must belong to the installed SDK"
    assert version == f"v{info['cli_version']}"
    cli = tuple(int(p) for p in str(info["cli_version"]).split("."))
    # Never newer than the SDK; older only when the proxy lacks the SDK's own release.
    assert cli <= tuple(int(p) for p in sdk.split("."))


def test_cached_run_is_fast_and_builds_nothing(bin_dir: Path) -> None:
    if not is_cached_build(bin_dir):
        component_unavailable("a pulumi on PATH is used; there is no cache to hit")
    # No Go toolchain reachable: a run that tried to build would fail.
    env = {**os.environ, "SERVEFLEET_GO": "/nonexistent/go"}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "go").exists()
    )
    started = time.monotonic()
    proc = run_script(env)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(bin_dir)]
    assert "using cached" in proc.stderr
    assert elapsed < 3.0, f"cache hit took {elapsed:.2f} s"


@pytest.mark.slow
def test_dynamic_provider_up_and_destroy_on_a_file_backend(bin_dir: Path, tmp_path: Path) -> None:
    """`pulumi up` / `destroy` of a Python program with a dynamic provider, via pulumi-env."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        "name: ensure-pulumi-probe\nruntime:\n  name: python\n  options:\n    toolchain: pip\n"
    )
    (project / "__main__.py").write_text(
        "import pulumi\n"
        "from pulumi.dynamic import CreateResult, Resource, ResourceProvider\n\n\n"
        "class Provider(ResourceProvider):\n"
        "    def create(self, props):\n"
        "        return CreateResult(id_='made-' + props['label'], outs=props)\n\n\n"
        "class Thing(Resource):\n"
        "    def __init__(self, name, label):\n"
        "        super().__init__(Provider(), name, {'label': label})\n\n\n"
        "thing = Thing('thing', 'alpha')\n"
        "pulumi.export('thing_id', thing.id)\n"
    )
    state = tmp_path / "state"
    env = {
        **os.environ,
        "SERVEFLEET_STATE_DIR": str(state),
        "PULUMI_HOME": str(tmp_path / "pulumi-home"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("PULUMI_CONFIG_PASSPHRASE", None)
    env.pop("PULUMI_CONFIG_PASSPHRASE_FILE", None)
    steps = (
        "pulumi stack init test --non-interactive",
        "pulumi up --yes --skip-preview --non-interactive",
        "pulumi stack output thing_id",
        "pulumi destroy --yes --non-interactive",
        "pulumi stack export",
    )
    outputs = []
    for step in steps:
        proc = subprocess.run(
            ["bash", "-c", f'. "$1" >/dev/null && {step}', "pulumi-env", str(ENV_SCRIPT)],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, f"{step}:\n{proc.stdout}\n{proc.stderr}"
        outputs.append(proc.stdout)
    assert outputs[2].strip() == "made-alpha"
    assert (state / ".pulumi" / "stacks").is_dir(), "state must live in the file backend"
    assert (state / ".passphrase").stat().st_mode & 0o077 == 0
    resources = json.loads(outputs[4])["deployment"].get("resources") or []
    assert resources == [], "destroy must leave no resources"

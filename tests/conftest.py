"""Fixtures shared by every test package: the simulated fleet, the rule for components
that cannot start (fail in CI, skip elsewhere), and the real ``servefleet`` CLI.

The fleet is brought up once per test session (``sim_fleet``) and stopped at its end, unless
another session still uses it or it was already running before (then it is left as found).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from click.testing import CliRunner, Result

from servefleet.sim.testbed import FleetHandle

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"


def in_ci() -> bool:
    """Whether the tests run in CI (``CI=true``), where every component must start."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def component_unavailable(reason: str) -> NoReturn:
    """A real component (sshd, dockerd, compose, hadolint, pulumi) cannot run here: in CI
    the test fails, elsewhere it is skipped with ``reason``."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: every component must start here)", pytrace=False)
    pytest.skip(reason)


def require_program(name: str) -> str:
    """Absolute path of a program, or :func:`component_unavailable`."""
    found = shutil.which(name) or shutil.which(
        name, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        component_unavailable(f"{name} is not installed (scripts/bootstrap installs it)")
    return found


@pytest.fixture(scope="session")
def need_program() -> Callable[[str], str]:
    """:func:`require_program` as a fixture: ``need_program("docker-compose")`` gives the
    binary's path, or fails (CI) / skips (elsewhere) the test."""
    return require_program


@pytest.fixture(scope="session")
def run_cli() -> Callable[..., Result]:
    """The real ``servefleet`` group, every command registered, run through click's runner:
    ``run_cli(*args, project=None, stack=None, env=None, input=None,
    catch_exceptions=False)`` gives click's ``Result``.

    ``project`` and ``stack`` become ``--project``/``--stack`` when given. Unexpected
    exceptions propagate by default, so a crash can never pass for an exit code of 1.
    """
    from servefleet.cli.main import build_cli

    app = build_cli()

    def run(*args: str, project: Path | None = None, stack: str | None = None,
            env: dict[str, str] | None = None, input: str | None = None,
            catch_exceptions: bool = False) -> Result:
        options = [*(["--project", str(project)] if project is not None else []),
                   *(["--stack", stack] if stack is not None else [])]
        return CliRunner().invoke(app, [*options, *args], env=env, input=input,
                                  catch_exceptions=catch_exceptions)

    return run


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` (real fixtures); tests that need it skip when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"shared fixtures not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def sim_requirements() -> None:
    """Root and the programs the simulated fleet runs, or fail (CI) / skip."""
    if os.geteuid() != 0:
        component_unavailable("the simulated fleet needs root (network namespaces, dockerd)")
    for program in ("ip", "nsenter", "sshd", "ssh", "ssh-keygen", "dockerd", "containerd",
                    "docker"):
        require_program(program)


@pytest.fixture(scope="session")
def sim_standin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in build context: ``servefleet/sim/standin`` once it has its Dockerfiles,
    else a placeholder (same content every session, so its images are built once)."""
    from servefleet.sim import fleet, testbed

    if (fleet.STANDIN_DIR / "Dockerfile.vllm").is_file():
        return fleet.STANDIN_DIR
    return testbed.write_placeholder_context(tmp_path_factory.mktemp("standin-placeholder"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the simulated fleet is a ``fleet`` test, marked or not: a
    ``-m "not fleet"`` run must never start, join or reconfigure the shared fleet (it
    would flip the stand-in markers under a fleet run going on beside it)."""
    for item in items:
        if "sim_fleet" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.fleet)


@pytest.fixture(scope="session")
def sim_fleet(sim_requirements: None, sim_standin_dir: Path) -> Iterator[FleetHandle]:
    """The simulated fleet (three nodes like the reference fleet), up for the session.

    Yields a :class:`servefleet.sim.testbed.FleetHandle`; its inventory is in
    ``<repo>/nodes/sim``. ``handle.standin_is_real`` says whether the images were built from
    ``servefleet/sim/standin`` or from the placeholder.
    """
    from servefleet.core.errors import SimError
    from servefleet.sim import fleet, testbed

    config = fleet.FleetConfig(standin_dir=sim_standin_dir)
    try:
        handle = testbed.acquire(REPO_ROOT, config)
    except SimError as error:
        component_unavailable(f"the simulated fleet did not start: {error}")
    # Rollout mechanics (locks, uploads, restores, faults) are tested on the stand-in, whose
    # boots take seconds; tests of the real engines ask for them (``real_engines``).
    for name in handle.nodes:
        handle.run_standin(name)
    try:
        yield handle
    finally:
        for name in handle.nodes:
            handle.run_standin(name, ())
        testbed.release(handle)


@pytest.fixture(scope="module")
def real_engines(sim_fleet: FleetHandle) -> Iterator[FleetHandle]:
    """The fleet with the real engines (CPU builds) on every node for this module; a machine
    where they cannot be built or installed fails (CI) / skips here."""
    from servefleet.core.errors import SimError
    from servefleet.sim.engines.ensure import ENGINE_NAMES, ensure_engines

    try:
        ensure_engines(ENGINE_NAMES, lambda _: None)
    except SimError as error:
        component_unavailable(f"the real engines are not ready: {error}")
    for name in sim_fleet.nodes:
        sim_fleet.run_standin(name, ())
    try:
        yield sim_fleet
    finally:
        for name in sim_fleet.nodes:
            sim_fleet.run_standin(name)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of its own (64 inodes, 1 MiB) mounted on a fresh folder, for tests of a full
    disk; needs root (fails in CI without it, skips elsewhere)."""
    from servefleet.sim import node_faults

    if os.geteuid() != 0:
        component_unavailable("mounting a tmpfs needs root")
    folder = tmp_path / "disk"
    node_faults.mount_small_disk(folder, inodes=64, size_mib=1)
    try:
        yield folder
    finally:
        node_faults.unmount_small_disk(folder)

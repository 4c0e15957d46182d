"""Fixtures shared by every test package: the simulated fleet, the rule for components
that cannot start (fail in CI, skip elsewhere), and the real ``servefleet`` CLI.

The fleet is brought up once per test session (``sim_fleet``) and stopped at its end, unless
another session still uses it or it was already running before (then it is left as found).
Two test sessions on one machine take turns with the fleet: their tests deploy the same
deployments to the same nodes, so the second waits for the first (:func:`fleet_tests_turn`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from click.testing import CliRunner, Result

from servefleet.sim.hub import LocalHub
from servefleet.sim.testbed import FleetHandle
from tests.reference_project import REPO_ROOT
from tests.shared_data import shared_missing

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


@pytest.fixture
def hub() -> Iterator[LocalHub]:
    """A local Hugging Face hub (:mod:`servefleet.sim.hub`) on 127.0.0.1 for one test."""
    with LocalHub() as served:
        yield served


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
        shared_missing(f"shared fixtures not found at {SHARED}")
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


@contextlib.contextmanager
def fleet_tests_turn(state_dir: Path) -> Iterator[None]:
    """Hold the machine's turn at the fleet tests for the session: ``flock`` on
    ``<state_dir>/fleet-tests.lock``, waited for (and said so on the terminal) while another
    session holds it. The kernel lets go when a session dies, so no turn is left stale."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "fleet-tests.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "?"
            started = time.monotonic()
            print(f"\nthe simulated fleet's tests are running in another session ({holder}); "
                  "waiting for its turn to end", file=sys.__stderr__, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print(f"the fleet is ours after {time.monotonic() - started:.0f} s",
                  file=sys.__stderr__, flush=True)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} in {os.getcwd()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


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
    with fleet_tests_turn(config.state_dir):
        try:
            handle = testbed.acquire(REPO_ROOT, config)
        except SimError as error:
            component_unavailable(f"the simulated fleet did not start: {error}")
        # Rollout mechanics (locks, uploads, restores, faults) are tested on the stand-in,
        # whose boots take seconds; tests of the real engines ask for them (``real_engines``).
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

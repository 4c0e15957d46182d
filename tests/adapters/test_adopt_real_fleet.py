"""``servefleet import`` and adoption against real engines and a real Docker Engine, on the
simulated fleet: no secret value crosses the wire, and an engine started by hand on the
real vLLM CPU build or the real ``llama-server`` is imported and taken over without a
restart (the same container, the same start time).

The import's SSH transport is wrapped to keep everything it sent and received: a secret
value (a canary) set in the container's environment, and in its command line, must appear
in none of it.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from servefleet.adapters import importer
from servefleet.adapters.runtime import CommandResult
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.adopt.inspect import SECRET_VALUE
from servefleet.core.project import Project, load_project
from servefleet.sim.testbed import FleetHandle
from tests.adapters.test_adopt_fleet import (
    DEP,
    PORT,
    SECRETS,
    adopt_and_check,
    compose_argv,
    config_repo_without,
    docker_run_argv,
    hand_files,
)
from tests.fleet_helpers import http_get, wiped_project

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

CANARY = SECRETS["HF_TOKEN"]
"""The hand-started engine's token: the adopting deploy renders the same one."""
REAL_BOOT_SECONDS = 420
"""The real engines on the test machine's shared cores: vLLM's CPU build takes minutes."""


class Wire:
    """Everything the import's transports sent (argv, stdin) and received (stdout,
    stderr), every command counted."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.received: list[str] = []

    def connect(self) -> Callable[..., SshTransport]:
        """:func:`servefleet.adapters.runtime.connect`, recording what goes over the wire."""
        wire = self

        class Recorded(SshTransport):
            def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                    **kwargs: Any) -> CommandResult:
                wire.sent.append(shlex.join(argv) + "\n" + (stdin or b"").decode())
                done = super().run(argv, stdin=stdin, **kwargs)
                wire.received.append(done.stdout.decode() + "\n" + done.stderr.decode())
                return done

        return lambda node, **kwargs: Recorded(node, **kwargs)

    def everything(self) -> str:
        return "\n".join([*self.sent, *self.received])


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    recorded = Wire()
    monkeypatch.setattr(importer, "connect", recorded.connect())
    return recorded


def _remove_handmade(fleet: FleetHandle) -> None:
    for name in fleet.nodes:
        fleet.ssh(name, "ids=$(docker ps -aq --filter name=^handmade); "
                        '[ -z "$ids" ] || docker rm -f $ids >/dev/null')


def test_import_reads_no_secret_value_from_docker(sim_fleet: FleetHandle, wire: Wire) -> None:
    """A container (created, never started) whose environment and command line hold
    secrets: the template masks them on the node, before anything crosses the wire."""
    node = "sim-5090"
    project = load_project(sim_fleet.project_dir, "sim")
    token, password, listed, flag, inline = (
        "hf_canaryTokenValue0001", "canaryPasswordValue0002", "canaryListedValue0003",
        "sk-canaryFlagValue0004", "canaryInlineFlagValue0005")
    _remove_handmade(sim_fleet)
    try:
        sim_fleet.ssh(node, shlex.join([
            "docker", "create", "--name", "handmade-secrets", "--entrypoint", "vllm",
            "-e", f"HF_TOKEN={token}", "-e", f"DB_PASSWORD={password}",
            "-e", f"OPERATOR_CREDS={listed}", "-e", "VLLM_LOGGING_LEVEL=DEBUG",
            "servefleet-sim/vllm-standin:latest", "serve", "Qwen/Qwen3.6-35B-A3B-FP8",
            "--api-key", flag, "--hf_token=" + inline, "--served-model-name",
            f"served-{token}", "--max-num-batched-tokens", "8192"]))
        engines = importer.read_engines(project.nodes[node], secret_names={"OPERATOR_CREDS"})
    finally:
        _remove_handmade(sim_fleet)
    # The transport carried the inspect (a floor: the container's own document came back).
    assert len(wire.sent) == 1 and len(wire.received) == 1
    assert '"Name":"/handmade-secrets"' in wire.received[0]
    assert '"VLLM_LOGGING_LEVEL=DEBUG"' in wire.received[0]  # a plain value does cross
    for value in (token, password, listed, flag, inline):
        assert value not in wire.everything(), value
    [engine] = [e for e in engines if e.container == "handmade-secrets"]
    assert engine.engine == "vllm"
    assert set(engine.secret_env) == {"HF_TOKEN", "DB_PASSWORD", "OPERATOR_CREDS"}
    assert engine.env.get("VLLM_LOGGING_LEVEL") == "DEBUG"
    assert engine.argv == ("Qwen/Qwen3.6-35B-A3B-FP8", "--api-key", SECRET_VALUE,
                           f"--hf_token={SECRET_VALUE}", "--served-model-name", SECRET_VALUE,
                           "--max-num-batched-tokens", "8192")


@pytest.fixture(scope="module")
def fleet(real_engines: FleetHandle) -> FleetHandle:
    return real_engines


@pytest.fixture
def project(fleet: FleetHandle) -> Iterator[Project]:
    """The sim project on nodes that run no engine (see test_adopt_fleet's)."""
    fleet.remove_engines()
    yield from wiped_project(fleet, DEP)
    fleet.remove_engines()


def wait_serving(project: Project, node: str) -> None:
    deadline = time.monotonic() + REAL_BOOT_SECONDS
    while time.monotonic() < deadline:
        try:
            if http_get(project.nodes[node], PORT, "/health", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(2)
    pytest.fail(f"the hand-started engine on {node} did not serve within "
                f"{REAL_BOOT_SECONDS} s")


@pytest.mark.parametrize(("node", "profile", "how"), [
    ("sim-5090", "qwen36-q4-llamacpp", "compose"),
    ("sim-spark-2", "qwen36-fp8", "run"),
], ids=["llamacpp-compose", "vllm-docker-run"])
def test_a_real_engine_started_by_hand_is_imported_and_adopted_without_a_restart(
        fleet: FleetHandle, project: Project, run_cli: Callable[..., Result], wire: Wire,
        tmp_path: Path, node: str, profile: str, how: str) -> None:
    folder, rendered = hand_files(project, node, profile)
    # The operator's token, in the engine's environment (both engines: llama.cpp's profile
    # names no secret, the hand-started container has one anyway).
    env_file = folder / "engine.env"
    if f"HF_TOKEN={CANARY}" not in env_file.read_text():
        env_file.write_text(env_file.read_text() + f"HF_TOKEN={CANARY}\n")
    if how == "compose":
        fleet.ssh(node, compose_argv(folder, rendered, "up", "-d"))
        container = "handmade-engine-1"
    else:
        fleet.ssh(node, docker_run_argv(fleet, node, folder, rendered))
        container = "handmade-run"
    wait_serving(project, node)
    # The real engine, not the stand-in: its own process runs behind the CPU twin.
    process = fleet.ssh(node, f"docker inspect --format '{{{{.Path}}}} {{{{json .Args}}}}' "
                              f"{container}").stdout
    assert "/opt/servefleet-sim/cpu_twin.py" in process, process
    env = fleet.ssh(node, f"docker inspect --format '{{{{json .Config.Env}}}}' {container}")
    assert f"HF_TOKEN={CANARY}" in env.stdout  # the canary is there to be leaked

    repo = config_repo_without(node, tmp_path)
    done = run_cli("import", node, "--deployment", DEP, "--write", project=repo, stack="sim")
    assert done.exit_code == 0, done.output
    # What crossed the wire: the container's document came back, its token's name did, its
    # value did not, nor is it in anything import printed or wrote.
    assert wire.received and f'"Name":"/{container}"' in "".join(wire.received)
    assert '"HF_TOKEN"' in "".join(wire.received)
    assert CANARY not in wire.everything()
    assert CANARY not in done.output
    for path in [*repo.rglob("*.yaml")]:
        assert CANARY not in path.read_text(), path
    imported = load_project(repo, "sim")
    [placed_dep] = imported.stack.for_node(node)
    assert (placed_dep.name, placed_dep.port, placed_dep.adopt) == (DEP, PORT, container)
    assert imported.profiles[placed_dep.profile].extends == profile, done.output
    assert "HF_TOKEN" in imported.profiles[placed_dep.profile].secret_env
    # Adopted: plan says adopt, the deploy restarts nothing (container id and start time
    # unchanged), then plan is unchanged and drift is clean.
    adopt_and_check(fleet, imported, node, placed_dep.profile, container)

"""One set of behaviour checks, run against every runtime the factory can produce
(:func:`servefleet.adapters.runtime.implementations`): what the rest of servefleet relies
on when it talks to a node through :func:`~servefleet.adapters.runtime.connect` and
:func:`~servefleet.adapters.runtime.runtime_for`, whatever reaches the node.

Each implementation brings a test bed (:data:`BEDS`): a project with one deployment on a
node the implementation reaches, for real, without the fleet. SSH + Compose: a loopback
``sshd`` whose sessions find the fake Docker (:mod:`fake_docker`) first on their ``PATH``.
The engine's health gate is the only part replaced (no engine answers here): it passes when
the runtime says the release's container runs.
"""

from __future__ import annotations

import dataclasses
import re
import stat
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import pytest
from fake_node import FAKE_DOCKER
from loopback_sshd import LoopbackSshd, free_port

from servefleet.adapters.health_gate import HealthReport
from servefleet.adapters.rollout import (
    Abort,
    DeploymentResult,
    NodeResult,
    NodeRollout,
    Target,
    render_for,
)
from servefleet.adapters.runtime import (
    NodeRuntime,
    Transport,
    connect,
    implementation,
    implementations,
    runtime_for,
)
from servefleet.core.errors import CommandTimedOut, RemoteError
from servefleet.core.health_table import CheckRow
from servefleet.core.models import Deployment, Node
from servefleet.core.project import Project, load_project
from servefleet.core.secrets import SecretMask
from tests.reference_project import REPO_ROOT

NODE = "rtx5090"
PROFILE = "qwen36-q4-llamacpp"
SECRETS = {"HF_TOKEN": "hf_contract_test_secret"}
PACKAGE = Path(__file__).resolve().parents[3] / "servefleet"


@dataclasses.dataclass
class Bed:
    """A node one implementation reaches, and the project that deploys to it."""

    name: str
    """The implementation's name (:attr:`Implementation.name`)."""
    project: Project
    """The reference project with deployment ``main`` of :data:`PROFILE` on :data:`NODE`."""

    @property
    def node(self) -> Node:
        return self.project.nodes[NODE]

    def connect(self, secrets: dict[str, str] | None = None) -> Transport:
        """The node's connection, as every entry point opens it."""
        return connect(self.node, mask=SecretMask.from_mapping(secrets or SECRETS))


def _project(node_update: dict[str, object]) -> Project:
    """The reference project with one deployment on :data:`NODE`, moved by
    ``node_update`` (where and how it is reached, its base directory) to a free port."""
    project = load_project(REPO_ROOT, "reference")
    port = free_port()
    node = project.nodes[NODE].model_copy(update={**node_update, "ports": [port]})
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=NODE, name="main", profile=PROFILE, port=port)]})
    return dataclasses.replace(project, nodes={**project.nodes, NODE: node}, stack=stack)


def _ssh_compose_bed(request: pytest.FixtureRequest, tmp_path: Path) -> Bed:
    """A loopback sshd; ``docker`` (and the node's clock, ``date``) are the fake Docker."""
    sshd: LoopbackSshd = request.getfixturevalue("sshd")
    bin_dir = tmp_path / "bin"  # first on the sshd sessions' PATH
    state = tmp_path / "docker.json"
    for name, args in (("docker", ""), ("date", "__date ")):
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\nFAKE_DOCKER_STATE={state} exec {sys.executable} -S -E "
                        f"{FAKE_DOCKER} {args}\"$@\"\n")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    reached = sshd.node()
    return Bed("ssh+compose", _project({"address": reached.address, "ssh": reached.ssh,
                                        "base_dir": str(tmp_path / "srv")}))


BEDS: dict[str, Callable[[pytest.FixtureRequest, Path], Bed]] = {
    "ssh+compose": _ssh_compose_bed,
}
"""Implementation name → its test bed. A runtime the factory can produce without a bed
here fails :func:`bed`: a new runtime comes with the bed that holds it to this contract."""


@pytest.fixture(params=[i.name for i in implementations()])
def bed(request: pytest.FixtureRequest, tmp_path: Path) -> Bed:
    make = BEDS.get(request.param)
    if make is None:
        pytest.fail(f"runtime {request.param!r} has no test bed in BEDS", pytrace=False)
    return make(request, tmp_path)


class ContainerGateRollout(NodeRollout):
    """A rollout whose gate asks the runtime only: it passes when the target release's
    container runs."""

    def gate(self, result: DeploymentResult, target: Target, since: str,
             deadline: float) -> HealthReport:
        with self.phase(result, "health"):
            running = [c for c in self.runtime.containers(target.deployment) if c.running]
            ok = bool(running) and running[0].release_id == target.release_id
            verdict: Literal["pass", "fail"] = "pass" if ok else "fail"
            row = CheckRow("release container runs", target.release_id,
                           running[0].release_id or "?" if running else "none", verdict)
            return HealthReport(f"http://{self.node.address}:{target.port}", (row,),
                                None if ok else "engine_unhealthy")


def _deploy(bed: Bed, runtime: NodeRuntime) -> tuple[NodeResult, str]:
    """Deploy the bed's one deployment through ``runtime``; the result and release id."""
    [rendered] = render_for(bed.project, [NODE], SECRETS)
    rollout = ContainerGateRollout(bed.project, bed.node, runtime, secrets=SECRETS,
                                   abort=Abort())
    return rollout.deploy([rendered], {"main": bed.project.stack.deployments[0]}), \
        rendered.release_id


# -- the factory ---------------------------------------------------------------------------
def test_the_factory_reaches_the_bed_s_node_with_its_implementation(bed: Bed) -> None:
    assert implementation(bed.node).name == bed.name
    with bed.connect() as transport:
        assert transport.node == bed.node
        assert runtime_for(transport).node == bed.node


# -- the transport -------------------------------------------------------------------------
def test_a_command_gets_its_input_and_returns_output_and_exit_status(bed: Bed) -> None:
    with bed.connect() as transport:
        done = transport.run(["sh", "-c", "cat; echo out; echo err >&2; exit 3"],
                             stdin=b"in\n", check=False)
        assert (done.exit_status, done.ok) == (3, False)
        assert done.text() == "in\nout\n"
        assert done.stderr == b"err\n"
        assert transport.run(["true"]).ok


def test_a_failed_command_raises_naming_what_it_did_with_secrets_masked(bed: Bed) -> None:
    secret = SECRETS["HF_TOKEN"]
    with bed.connect() as transport, pytest.raises(RemoteError) as caught:
        transport.run(["sh", "-c", f"echo refused {secret} >&2; exit 2"], what="say no")
    message = str(caught.value)
    assert "say no" in message and "refused" in message
    assert secret not in message


def test_a_command_past_its_timeout_raises_command_timed_out(bed: Bed) -> None:
    began = time.monotonic()
    with bed.connect() as transport, pytest.raises(CommandTimedOut):
        transport.run(["sleep", "30"], timeout=1, what="a slow command")
    assert time.monotonic() - began < 10


def test_stream_lines_yields_each_line_and_ends_with_the_command(bed: Bed) -> None:
    with bed.connect() as transport:
        lines = list(transport.stream_lines(["sh", "-c", "echo one; echo two >&2; echo three"],
                                            timeout=30))
    assert sorted(lines) == [b"one\n", b"three\n", b"two\n"]
    assert lines.index(b"one\n") < lines.index(b"three\n")


def test_a_closed_transport_opens_again_for_the_next_command(bed: Bed) -> None:
    with bed.connect() as transport:
        transport.close()
        assert transport.run(["echo", "again"]).text() == "again\n"


# -- the runtime ---------------------------------------------------------------------------
def test_a_node_never_deployed_to_has_no_release_container_or_lock(bed: Bed) -> None:
    with bed.connect() as transport:
        runtime = runtime_for(transport)
        seen = runtime.observe(["main"])
        assert seen.lock is None
        main = seen.deployments.get("main")
        assert main is None or (main.current_release is None and not main.running)
        assert runtime.releases("main") == []
        assert runtime.containers("main") == []


def test_the_lock_is_seen_while_held_and_gone_once_released(bed: Bed) -> None:
    with bed.connect() as transport:
        runtime = runtime_for(transport)
        lock, _ = runtime.lock("contract-test", datetime.now(UTC), unlock_id=None,
                               deployments=["main"])
        try:
            held = runtime.observe(["main"]).lock
            assert held is not None and held.operation == "contract-test"
        finally:
            lock.release()
        assert runtime.observe(["main"]).lock is None


def test_a_deploy_serves_the_release_and_the_same_deploy_again_changes_nothing(
        bed: Bed) -> None:
    with bed.connect() as transport:
        runtime = runtime_for(transport)
        first, release = _deploy(bed, runtime)
        assert first.status == "deployed", first.to_json()
        main = runtime.observe(["main"]).deployments["main"]
        assert main.current_release == main.running_release == release
        assert [r.release_id for r in runtime.releases("main")] == [release]
        again, _ = _deploy(bed, runtime)
        assert again.status == "unchanged", again.to_json()

        runtime.stop("main", what="stop the engine")
        stopped = runtime.observe(["main"]).deployments["main"]
        assert not stopped.running
        assert stopped.current_release == release  # its release stays


def test_only_the_runtime_package_names_an_implementation() -> None:
    """Everything else reaches a node through the factory and the protocols."""
    named = re.compile(r"\b(SshTransport|ComposeSshRuntime)\b")
    outside = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                     if named.search(path.read_text())
                     and not path.is_relative_to(PACKAGE / "adapters" / "runtime"))
    assert outside == []

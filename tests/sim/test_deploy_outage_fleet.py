"""``servefleet deploy --allow-outage`` on the simulated fleet (stand-in engines, whose boots
take seconds): behind the gateway, the only engine serving a route is drained only when the
operator allows the outage. Without the flag the CLI refuses before the engine stops (it
keeps serving its release, in rotation); with it the new release is deployed and
re-admitted. A CLI that dropped the flag on its way to ``following_gateway`` fails here."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from servefleet.adapters.gateway.runtime_api import api_through
from servefleet.adapters.runtime.ssh.compose import ComposeSshRuntime
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.project import Project, load_project
from servefleet.sim.testbed import FleetHandle

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NODE = "sim-spark-1"
DEP = "ot"
PORT = 8003
GATEWAY_NODE = "sim-5090"
GATEWAY_PORT, ADMIN_PORT = 18190, 18199
STACK = "outage"
SECRETS = {"HF_TOKEN": "hf_outage-test-secret"}
CHANGED = "qwen36-fp8-outage"
"""``qwen36-fp8`` with another batch limit: a second release of the same deployment."""


def write_stack(root: Path, profile: str) -> None:
    """The stack: ``profile`` as :data:`DEP` on :data:`NODE`, the only engine behind one
    route of the gateway on :data:`GATEWAY_NODE`."""
    (root / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump({"config": {
        "servefleet:profiles": {NODE: {DEP: {"profile": profile, "port": PORT}}},
        "servefleet:gateway": {
            "node": GATEWAY_NODE, "port": GATEWAY_PORT, "adminPort": ADMIN_PORT,
            "image": "servefleet-sim/gateway-standin:latest", "drainTimeoutSeconds": 10,
            "routes": [{"model": "qwen36"}]}}}))


@pytest.fixture
def bed(sim_fleet: FleetHandle, tmp_path: Path,
        run_cli: Callable[..., Result]) -> Iterator[tuple[Path, Callable[..., Result]]]:
    """A copy of the sim project with the :data:`STACK` stack (``qwen36-fp8`` placed); the
    deployment and the gateway removed from their nodes before and after."""
    root = tmp_path / "project"
    for name in ("nodes", "profiles", "templates", "healthchecks"):
        shutil.copytree(sim_fleet.project_dir / name, root / name)
    shutil.copy(sim_fleet.project_dir / "Pulumi.yaml", root / "Pulumi.yaml")
    (root / "profiles" / f"{CHANGED}.yaml").write_text(yaml.safe_dump({
        "extends": "qwen36-fp8", "description": "a second release (outage test)",
        "vllm": {"max_num_seqs": 16}}))
    write_stack(root, "qwen36-fp8")
    sim = load_project(sim_fleet.project_dir, "sim")

    def clean() -> None:
        sim_fleet.remove_deployment(sim, DEP, [NODE])
        sim_fleet.remove_deployment(sim, "gateway", [GATEWAY_NODE])

    def run(*args: str) -> Result:
        return run_cli(*args, project=root, stack=STACK, env=SECRETS)

    clean()
    try:
        yield root, run
    finally:
        clean()


def serving(project: Project) -> tuple[str | None, list[str]]:
    """The release :data:`DEP` runs on its node, and its rotation in each route of the
    gateway (HAProxy's runtime API)."""
    with SshTransport(project.nodes[NODE]) as transport:
        have = ComposeSshRuntime(transport).observe([DEP]).deployments.get(DEP)
    release = None if have is None or have.manifest is None else \
        str(have.manifest.get("release_id"))
    with SshTransport(project.nodes[GATEWAY_NODE]) as transport:
        states = api_through(transport, ADMIN_PORT).servers()
    return release, [s.rotation for s in states if s.server == f"{NODE}.{DEP}"]


def deployment_result(done: Result) -> dict[str, object]:
    [node] = json.loads(done.stdout)["nodes"]
    [result] = [d for d in node["deployments"] if d["deployment"] == DEP]
    return dict(result)


def test_the_last_engine_of_a_route_is_drained_only_with_allow_outage(
        bed: tuple[Path, Callable[..., Result]]) -> None:
    root, run = bed
    first = run("deploy", NODE, "--yes", "--json")
    assert first.exit_code == 0, first.output
    before = deployment_result(first)["release_id"]
    assert serving(load_project(root, STACK)) == (before, ["serving"])

    write_stack(root, CHANGED)
    project = load_project(root, STACK)
    refused = run("deploy", NODE, "--yes", "--json")
    assert refused.exit_code == 1, refused.output
    result = deployment_result(refused)
    assert result["status"] == "failed", result
    assert "is the last engine serving route" in json.dumps(result), result
    # Refused before the stop: the old release serves, still in rotation.
    assert serving(project) == (before, ["serving"])

    allowed = run("deploy", NODE, "--yes", "--json", "--allow-outage")
    assert allowed.exit_code == 0, allowed.output
    result = deployment_result(allowed)
    assert result["status"] == "deployed", result
    after = result["release_id"]
    assert after != before
    # Drained, switched, gated, re-admitted.
    assert serving(project) == (after, ["serving"])

"""``pulumi up`` of one engine across two nodes, for real: the Pulumi CLI, the language host
and the dynamic-provider host drive the ``sim-pair`` stack (``Pulumi.sim-pair.yaml``: one
TP=2 engine, head on sim-spark-1, headless worker on sim-spark-2, the stand-in vLLM).

Up brings both ranks to one release (its ``current`` on both nodes and the running
containers' release labels), the stack output says so, a refresh finds nothing to change,
and destroy stops both ranks. The project is copied with a state folder of its own, as in
``test_pulumi_e2e.py``.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_pulumi_e2e import (  # noqa: F401  (fixtures)
    HF_TOKEN,
    Pulumi,
    _copy_project,
    fleet,
    new_stack,
    pulumi_bin,
)

from servefleet.core.project import load_project
from servefleet.sim.testbed import FleetHandle

pytestmark = [pytest.mark.pulumi, pytest.mark.fleet, pytest.mark.slow,
              pytest.mark.timeout(1800)]

STACK = "sim-pair"
DEP = "pair"
NODES = ("sim-spark-1", "sim-spark-2")


def wipe(fleet: FleetHandle, project_dir: Path) -> None:  # noqa: F811
    """Remove the pair's containers and folders from both nodes."""
    fleet.remove_deployment(load_project(project_dir, STACK), DEP, NODES)


def running_release(fleet: FleetHandle, node: str) -> str:  # noqa: F811
    """The release label of the pair's running container on ``node`` ('' when none)."""
    return fleet.ssh(node, "docker ps --format '{{.Label \"io.servefleet.release\"}}' "
                           f"--filter label=com.docker.compose.project=servefleet-{DEP}"
                     ).stdout.strip()


@pytest.fixture(scope="module")
def pulumi(tmp_path_factory: pytest.TempPathFactory, pulumi_bin: Path,  # noqa: F811
           fleet: FleetHandle) -> Iterator[Pulumi]:  # noqa: F811
    """A fresh ``sim-pair`` stack on a copy of the project; destroyed at the end."""
    for node in NODES:
        (fleet.node_files(node).control_dir / "fault").unlink(missing_ok=True)
    wipe(fleet, fleet.project_dir)
    root = tmp_path_factory.mktemp("pulumi-pair-e2e")
    project = root / "project"
    _copy_project(fleet.project_dir, project)
    # The copy carries the sim stack's file; this stack is the pair's.
    shutil.copy2(fleet.project_dir / f"Pulumi.{STACK}.yaml", project / f"Pulumi.{STACK}.yaml")
    cli = new_stack(root, project, pulumi_bin, STACK)
    try:
        yield cli
    finally:
        cli.run("destroy", "--yes", "--skip-preview", check=False)
        wipe(fleet, fleet.project_dir)
        print("\n".join(cli.log))


@pytest.fixture(scope="module")
def pair_up(pulumi: Pulumi) -> dict[str, Any]:
    """``pulumi up`` of the sim-pair stack: the ``multiNode`` output of the engine."""
    pulumi.run("up", "--yes", "--skip-preview")
    outputs = json.loads(pulumi.run("stack", "output", "--json", "--show-secrets").stdout)
    return dict(outputs["multiNode"][DEP])


def test_up_brings_both_ranks_to_one_release(pair_up: dict[str, Any], pulumi: Pulumi,
                                             fleet: FleetHandle) -> None:  # noqa: F811
    releases = pair_up["releaseIds"]
    assert sorted(releases) == sorted(NODES)
    [release] = set(releases.values())
    assert release
    assert pair_up["health"] == {node: "healthy" for node in NODES}
    assert pair_up["kvCacheTokens"] > 0
    head = fleet.nodes[NODES[0]]
    assert pair_up["endpoint"] == f"http://{head.address}:8003"
    project = load_project(pulumi.cwd, STACK)
    for node in NODES:
        current = Path(project.nodes[node].base_dir) / DEP / "current"
        assert current.resolve().name == release, node
        assert running_release(fleet, node) == release, node
    state = pulumi.state_text()
    assert HF_TOKEN not in state
    assert "MultiNodeDeployment" in state
    # Nothing to do right after an up, not even after reading both ranks again.
    pulumi.run("preview", "--refresh", "--expect-no-changes", "--diff")


def test_destroy_stops_both_ranks(pair_up: dict[str, Any], pulumi: Pulumi,
                                  fleet: FleetHandle) -> None:  # noqa: F811
    pulumi.run("destroy", "--yes", "--skip-preview")
    for node in NODES:
        assert running_release(fleet, node) == "", node

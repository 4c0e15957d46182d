"""``servefleet history`` on the simulated fleet: two real rollouts on sim-spark-1 (the
profile without MTP, then with it), read back by the CLI from the node's own records."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from servefleet.adapters.rollout import NodeResult, deploy
from servefleet.core.models import Deployment
from servefleet.core.project import Project
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import wiped_project

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

SECRETS = {"HF_TOKEN": "hf_history-test-secret-value"}
NODE = "sim-spark-1"
DEP = "hi"
PORT = 8002


@pytest.fixture(scope="module")
def base(sim_fleet: FleetHandle) -> Iterator[Project]:
    yield from wiped_project(sim_fleet, DEP, [NODE])


def placed(project: Project, profile: str) -> Project:
    """``project`` with the stack placing ``profile`` on the node as deployment ``hi``."""
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=NODE, name=DEP, profile=profile, port=PORT)]})
    return dataclasses.replace(project, stack=stack)


def deployed(project: Project, profile: str) -> NodeResult:
    [result] = deploy(placed(project, profile), [NODE], secrets=SECRETS)
    assert result.ok, result.to_json()
    return result


def test_history_shows_both_releases_and_the_mtp_pool_smaller(
        base: Project, sim_fleet: FleetHandle, tmp_path: Path,
        run_cli: Callable[..., Result]) -> None:
    first = deployed(base, "qwen36-fp8").deployments[0].release_id
    second = deployed(base, "qwen36-fp8-mtp").deployments[0].release_id
    copy = tmp_path / "project"
    for name in ("nodes", "profiles", "templates"):
        shutil.copytree(sim_fleet.project_dir / name, copy / name)
    shutil.copy(sim_fleet.project_dir / "Pulumi.yaml", copy / "Pulumi.yaml")
    (copy / "Pulumi.hi.yaml").write_text(yaml.safe_dump({"config": {"servefleet:profiles": {
        NODE: {DEP: {"profile": "qwen36-fp8-mtp", "port": PORT}}}}}))
    run = functools.partial(run_cli, project=copy, stack="hi")

    done = run("history", NODE, "-d", DEP, "--json")
    assert done.exit_code == 0, done.output
    rows = json.loads(done.output)["releases"]
    assert [(r["release_id"], r["profile"], r["verdict"]) for r in rows[-2:]] == [
        (first, "qwen36-fp8", "passed"), (second, "qwen36-fp8-mtp", "passed")]
    without, with_mtp = rows[-2]["kv_pool"], rows[-1]["kv_pool"]
    assert without and with_mtp and with_mtp < without, rows
    assert all(r["boot_seconds"] and r["boot_seconds"] > 0 for r in rows[-2:])

    text = run("history", NODE, "-d", DEP, "--last", "2")
    assert text.exit_code == 0, text.output
    assert second is not None and second in text.output
    assert "KV pool by release" in text.output
    assert "(-" in text.output.splitlines()[-1]  # the MTP bar names the shrink

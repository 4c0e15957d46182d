"""``servefleet tune`` on the simulated fleet: the overlay it prints for sim-spark-1 is
deployed as it is, and the real CPU build's pool lands on the target within the accuracy
table's error for the CPU build (exact: every CPU row of
``servefleet.core.kvplan.accuracy.CPU_ROWS`` is predicted to the token)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml

from servefleet.adapters.rollout import deploy
from servefleet.core.kvplan.accuracy import TOLERANCE
from servefleet.core.models import Deployment, Profile
from servefleet.core.project import Project
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import wiped_project

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

DEP = "tuned"
PORT = 8001
SPARK = "sim-spark-1"
TARGET = 3_000_000
SECRETS = {"HF_TOKEN": "hf_tune-fleet-test-secret"}


@pytest.fixture(scope="module")
def project(real_engines: FleetHandle) -> Iterator[Project]:
    yield from wiped_project(real_engines, DEP, [SPARK])


def test_tune_overlay_reaches_its_kv_target_on_the_cpu_build(
        project: Project, real_engines: FleetHandle) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "servefleet.cli.main", "--project", str(project.root),
         "tune", "qwen36-fp8", "--node", SPARK, "--target-kv-tokens", str(TARGET)],
        capture_output=True, text=True, check=True)
    overlay = yaml.safe_load(done.stdout)
    assert overlay["extends"] == "qwen36-fp8"
    base = project.profiles["qwen36-fp8"]
    assert base.vllm is not None
    data = base.model_dump()
    data["vllm"] = {**data["vllm"], **overlay["vllm"]}
    data["name"] = "tuned-fp8"
    tuned = Profile.model_validate(data)
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=SPARK, name=DEP, profile="tuned-fp8", port=PORT)]})
    placed = dataclasses.replace(project, stack=stack,
                                 profiles={**project.profiles, "tuned-fp8": tuned})
    [result] = deploy(placed, nodes=[SPARK], secrets=SECRETS)
    assert result.ok, result.to_json()
    health = result.deployments[0].health
    assert health is not None
    measured = health.facts["kv_cache_tokens"]
    assert isinstance(measured, int)
    assert measured >= TARGET
    assert abs(measured - TARGET) / TARGET <= TOLERANCE, (measured, TARGET)

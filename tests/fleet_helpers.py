"""What tests on the simulated fleet share: the project with the test's own deployment
removed from the nodes before the test starts and after it ends, and plain HTTP to a node."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from servefleet.core.models import Node, Profile
from servefleet.core.project import Project, load_project
from servefleet.sim.testbed import FleetHandle


def wiped_project(fleet: FleetHandle, deployment: str,
                  nodes: Iterable[str] | None = None) -> Iterator[Project]:
    """The fleet's ``sim`` project, with ``deployment`` removed (containers and folder) from
    ``nodes`` (default: every node) before and after; a fixture's body: ``yield from``."""
    project = load_project(fleet.project_dir, "sim")
    fleet.remove_deployment(project, deployment, nodes)
    yield project
    fleet.remove_deployment(project, deployment, nodes)


BENCH_SECRETS = {"HF_TOKEN": "hf_bench-test-secret-value"}
"""The secrets a bench test deploys with."""
TINY_SCENARIOS: dict[str, Any] = {"scenarios": [
    {"name": "A", "input_len": 32, "output_len": 16, "concurrency": 1, "prompts": 2,
     "warmups": 1},
    {"name": "C", "input_len": 64, "output_len": 16, "concurrency": 4, "prompts": 4,
     "warmups": 1},
]}
"""Two of the seeds' shapes, a few requests each: a bench test's default scenarios."""


def bench_project(fleet: FleetHandle, folder: Path, stack: str, node: str, deployment: str,
                  profile: str, port: int, scenarios: dict[str, Any]) -> Path:
    """A copy of the fleet's project in ``folder`` whose stack ``stack`` places ``profile``
    as ``deployment`` on ``node``, with ``scenarios`` as its bench default."""
    for name in ("nodes", "profiles", "templates", "healthchecks"):
        shutil.copytree(fleet.project_dir / name, folder / name)
    shutil.copy(fleet.project_dir / "Pulumi.yaml", folder / "Pulumi.yaml")
    (folder / "tiny.yaml").write_text(yaml.safe_dump(scenarios))
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": {
        "servefleet:benchScenarios": "tiny.yaml",
        "servefleet:profiles": {node: {deployment: {"profile": profile, "port": port}}}}}))
    return folder


def deployed_bench_bed(fleet: FleetHandle, folder: Path, stack: str, node: str,
                       deployment: str, profile: str, port: int
                       ) -> Iterator[tuple[Project, Callable[..., Any]]]:
    """A bench test module's bed (a fixture's body: ``yield from``): the project copy of
    :func:`bench_project` with :data:`TINY_SCENARIOS`, its deployment deployed and gated,
    and ``run(*args)``, the CLI on that stack with :data:`BENCH_SECRETS`."""
    from click.testing import CliRunner

    from servefleet.adapters.rollout import deploy
    from servefleet.cli.main import build_cli

    copy = bench_project(fleet, folder, stack, node, deployment, profile, port,
                         TINY_SCENARIOS)
    app = build_cli()

    def run(*args: str) -> Any:
        return CliRunner().invoke(app, ["--project", str(copy), "--stack", stack, *args],
                                  env=BENCH_SECRETS, catch_exceptions=False)

    for _ in wiped_project(fleet, deployment, [node]):
        project = load_project(copy, stack)
        [result] = deploy(project, [node], secrets=BENCH_SECRETS)
        assert result.ok, result.to_json()
        yield project, run


def http_get(node: Node, port: int, path: str, timeout: float) -> tuple[int, bytes]:
    """``GET http://<node>:<port><path>`` without any proxy: the status and the body (empty
    for an error status)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{node.address}:{port}{path}", timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def real_standin(fleet: FleetHandle, reason: str) -> FleetHandle:
    """``fleet``, where it runs the real stand-in engine; the test fails with ``reason`` on a
    placeholder (which proves no boot facts)."""
    if not fleet.standin_is_real:
        pytest.fail(reason)
    return fleet


def derived(project: Project, base: str, name: str, **changes: Any) -> Profile:
    """A profile ``name``: ``base`` with ``changes`` (nested mappings merge)."""
    data = project.profiles[base].model_dump()
    for key, value in changes.items():
        if isinstance(value, dict):
            data[key] = {**(data.get(key) or {}), **value}
        else:
            data[key] = value
    data["name"] = name
    return Profile.model_validate(data)

"""A rotated secret redeploys, without the fleet: release ids never depend on secret values,
so a new ``HF_TOKEN`` names the same release; the observation's keyed digests (a random key
per observation, HMAC-SHA256 computed on the node) show that the node holds another value,
and the deploy uploads the release again into a fresh folder, the old one moved aside.
Neither the value nor any digest of it reaches the plan's text or JSON or the manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_node import (
    FakeGateRollout,
    FakeNodeTransport,
    fake_runtime,
    one_deployment_project,
    short_temp_dir,
)

from servefleet.adapters.rollout import Abort, NodeResult, render_for
from servefleet.core.envdigest import keyed_value_digests
from servefleet.core.project import Project
from servefleet.core.render.release import ENV_FILE

NODE = "dgx-spark-1"
PROFILE = "qwen36-fp8"
OLD = "hf_rotation_test_old_value"
NEW = "hf_rotation_test_new_value"


@pytest.fixture
def root() -> Iterator[Path]:
    yield from short_temp_dir("servefleet-rotate-")


def project_at(base: Path) -> Project:
    return one_deployment_project(base, NODE, PROFILE)


def deploy(project: Project, transport: FakeNodeTransport, token: str) -> NodeResult:
    transport.abort = Abort()
    secrets = {"HF_TOKEN": token}
    rollout = FakeGateRollout(project, transport.node, fake_runtime(transport),
                              secrets=secrets, abort=transport.abort)
    [rendered] = render_for(project, [NODE], secrets)
    return rollout.deploy([rendered], {"main": project.stack.deployments[0]})


def test_a_rotated_secret_is_planned_by_name_and_redeployed(root: Path) -> None:
    project = project_at(root / "srv")
    transport = FakeNodeTransport(project.nodes[NODE], root / "node", {"HF_TOKEN": OLD})
    first = deploy(project, transport, OLD)
    assert first.status == "deployed", first.to_json()
    release = first.deployments[0].release_id
    assert deploy(project, transport, OLD).status == "unchanged"

    rotated = deploy(project, transport, NEW)
    result = rotated.deployments[0]
    assert result.status == "deployed", result.to_json()
    assert result.plan is not None
    assert result.plan.secrets_changed == ("HF_TOKEN",)
    assert "  secret values differ (names: HF_TOKEN)" in result.plan.summary_lines()
    assert result.plan.to_json()["secrets_changed"] == ["HF_TOKEN"]
    # Same configuration, same release id, a fresh folder; the old one (old token) aside.
    assert result.release_id == release
    dep_dir = Path(project.nodes[NODE].base_dir) / "main"
    env = (dep_dir / "current" / ENV_FILE).read_text()
    assert f"HF_TOKEN={NEW}" in env or f"HF_TOKEN='{NEW}'" in env
    aside = [p.name for p in (dep_dir / "releases").iterdir() if ".edited-" in p.name]
    assert aside and OLD in (dep_dir / "releases" / aside[0] / ENV_FILE).read_text()
    assert deploy(project, transport, NEW).status == "unchanged"

    # Nothing printed or written holds the value or a digest that can be tried offline.
    published = json.dumps(rotated.to_json()) + "\n".join(result.plan.summary_lines()) + \
        (dep_dir / "current" / "manifest.json").read_text()
    for value in (OLD, NEW):
        assert value not in published
        for text in (value, f"HF_TOKEN={value}"):
            assert hashlib.sha256(text.encode()).hexdigest() not in published


def test_the_node_answers_keyed_digests_only_when_asked(root: Path) -> None:
    project = project_at(root / "srv")
    transport = FakeNodeTransport(project.nodes[NODE], root / "node", {"HF_TOKEN": OLD})
    assert deploy(project, transport, OLD).status == "deployed"
    base = project.nodes[NODE].base_dir
    plain = transport.observed("main")
    assert plain.deployments["main"].secret_digests is None
    key = "k" * 64
    keyed = transport.observed("main", key=key)
    env = (Path(base) / "main" / "current" / ENV_FILE).read_bytes()
    assert keyed.deployments["main"].secret_digests == dict(
        keyed_value_digests(env, key.encode()))
    other = transport.observed("main", key="x" * 64)
    assert other.deployments["main"].secret_digests != keyed.deployments["main"].secret_digests

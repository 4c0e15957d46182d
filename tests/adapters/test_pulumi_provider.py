"""The dynamic provider's methods called directly against the simulated fleet (real sshd, real
dockerd, the real stand-in engine), with properties shaped exactly as Pulumi hands them over
(serialised and deserialised through Pulumi's own RPC encoding: numbers arrive as floats).

The tests use a deployment of their own (``pulumi-provider-test`` on sim-spark-1, on a port
outside the inventory's 8000/8001), so they leave the deployments of other tests alone. Each
test starts from the state it names (:func:`created`: the plain profile, :func:`on_mtp`: the
MTP profile), reached through the provider itself and a no-op when the node is there
already (as it is in file order), so each passes alone and in any order.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi_helpers import as_pulumi_sends

from servefleet.adapters import remote, rollout
from servefleet.adapters.pulumi_program import deployment_inputs
from servefleet.adapters.pulumi_provider import (
    HEALTHY,
    PROVIDER_VERSION,
    NodeDeploymentArgs,
    NodeDeploymentProvider,
    describe_changes,
    summary,
)
from servefleet.core.errors import HealthGateFailed
from servefleet.core.models import Deployment
from servefleet.core.project import Project, load_project
from servefleet.core.render import render_release
from servefleet.sim.testbed import FleetHandle

pytestmark = [pytest.mark.fleet, pytest.mark.slow, pytest.mark.timeout(900)]

NODE = "sim-spark-1"
DEPLOYMENT = "pulumi-provider-test"
PORT = 18471
SECRETS = {"HF_TOKEN": "hf_provider-test-secret-value"}


@pytest.fixture(scope="module")
def fleet(sim_fleet: FleetHandle) -> FleetHandle:
    """The fleet, with the real stand-in engine (a placeholder proves no boot facts)."""
    if not sim_fleet.standin_is_real:
        reason = ("the stand-in engine image is not built (servefleet/sim/standin has no "
                  "Dockerfile.vllm): provider tests need its boot log")
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{reason} (CI=true: every component must start here)", pytrace=False)
        pytest.skip(reason)
    return sim_fleet


def _wipe(fleet: FleetHandle, project: Project) -> None:
    node = project.nodes[NODE]
    fleet.ssh(NODE, "ids=$(docker ps -aq --filter label=com.docker.compose.project="
                    f"servefleet-{DEPLOYMENT}); [ -z \"$ids\" ] || docker rm -f $ids >/dev/null")
    shutil.rmtree(Path(node.base_dir) / DEPLOYMENT, ignore_errors=True)
    shutil.rmtree(Path(node.base_dir) / remote.LOCK_DIR, ignore_errors=True)
    (Path(node.sim.control_dir) / "fault").unlink(missing_ok=True)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def project(fleet: FleetHandle) -> Iterator[Project]:
    """The sim project, with the test's deployment wiped before and after."""
    loaded = load_project(fleet.project_dir, "sim")
    _wipe(fleet, loaded)
    yield loaded
    _wipe(fleet, loaded)


def props_for(project: Project, profile: str) -> dict[str, Any]:
    """The inputs the program would declare for the test deployment running ``profile``."""
    rendered = render_release(project, Deployment(node=NODE, name=DEPLOYMENT, profile=profile,
                                                  port=PORT), SECRETS)
    args = NodeDeploymentArgs(
        node=NODE, address=project.nodes[NODE].address, project_dir=str(project.root),
        stack="sim", strategy="parallel",
        deployments={DEPLOYMENT: deployment_inputs(rendered)}, secrets=dict(SECRETS))
    return as_pulumi_sends(args.to_props())


def running_containers(fleet: FleetHandle) -> list[str]:
    out = fleet.ssh(NODE, "docker ps -q --filter label=com.docker.compose.project="
                          f"servefleet-{DEPLOYMENT}").stdout
    return out.split()


def compose_file(project: Project, release_id: str) -> Path:
    base = Path(project.nodes[NODE].base_dir)
    return base / DEPLOYMENT / "releases" / release_id / "compose.yaml"


def create(project: Project, profile: str) -> dict[str, Any]:
    """``create`` of the test deployment with ``profile``: its outputs (the rollout does
    nothing on a node that runs that release already)."""
    result = NodeDeploymentProvider().create(props_for(project, profile))
    assert result.id == NODE
    assert result.outs is not None
    return as_pulumi_sends(result.outs)


@pytest.fixture
def created(project: Project) -> dict[str, Any]:
    """The test deployment on the plain FP8 profile: ``create``'s outputs."""
    return create(project, "qwen36-fp8")


@pytest.fixture
def on_mtp(project: Project) -> dict[str, Any]:
    """The test deployment on the MTP profile: ``create``'s outputs."""
    return create(project, "qwen36-fp8-mtp")


def test_create_deploys_a_healthy_engine_and_reports_its_boot(created: dict[str, Any],
                                                               fleet: FleetHandle,
                                                               project: Project) -> None:
    want = props_for(project, "qwen36-fp8")["deployments"][DEPLOYMENT]["releaseId"]
    assert created["health"] == {DEPLOYMENT: HEALTHY}
    assert created["releaseIds"] == {DEPLOYMENT: want}
    assert created["endpoints"] == {DEPLOYMENT: f"http://{project.nodes[NODE].address}:{PORT}"}
    assert created["cudagraphModes"] == {DEPLOYMENT: "FULL_AND_PIECEWISE"}
    kv = created["kvCacheTokens"][DEPLOYMENT]
    assert isinstance(kv, float | int) and kv > 100_000
    observed = created["observed"][DEPLOYMENT]
    assert observed["runningRelease"] == want
    assert observed["bootOutcome"] == "ready"
    assert "compose.yaml" in observed["fileHashes"]
    assert created["providerVersion"] == PROVIDER_VERSION
    # Nothing secret in the outputs.
    assert "secrets" not in created
    assert SECRETS["HF_TOKEN"] not in repr(created)
    assert len(running_containers(fleet)) == 1


def test_read_of_an_untouched_node_changes_nothing(created: dict[str, Any],
                                                    project: Project) -> None:
    provider = NodeDeploymentProvider()
    read = provider.read(NODE, created)
    assert read.id == NODE
    assert read.outs is not None
    assert as_pulumi_sends(read.outs) == created
    assert provider.diff(NODE, created, props_for(project, "qwen36-fp8")).changes is False


def test_diff_after_a_profile_switch_names_the_flags_and_the_restart(
        created: dict[str, Any], project: Project) -> None:
    news = props_for(project, "qwen36-fp8-mtp")
    assert NodeDeploymentProvider().diff(NODE, created, news).changes is True
    changes = describe_changes(created, news)
    assert [c.deployment for c in changes] == [DEPLOYMENT]
    change = changes[0]
    assert change.restart is True
    assert "--speculative-config" in change.flag_diff.added
    assert any(r.startswith("profile qwen36-fp8 -> qwen36-fp8-mtp") for r in change.reasons)
    assert any("--speculative-config" in line for line in summary(changes))
    # A provider code change alone is a change too (no restart: the rollout finds nothing
    # to do on the node).
    bumped = {**props_for(project, "qwen36-fp8"), "providerVersion": "0-test"}
    assert NodeDeploymentProvider().diff(NODE, created, bumped).changes is True


def test_update_to_mtp_shows_piecewise_graphs_and_a_smaller_kv_pool(
        created: dict[str, Any], fleet: FleetHandle, project: Project) -> None:
    result = NodeDeploymentProvider().update(NODE, created, props_for(project, "qwen36-fp8-mtp"))
    assert result.outs is not None
    updated = as_pulumi_sends(result.outs)
    want = props_for(project, "qwen36-fp8-mtp")["deployments"][DEPLOYMENT]["releaseId"]
    assert updated["releaseIds"] == {DEPLOYMENT: want}
    assert updated["health"] == {DEPLOYMENT: HEALTHY}
    assert updated["cudagraphModes"] == {DEPLOYMENT: "PIECEWISE"}
    assert updated["kvCacheTokens"][DEPLOYMENT] < created["kvCacheTokens"][DEPLOYMENT]
    assert updated["observed"][DEPLOYMENT]["profile"] == "qwen36-fp8-mtp"
    assert len(running_containers(fleet)) == 1
    assert NodeDeploymentProvider().diff(NODE, updated, props_for(
        project, "qwen36-fp8-mtp")).changes is False


def test_hand_edit_shows_in_read_and_the_update_puts_the_file_back(
        on_mtp: dict[str, Any], project: Project) -> None:
    updated = on_mtp
    release = updated["releaseIds"][DEPLOYMENT]
    path = compose_file(project, release)
    original = path.read_bytes()
    try:
        path.write_bytes(original + b"# edited by hand on the node\n")
        read = NodeDeploymentProvider().read(NODE, updated)
        assert read.outs is not None
        outs = as_pulumi_sends(read.outs)
        before = updated["observed"][DEPLOYMENT]["fileHashes"]
        after = outs["observed"][DEPLOYMENT]["fileHashes"]
        assert [p for p in after if after[p] != before.get(p)] == ["compose.yaml"]
        news = props_for(project, "qwen36-fp8-mtp")
        assert NodeDeploymentProvider().diff(NODE, outs, news).changes is True
        reasons = [r for c in describe_changes(outs, news) for r in c.reasons]
        assert reasons == ["drift: release files differ on the node: compose.yaml"]
        # The update uploads the release again: the edited folder is moved aside.
        repaired = NodeDeploymentProvider().update(NODE, outs, news)
        assert repaired.outs is not None
        assert as_pulumi_sends(repaired.outs) == updated
        assert path.read_bytes() == original
        [aside] = [p for p in path.parent.parent.iterdir()
                   if p.name.startswith(f"{release}.edited-")]
        assert (aside / "compose.yaml").read_bytes().endswith(
            b"# edited by hand on the node\n")
    finally:
        if path.read_bytes() != original:
            path.write_bytes(original)
    read = NodeDeploymentProvider().read(NODE, updated)
    assert read.outs is not None
    assert as_pulumi_sends(read.outs) == updated


def test_failed_gate_fails_the_update_after_restoring_the_old_release(
        on_mtp: dict[str, Any], project: Project, fleet: FleetHandle,
        monkeypatch: pytest.MonkeyPatch) -> None:
    updated = on_mtp
    node = project.nodes[NODE]
    fault = Path(node.sim.control_dir) / "fault"  # type: ignore[union-attr]

    def lift_fault(event: rollout.ProgressEvent) -> None:
        # The restore boots the old release without the fault (the file is node-wide).
        if event.phase == "restore":
            fault.unlink(missing_ok=True)

    real_deploy = rollout.deploy_node

    def deploy(*args: Any, progress: Any = None, **kwargs: Any) -> Any:
        def both(event: rollout.ProgressEvent) -> None:
            lift_fault(event)
            if progress is not None:
                progress(event)
        return real_deploy(*args, progress=both, **kwargs)

    monkeypatch.setattr(rollout, "deploy_node", deploy)
    fault.write_text("kv_oom\n")
    try:
        with pytest.raises(HealthGateFailed) as failed:
            NodeDeploymentProvider().update(NODE, updated, props_for(project, "qwen36-fp8"))
    finally:
        fault.unlink(missing_ok=True)
    text = str(failed.value)
    old = updated["releaseIds"][DEPLOYMENT]
    assert "kv_cache_oom" in text
    assert "  | L" in text, text  # the proving boot-log lines
    assert f"previous release {old} restored" in text
    assert SECRETS["HF_TOKEN"] not in text
    read = NodeDeploymentProvider().read(NODE, updated)
    assert read.outs is not None
    outs = as_pulumi_sends(read.outs)
    assert outs["releaseIds"] == {DEPLOYMENT: old}
    assert outs["health"] == {DEPLOYMENT: HEALTHY}


def test_delete_stops_the_engine(on_mtp: dict[str, Any], fleet: FleetHandle,
                                 project: Project) -> None:
    updated = on_mtp
    assert running_containers(fleet)
    NodeDeploymentProvider().delete(NODE, updated)
    assert running_containers(fleet) == []
    read = NodeDeploymentProvider().read(NODE, updated)
    assert read.outs is not None
    assert read.outs["health"][DEPLOYMENT].startswith("down:")
    # The releases stay for a rollback.
    assert compose_file(project, updated["releaseIds"][DEPLOYMENT]).is_file()

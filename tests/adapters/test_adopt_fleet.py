"""Adopting engines started by hand, on the simulated fleet: real sshd, dockerd, Compose.

An operator's engine runs before servefleet does: started with ``docker compose`` from a
compose file of their own, or with ``docker run``. The stack names it in ``adopt``; the
first deploy takes it over without restarting it (``plan`` says ``adopt``), ``drift`` is
clean, the first change replaces it through the gated rollout, and a rollback starts it
again.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from servefleet.adapters.drift_collect.check import check_fleet as check_drift
from servefleet.adapters.rollout import ProgressEvent, deploy, plan_fleet, rollback
from servefleet.core.models import Deployment, Profile
from servefleet.core.project import Project, load_project
from servefleet.core.render import RenderedRelease, render_release
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import http_get, real_standin, wiped_project

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

SECRETS = {"HF_TOKEN": "hf_adopt-test-secret-value"}
DEP = "hand"
PORT = 8003
BOOT_SECONDS = 120


@pytest.fixture(scope="module")
def fleet(sim_fleet: FleetHandle) -> FleetHandle:
    return real_standin(sim_fleet, "adoption tests need the stand-in engine's boot log")


@pytest.fixture
def project(fleet: FleetHandle) -> Iterator[Project]:
    """The sim project on nodes that run no engine: the test deployment, the hand-started
    containers and any deployment an earlier test left (an import refuses to guess between
    two engines) are removed before, and the test's own after."""
    fleet.remove_engines()
    yield from wiped_project(fleet, DEP)
    fleet.remove_engines()


def placed(project: Project, node: str, profile: str, adopt: str | None) -> Project:
    deployment = Deployment(node=node, name=DEP, profile=profile, port=PORT, adopt=adopt)
    stack = project.stack.model_copy(update={"deployments": [deployment]})
    return dataclasses.replace(project, stack=stack)


def hand_files(project: Project, node: str, profile: str) -> tuple[Path, RenderedRelease]:
    """The release's files as an operator would have written them by hand: the same
    engine, without servefleet's labels or project name, in a folder of their own."""
    rendered = render_release(project, Deployment(node=node, name=DEP, profile=profile,
                                                  port=PORT), SECRETS)
    folder = Path(tempfile.mkdtemp(prefix=f"sf-hand-{node}-"))
    for path, content in rendered.files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(rendered.modes.get(path, 0o644))
    compose = yaml.safe_load((folder / "compose.yaml").read_text())
    compose.pop("name", None)
    compose["services"]["engine"].pop("labels", None)
    (folder / "compose.yaml").write_text(yaml.safe_dump(compose, sort_keys=False))
    return folder, rendered


def compose_argv(folder: Path, rendered: RenderedRelease, *args: str) -> str:
    files = " ".join(f"-f {shlex.quote(str(folder / f))}" for f in rendered.compose_files)
    return (f"docker compose -p handmade --project-directory {shlex.quote(str(folder))} "
            f"{files} {' '.join(args)}")


def docker_run_argv(fleet: FleetHandle, node: str, folder: Path,
                    rendered: RenderedRelease) -> str:
    """The same engine as one ``docker run`` line, from Compose's own view of the files:
    a multi-word entrypoint's other words lead the command, as ``docker run`` needs."""
    config = json.loads(fleet.ssh(node, compose_argv(folder, rendered, "config",
                                                     "--format", "json")).stdout)
    engine = config["services"]["engine"]
    entrypoint = list(engine.get("entrypoint") or [])
    words = ["docker", "run", "-d", "--name", "handmade-run", "--network", "host",
             "--ipc", "host", "--restart", "always"]
    if entrypoint:
        words += ["--entrypoint", entrypoint[0]]
    for name, value in sorted((engine.get("environment") or {}).items()):
        words += ["-e", f"{name}={value}"]
    for volume in engine.get("volumes") or []:
        words += ["-v", f"{volume['source']}:{volume['target']}"
                  + (":ro" if volume.get("read_only") else "")]
    words += [engine["image"], *entrypoint[1:], *engine["command"]]
    return shlex.join(words)


def wait_serving(project: Project, node: str) -> None:
    deadline = time.monotonic() + BOOT_SECONDS
    while time.monotonic() < deadline:
        try:
            if http_get(project.nodes[node], PORT, "/health", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"the hand-started engine on {node} did not serve within {BOOT_SECONDS} s")


def adopted_state(fleet: FleetHandle, node: str) -> str:
    """Docker's state of the deployment's adopted container (``running``, ``exited``…)."""
    return fleet.ssh(node, "docker inspect --format '{{.State.Status}}' "
                           f"servefleet-{DEP}-adopted").stdout.strip()


def with_llamacpp(project: Project, profile: str, **settings: object) -> Profile:
    """``profile`` with some of its llama.cpp settings changed (a one-line profile edit)."""
    resolved = project.profiles[profile]
    assert resolved.llamacpp is not None
    return resolved.model_copy(update={"llamacpp": resolved.llamacpp.model_copy(
        update=settings)})


def container_facts(fleet: FleetHandle, node: str, name: str) -> tuple[str, str, str]:
    """``(id, name, StartedAt)`` of a container."""
    line = fleet.ssh(node, "docker inspect --format '{{.Id}} {{.Name}} {{.State.StartedAt}}' "
                           + shlex.quote(name)).stdout.split()
    return line[0], line[1].lstrip("/"), line[2]


def adopt_and_check(fleet: FleetHandle, project: Project, node: str, profile: str,
                    container: str) -> tuple[Project, str]:
    """Plan says adopt; the deploy restarts nothing; plan is then unchanged and drift clean.
    Returns the stack and the adopted release."""
    stack = placed(project, node, profile, container)
    before = container_facts(fleet, node, container)
    items, errors = plan_fleet(stack, [node], SECRETS)
    assert not errors, [e.to_json() for e in errors]
    [item] = items
    assert item.action == "adopt", item.summary_lines()
    assert not item.restart and item.adopt_container == container
    assert f"{node}/{DEP}: adopt: release none -> {item.release_id}" in item.summary_lines()

    [result] = deploy(stack, [node], secrets=SECRETS)
    assert result.ok, json.dumps(result.to_json(), default=str)[:3000]
    [dep] = result.deployments
    assert dep.status == "deployed" and dep.health is not None and dep.health.ok
    assert "up" not in dict(dep.phases) and "stop" not in dict(dep.phases)
    after = container_facts(fleet, node, f"servefleet-{DEP}-adopted")
    # The same container, never restarted: only its name changed.
    assert (after[0], after[2]) == (before[0], before[2])
    wait_serving(project, node)

    [again], _ = plan_fleet(stack, [node], SECRETS)
    assert again.action == "unchanged", again.summary_lines()
    report = check_drift(stack, [node], secrets=SECRETS)
    assert report.exit_code == 0, report.to_json()
    return stack, item.release_id


def test_an_engine_started_with_docker_compose_is_adopted_replaced_and_rolled_back_to(
        fleet: FleetHandle, project: Project) -> None:
    node, profile = "sim-5090", "qwen36-q4-llamacpp"
    folder, rendered = hand_files(project, node, profile)
    fleet.ssh(node, compose_argv(folder, rendered, "up", "-d"))
    wait_serving(project, node)
    stack, adopted = adopt_and_check(fleet, project, node, profile, "handmade-engine-1")

    # The first change replaces it through the gated rollout; the adopted container is
    # stopped and kept, and a rollback starts it again.
    tuned = placed(project, node, "qwen36-q4-llamacpp", "handmade-engine-1")
    tuned_profile = with_llamacpp(project, profile, parallel=2)
    tuned = dataclasses.replace(tuned, profiles={**project.profiles, profile: tuned_profile})
    [result] = deploy(tuned, [node], secrets=SECRETS)
    assert result.ok, json.dumps(result.to_json(), default=str)[:3000]
    [dep] = result.deployments
    assert dep.status == "deployed" and dep.release_id != adopted
    state = adopted_state(fleet, node)
    assert state == "exited"

    back = rollback(stack, node, DEP, to=adopted, secrets=SECRETS)
    assert back.status == "deployed", back.to_json()
    state = adopted_state(fleet, node)
    assert state == "running"
    [item], _ = plan_fleet(stack, [node], SECRETS)
    assert item.action == "unchanged", item.summary_lines()


def test_an_engine_started_with_docker_run_is_adopted(fleet: FleetHandle,
                                                      project: Project) -> None:
    node, profile = "sim-spark-1", "qwen36-fp8"
    folder, rendered = hand_files(project, node, profile)
    fleet.ssh(node, docker_run_argv(fleet, node, folder, rendered))
    wait_serving(project, node)
    stack, adopted = adopt_and_check(fleet, project, node, profile, "handmade-run")
    # `always` would start it after a reboot beside a later release: made unless-stopped.
    policy = fleet.ssh(node, "docker inspect --format '{{.HostConfig.RestartPolicy.Name}}' "
                             f"servefleet-{DEP}-adopted").stdout.strip()
    assert policy == "unless-stopped"

    # A first change whose engine fails its gate: the adopted container serves again.
    sim = project.nodes[node].sim
    assert sim is not None
    fault = Path(sim.control_dir) / "fault"
    fault.write_text("kv_oom\n")

    def lift_fault(event: ProgressEvent) -> None:
        if event.phase == "restore":
            fault.unlink(missing_ok=True)

    try:
        [result] = deploy(placed(project, node, "qwen36-fp8-mtp", "handmade-run"), [node],
                          secrets=SECRETS, progress=lift_fault)
    finally:
        fault.unlink(missing_ok=True)
    [dep] = result.deployments
    assert dep.status == "rolled_back", json.dumps(dep.to_json(), default=str)[:3000]
    assert dep.restore is not None and dep.restore.ok and dep.restore.release_id == adopted
    state = adopted_state(fleet, node)
    assert state == "running"
    wait_serving(project, node)
    [item], _ = plan_fleet(stack, [node], SECRETS)
    assert item.action == "unchanged", item.summary_lines()


def test_an_engine_with_other_flags_is_replaced_not_adopted(fleet: FleetHandle,
                                                            project: Project) -> None:
    node, profile = "sim-5090", "qwen36-q4-llamacpp"
    folder, rendered = hand_files(project, node, profile)
    fleet.ssh(node, compose_argv(folder, rendered, "up", "-d"))
    wait_serving(project, node)
    tuned_profile = with_llamacpp(project, profile, ctx_size=32768)
    stack = placed(dataclasses.replace(project, profiles={**project.profiles,
                                                          profile: tuned_profile}),
                   node, profile, "handmade-engine-1")
    [item], _ = plan_fleet(stack, [node], SECRETS)
    assert item.action == "create" and item.restart
    assert item.flag_diff.changed == {"-c": ("65536", "32768")}
    [result] = deploy(stack, [node], secrets=SECRETS)
    assert result.ok, json.dumps(result.to_json(), default=str)[:3000]
    state = fleet.ssh(node, "docker inspect --format '{{.State.Status}} "
                            "{{.HostConfig.RestartPolicy.Name}}' handmade-engine-1").stdout.split()
    assert state == ["exited", "no"]


def config_repo_without(node: str, root: Path) -> Path:
    """A copy of the sim config repo whose stack does not place ``node`` yet: an operator's
    repo before the node's engine is imported."""
    repo = root / "repo"
    for folder in ("nodes", "profiles", "templates"):
        shutil.copytree(Path(__file__).resolve().parents[2] / folder, repo / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(Path(__file__).resolve().parents[2] / "Pulumi.yaml", repo / "Pulumi.yaml")
    (repo / "Pulumi.sim.yaml").write_text(
        "# The operator's stack, before the import.\n"
        "config:\n"
        "  servefleet:profiles:\n"
        "    sim-spark-1: qwen36-fp8\n")
    assert node != "sim-spark-1"
    return repo


@pytest.mark.parametrize(("node", "profile", "how"), [
    ("sim-5090", "qwen36-q4-llamacpp", "compose"),
    ("sim-spark-2", "qwen36-fp8", "run"),
], ids=["llamacpp-compose", "vllm-docker-run"])
def test_import_then_deploy_adopts_the_hand_started_engine_without_a_restart(
        fleet: FleetHandle, project: Project, run_cli: Callable[..., Result],
        tmp_path: Path, node: str, profile: str, how: str) -> None:
    folder, rendered = hand_files(project, node, profile)
    if how == "compose":
        fleet.ssh(node, compose_argv(folder, rendered, "up", "-d"))
        container = "handmade-engine-1"
    else:
        fleet.ssh(node, docker_run_argv(fleet, node, folder, rendered))
        container = "handmade-run"
    wait_serving(project, node)
    repo = config_repo_without(node, tmp_path)

    done = run_cli("import", node, "--deployment", DEP, "--write", project=repo, stack="sim")
    assert done.exit_code == 0, done.output
    assert SECRETS["HF_TOKEN"] not in done.output
    imported = load_project(repo, "sim")
    [placed_dep] = imported.stack.for_node(node)
    assert (placed_dep.name, placed_dep.port, placed_dep.adopt) == (DEP, PORT, container)
    assert imported.profiles[placed_dep.profile].extends == profile, done.output
    adopt_and_check(fleet, imported, node, placed_dep.profile, container)

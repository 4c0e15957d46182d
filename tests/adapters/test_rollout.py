"""Rollouts on the simulated fleet: real sshd, real dockerd, the real stand-in engine.

The tests share one fleet and run in file order; each one first brings the nodes to the
state it needs with an ordinary deploy (a no-op when they are there already). They deploy a
deployment of their own (``rt`` on port 8001), so the stack's ``main`` deployments, which
other test modules drive, are left alone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from servefleet.adapters import compose_commands, remote
from servefleet.adapters.lock import NodeLock
from servefleet.adapters.rollout import (
    NodeResult,
    ProgressEvent,
    deploy,
    list_releases,
    plan_fleet,
    rollback,
)
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.errors import ValidationFailed
from servefleet.core.models import Deployment, Node, Profile
from servefleet.core.project import Project, load_project
from servefleet.core.secrets import SecretMask
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import http_get, real_standin, wiped_project

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

SECRETS = {"HF_TOKEN": "hf_rollout-test-secret-value"}
DEP = "rt"
PORT = 8001
DEFAULT = {"sim-spark-1": "qwen36-fp8", "sim-spark-2": "qwen36-fp8",
           "sim-5090": "qwen36-q4-llamacpp"}
LOCK_WAIT_SECONDS = 300


# -- helpers ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet(sim_fleet: FleetHandle) -> FleetHandle:
    """The fleet, with the real stand-in engine (a placeholder proves no boot facts)."""
    return real_standin(sim_fleet, "the stand-in engine image is not built yet (servefleet/"
                        "sim/standin has no Dockerfile.vllm): rollout tests need its boot log")


@pytest.fixture(scope="module")
def base(fleet: FleetHandle) -> Iterator[Project]:
    """The project with the sim stack; the test deployment is wiped before and after."""
    yield from wiped_project(fleet, DEP)


def placed(project: Project, profiles: dict[str, str]) -> Project:
    """``project`` with the stack placing ``profiles`` (node → profile) as deployment
    :data:`DEP` on :data:`PORT`."""
    deployments = [Deployment(node=node, name=DEP, profile=profile, port=PORT)
                   for node, profile in profiles.items()]
    stack = project.stack.model_copy(update={"deployments": deployments})
    return dataclasses.replace(project, stack=stack)


def by_node(results: list[NodeResult]) -> dict[str, NodeResult]:
    return {r.node: r for r in results}


def folder(node: Node) -> Path:
    """The test deployment's folder on the node (the node's files are on this machine)."""
    return Path(node.base_dir) / DEP


def current_of(node: Node) -> str | None:
    link = folder(node) / "current"
    return os.readlink(link).rpartition("/")[2] if link.is_symlink() else None


def get(node: Node, path: str, port: int = PORT) -> tuple[int, bytes]:
    return http_get(node, port, path, timeout=5)


def running_release(fleet: FleetHandle, name: str) -> str:
    return fleet.ssh(name, f"docker ps --filter label=com.docker.compose.project=servefleet-{DEP} "
                           "--format '{{.Label \"io.servefleet.release\"}}'").stdout.strip()


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` (root included) with its mtime, ctime and size."""
    found = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        found[str(path.relative_to(root))] = (info.st_mtime_ns, info.st_ctime_ns, info.st_size)
    return found


def deploy_when_free(project: Project, nodes: list[str] | None = None,
                     secrets: dict[str, str] = SECRETS, **options: Any) -> list[NodeResult]:
    """:func:`deploy`, waiting while another process's rollout holds a node's lock.

    On a shared development machine other test sessions roll out to the same simulated
    nodes; in CI nothing else runs. A lock held by this process is never waited for.
    """
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        results = deploy(project, nodes, secrets=secrets, **options)
        foreign = [r for r in results if r.error_kind == "LockHeld"
                   and f" pid={os.getpid()} " not in (r.error or "")]
        if not foreign or time.monotonic() > deadline:
            return results
        time.sleep(2)


def ensure(project: Project, profiles: dict[str, str] = DEFAULT) -> list[NodeResult]:
    results = deploy_when_free(placed(project, profiles))
    assert all(r.ok for r in results), [r.to_json() for r in results]
    return results


# -- the scenarios ---------------------------------------------------------------------------
def test_three_nodes_deploy_and_pass_their_health_gates(base: Project,
                                                        fleet: FleetHandle) -> None:
    stack = placed(base, {d.node: d.profile for d in base.stack.deployments})
    events: list[ProgressEvent] = []
    results = by_node(deploy_when_free(stack, progress=events.append))
    assert set(results) == {"sim-spark-1", "sim-spark-2", "sim-5090"}
    for name, result in results.items():
        assert result.ok, result.to_json()
        [dep] = result.deployments
        assert dep.status == "deployed"
        assert dep.health is not None and dep.health.ok, dep.health and dep.health.to_json()
        verdicts = {c.fact: c.verdict for c in dep.health.checks}
        assert verdicts["boot outcome"] == verdicts["GET /health"] == "pass"
        assert verdicts["served model name"] == "pass"
        # The health checks beyond the gate's own ran too, each probe once.
        assert verdicts["chat completion (thinking off)"] == "pass"
        assert "KV pool vs baseline" in verdicts
        facts = [c.fact for c in dep.health.checks]
        assert facts.count("GET /health") == facts.count("served model name") == 1, facts
        node = base.nodes[name]
        assert current_of(node) == dep.release_id
        assert get(node, "/health")[0] == 200
        release = folder(node) / "releases" / str(dep.release_id)
        assert (release / "engine.env").stat().st_mode & 0o777 == 0o600
        manifest = json.loads((release / "manifest.json").read_text())
        assert manifest["release_id"] == dep.release_id
        assert manifest["profile"] == stack.stack.for_node(name)[0].profile
        audit = (folder(node) / "audit.log").read_text()
        assert audit.splitlines()[-1].split("\t")[2:6] == ["deploy", DEP, dep.release_id, "ok"]
        assert SECRETS["HF_TOKEN"] not in audit
    spark = results["sim-spark-1"].deployments[0].health
    assert spark is not None
    assert spark.facts["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert {c.fact: c.verdict for c in spark.checks}["max_model_len"] == "pass"
    phases = {(e.node, e.phase) for e in events}
    for name in results:
        for phase in ("observe", "lock", "preflight", "upload", "up", "boot", "health",
                      "switch", "done"):
            assert (name, phase) in phases, (name, phase)


def test_noop_deploy_writes_nothing(base: Project, fleet: FleetHandle) -> None:
    ensure(base)
    before = {n: tree(folder(base.nodes[n])) for n in fleet.nodes}
    time.sleep(0.05)  # a write now would get a later timestamp
    results = deploy_when_free(placed(base, DEFAULT))
    assert [d.status for r in results for d in r.deployments] == ["unchanged"] * 3
    after = {n: tree(folder(base.nodes[n])) for n in fleet.nodes}
    assert after == before


def test_switching_one_node_to_mtp_changes_only_that_node(base: Project,
                                                          fleet: FleetHandle) -> None:
    ensure(base)
    mtp = placed(base, {**DEFAULT, "sim-spark-2": "qwen36-fp8-mtp"})
    items, errors = plan_fleet(mtp, secrets=SECRETS)
    assert not errors
    actions = {i.node: i.action for i in items}
    assert actions == {"sim-spark-1": "unchanged", "sim-spark-2": "update",
                       "sim-5090": "unchanged"}
    [item] = [i for i in items if i.node == "sim-spark-2"]
    assert item.flag_diff.added == {
        "--speculative-config": '{"method":"qwen3_next_mtp","num_speculative_tokens":2}'}
    assert not item.flag_diff.removed and not item.flag_diff.changed and item.restart

    results = by_node(deploy_when_free(mtp))
    assert [d.status for d in results["sim-spark-1"].deployments] == ["unchanged"]
    assert [d.status for d in results["sim-5090"].deployments] == ["unchanged"]
    [dep] = results["sim-spark-2"].deployments
    assert dep.status == "deployed", dep.to_json()
    assert dep.health is not None
    mode = next(c for c in dep.health.checks if c.fact == "CUDA graph mode")
    assert (mode.expected, mode.observed, mode.verdict) == ("PIECEWISE", "PIECEWISE", "pass")
    # sim-spark-1 (same GPU) still runs the profile without MTP: its pool is larger.
    kv_without = running_facts(base, "sim-spark-1")["kv_cache_tokens"]
    kv_with = dep.health.facts["kv_cache_tokens"]
    assert kv_with < kv_without, (kv_with, kv_without)


def engine_env(fleet: FleetHandle, name: str) -> list[str]:
    """The running engine container's environment, ``NAME=value`` lines."""
    return fleet.ssh(name, f"docker inspect --format '{{{{range .Config.Env}}}}{{{{println .}}}}"
                           f"{{{{end}}}}' $(docker ps -q --filter "
                           f"label=com.docker.compose.project=servefleet-{DEP})"
                     ).stdout.splitlines()


def test_switching_to_a_release_already_on_the_node_takes_the_stack_s_secrets(
        base: Project, fleet: FleetHandle) -> None:
    # Release ids never depend on secret values: the folder of the release switched back to
    # was written with the token of its first deploy. It must not be reused as it is.
    ensure(base)
    ensure(base, {**DEFAULT, "sim-spark-2": "qwen36-fp8-mtp"})
    node = base.nodes["sim-spark-2"]
    stack = placed(base, DEFAULT)
    rotated = {"HF_TOKEN": "hf_rotated-between-the-two-deploys"}
    items, errors = plan_fleet(stack, ["sim-spark-2"], rotated)
    assert not errors
    [item] = items
    assert item.release_id in os.listdir(folder(node) / "releases")
    assert item.action == "update" and item.upload and item.repair

    [result] = deploy_when_free(stack, ["sim-spark-2"], secrets=rotated)
    assert result.ok, result.to_json()
    release = folder(node) / "releases" / str(item.release_id)
    assert "HF_TOKEN='hf_rotated-between-the-two-deploys'" in \
        (release / "engine.env").read_text()
    assert "HF_TOKEN=hf_rotated-between-the-two-deploys" in engine_env(fleet, "sim-spark-2")
    # The folder it replaced is kept beside it, like an edited one.
    assert any(name.startswith(f"{item.release_id}.edited-")
               for name in os.listdir(folder(node) / "releases"))

    # Back to the suite's token: the current release's secrets differ, so it is repaired.
    ensure(base)
    assert f"HF_TOKEN={SECRETS['HF_TOKEN']}" in engine_env(fleet, "sim-spark-2")


def running_facts(project: Project, node: str) -> dict[str, Any]:
    """The boot facts of the engine running on ``node``, read again from its log."""
    from servefleet.core.bootlog import parse_text

    with SshTransport(project.nodes[node]) as transport:
        log = transport.run(compose_commands.logs(DEP), timeout=60)
    return parse_text((log.stdout + log.stderr).decode()).model_dump()


def test_engine_oom_at_boot_rolls_back_and_the_old_release_serves(
        base: Project, fleet: FleetHandle) -> None:
    ensure(base)
    node = base.nodes["sim-spark-1"]
    old = current_of(node)
    assert node.sim is not None
    fault = Path(node.sim.control_dir) / "fault"
    fault.write_text("kv_oom\n")

    def lift_fault(event: ProgressEvent) -> None:
        # The restore boots the old release without the fault: the new release failed for
        # its own reasons, the node is fine.
        if event.phase == "restore":
            fault.unlink(missing_ok=True)

    try:
        results = by_node(deploy_when_free(placed(base, {"sim-spark-1": "qwen36-fp8-mtp"}),
                                           progress=lift_fault))
    finally:
        fault.unlink(missing_ok=True)
    [dep] = results["sim-spark-1"].deployments
    assert dep.status == "rolled_back", dep.to_json()
    assert dep.failure is not None
    assert dep.failure.phase == "health"
    assert dep.failure.failure_class == "kv_cache_oom"
    assert any("No available memory for the cache blocks" in line
               for line in dep.failure.evidence), dep.failure.evidence
    assert dep.restore is not None and dep.restore.ok, dep.restore
    assert dep.restore.release_id == old
    assert current_of(node) == old
    assert running_release(fleet, "sim-spark-1") == old
    assert get(node, "/health")[0] == 200
    audit = (folder(node) / "audit.log").read_text().splitlines()[-1]
    assert "\trolled_back\t" in audit and "kv_cache_oom" in audit


def test_turboquant_without_its_overlay_is_refused_before_the_node_is_touched(
        base: Project, fleet: FleetHandle) -> None:
    ensure(base)
    node = base.nodes["sim-5090"]
    old = current_of(node)
    audit_before = (folder(node) / "audit.log").read_text()
    # The shipped NVFP4 + TurboQuant profile without its PR #40798 overlay would boot, serve
    # /health and die on the first prompt longer than one prefill chunk; the validation
    # rules that run before every deploy refuse it, so the node never stops its engine.
    data = base.profiles["qwen36-nvfp4-tq"].model_dump()
    data.update(name="rt-tq-without-overlay", extends=None, patches=[])
    unpatched = Profile.model_validate(data)
    project = dataclasses.replace(base, profiles={**base.profiles, unpatched.name: unpatched})
    with pytest.raises(ValidationFailed) as refused:
        deploy_when_free(placed(project, {"sim-5090": unpatched.name}))
    assert "PR #40798" in str(refused.value) and "kv_cache_dtype" in str(refused.value)
    assert current_of(node) == old
    assert running_release(fleet, "sim-5090") == old
    assert get(node, "/health")[0] == 200
    assert (folder(node) / "audit.log").read_text() == audit_before


def test_connection_cut_mid_upload_never_leaves_a_half_release(
        base: Project, fleet: FleetHandle, request: pytest.FixtureRequest) -> None:
    ensure(base)
    node = base.nodes["sim-spark-2"]
    old = current_of(node)
    # A release big enough that its upload takes a while: 8 node-local override files of
    # about 1 MiB (comments), all part of the release.
    # Inside the project (render takes no file from outside it); removed at the end.
    overrides = []
    padding = base.root / "nodes" / "sim" / "padding"
    padding.mkdir(exist_ok=True)
    request.addfinalizer(lambda: shutil.rmtree(padding, ignore_errors=True))
    for index in range(8):
        path = padding / f"padding-{index}.yaml.j2"  # .yaml in nodes/ is an inventory
        path.write_text("services: {}\n" + ("# padding\n" * 100_000))
        overrides.append(str(path.relative_to(base.root)))
    big_node = node.model_copy(update={"compose_overrides": [*node.compose_overrides,
                                                             *overrides]})
    big = dataclasses.replace(placed(base, {"sim-spark-2": "qwen36-fp8-mtp"}),
                              nodes={**base.nodes, "sim-spark-2": big_node})
    staging = folder(node) / "staging"
    made: list[SshTransport] = []
    cuts: list[str] = []
    done = threading.Event()

    def factory(target: Node, mask: SecretMask) -> SshTransport:
        transport = SshTransport(target, mask=mask)
        made.append(transport)
        return transport

    def cutter() -> None:
        # Every upload attempt unpacks into a new staging folder: cut each one.
        seen: set[str] = set()
        while not done.is_set():
            entries = set(os.listdir(staging)) if staging.is_dir() else set()
            for entry in sorted(entries - seen):
                seen.add(entry)
                cuts.append(entry)
                made[-1].close()  # from another thread, mid-upload
            time.sleep(0.001)

    thread = threading.Thread(target=cutter, daemon=True)
    thread.start()
    try:
        [result] = deploy_when_free(big, ["sim-spark-2"], transport_factory=factory)
    finally:
        done.set()
        thread.join()
    [dep] = result.deployments
    assert len(cuts) == 2, cuts  # the first attempt and its one retry
    assert dep.status == "failed", dep.to_json()
    assert dep.failure is not None and dep.failure.phase == "upload"
    assert "connection lost" in dep.failure.message
    assert current_of(node) == old
    assert not (folder(node) / "releases" / str(dep.release_id)).exists()
    # A cut attempt may leave its staging folder (the remote shell can die with the
    # session); it is never renamed into releases/ and the next prune removes it.
    assert all(entry.startswith(f"{dep.release_id}.") for entry in os.listdir(staging))
    assert running_release(fleet, "sim-spark-2") == old
    assert get(node, "/health")[0] == 200
    # The lock was given back over a new connection, and the next deploy goes through.
    [again] = deploy_when_free(big, ["sim-spark-2"])
    assert again.ok, again.to_json()
    assert current_of(node) == dep.release_id
    assert os.listdir(staging) == []


def test_concurrent_deploy_is_refused_by_the_lock(base: Project, fleet: FleetHandle) -> None:
    ensure(base)
    changed = placed(base, {"sim-spark-2": "qwen36-fp8-mtp"})
    barrier = threading.Barrier(2)
    results: list[NodeResult] = []

    def one() -> None:
        barrier.wait()
        results.extend(deploy(changed, secrets=SECRETS))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(r.status for r in results)
    assert statuses == ["deployed", "error"], [r.to_json() for r in results]
    [refused] = [r for r in results if r.status == "error"]
    assert refused.error_kind == "LockHeld"
    assert "another rollout holds the node lock" in (refused.error or "")
    assert f" pid={os.getpid()} " in (refused.error or "") and "op=deploy" in (refused.error or "")


def test_stale_lock_is_removed_by_its_id_and_no_other(base: Project,
                                                      fleet: FleetHandle) -> None:
    ensure(base)
    node = base.nodes["sim-spark-2"]
    with SshTransport(node) as transport:
        ghost = NodeLock(transport, "deploy", datetime.now(UTC))
        ghost.acquire()
    changed = placed(base, {"sim-spark-2": "qwen36-fp8-mtp"})
    try:
        [refused] = deploy(changed, secrets=SECRETS)
        assert refused.error_kind == "LockHeld"
        assert f"id={ghost.lock_id}" in (refused.error or "")
        assert f"servefleet unlock sim-spark-2 {ghost.lock_id}" in (refused.error or "")
        [other] = deploy(changed, secrets=SECRETS, unlock_id="000000000000")
        assert other.error_kind == "LockHeld"  # another id: the lock stays
    except BaseException:
        shutil.rmtree(Path(node.base_dir) / remote.LOCK_DIR, ignore_errors=True)
        raise
    [forced] = deploy(changed, secrets=SECRETS, unlock_id=ghost.lock_id)
    assert forced.ok, forced.to_json()
    assert not (Path(node.base_dir) / remote.LOCK_DIR).exists()


def test_sigterm_during_the_boot_gate_restores_the_old_release(
        base: Project, fleet: FleetHandle, tmp_path: Path) -> None:
    """A real ``servefleet deploy`` process gets SIGTERM while the new engine boots: it
    restores the old release, gated, writes the audit line and releases the lock."""
    ensure(base)
    node = base.nodes["sim-spark-2"]
    before = current_of(node)
    copy = project_copy(fleet, tmp_path / "project", {"sim-spark-2": "qwen36-fp8-mtp"})
    state = Path(node.base_dir) / remote.LOCK_DIR / remote.LOCK_STATE_FILE
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("servefleet")), "--project", str(copy), "--stack",
         "rt", "deploy", "--yes", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "HF_TOKEN": SECRETS["HF_TOKEN"]})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if state.exists() and "phase=boot" in state.read_text():
            process.send_signal(signal.SIGTERM)
            break
        time.sleep(0.05)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 1, (out, err)
    [result] = json.loads(out)["nodes"]
    [dep] = result["deployments"]
    assert dep["status"] == "rolled_back", dep
    assert dep["failure"]["failure_class"] == "interrupted"
    assert current_of(node) == before and running_release(fleet, "sim-spark-2") == before
    assert not (Path(node.base_dir) / remote.LOCK_DIR).exists()
    gated = (folder(node) / remote.GATED).read_text()
    assert f"release={before} " in gated
    audit = (folder(node) / remote.AUDIT_FILE).read_text().splitlines()[-1].split("\t")
    assert audit[5] == "rolled_back" and "interrupted by SIGTERM" in audit[6]


def project_copy(fleet: FleetHandle, destination: Path, profiles: dict[str, str]) -> Path:
    """The project with the fleet's inventory, and a stack ``rt`` placing ``profiles``."""
    for name in ("nodes", "profiles", "templates"):
        shutil.copytree(fleet.project_dir / name, destination / name)
    shutil.copy(fleet.project_dir / "Pulumi.yaml", destination / "Pulumi.yaml")
    stack = {node: {DEP: {"profile": profile, "port": PORT}} for node, profile in profiles.items()}
    (destination / "Pulumi.rt.yaml").write_text(
        yaml.safe_dump({"config": {"servefleet:profiles": stack}}))
    return destination


def test_changed_host_key_is_refused(base: Project, fleet: FleetHandle,
                                     tmp_path: Path) -> None:
    copy = project_copy(fleet, tmp_path / "project", DEFAULT)
    inventory = copy / "nodes" / "sim" / "sim-5090.yaml"
    data = yaml.safe_load(inventory.read_text())
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")],
                   check=True)
    data["ssh"]["host_keys"] = [" ".join((tmp_path / "k.pub").read_text().split()[:2])]
    inventory.write_text(yaml.safe_dump(data))
    project = load_project(copy, "rt")
    [result] = deploy(project, ["sim-5090"], secrets=SECRETS)
    assert result.error_kind == "HostKeyMismatch"
    assert "sim-5090: host key mismatch" in (result.error or "")
    assert (result.error or "").count("SHA256:") == 2
    assert not result.deployments


def test_killed_engine_comes_back_on_the_next_deploy(base: Project, fleet: FleetHandle) -> None:
    ensure(base)
    node = base.nodes["sim-5090"]
    release = current_of(node)
    releases_before = sorted(os.listdir(folder(node) / "releases"))
    fleet.ssh("sim-5090", f"docker kill $(docker ps -q --filter "
                          f"label=com.docker.compose.project=servefleet-{DEP}) >/dev/null")
    stack = placed(base, DEFAULT)
    items, _ = plan_fleet(stack, ["sim-5090"], SECRETS)
    [item] = items
    assert item.action == "update"
    assert item.reasons == ("engine not running (exited (exit 137))",)
    assert not item.upload
    [result] = deploy_when_free(stack, ["sim-5090"])
    assert result.ok, result.to_json()
    [dep] = result.deployments
    assert dep.status == "deployed" and dep.release_id == release
    assert "upload" not in dict(dep.phases)
    assert running_release(fleet, "sim-5090") == release
    assert get(node, "/health")[0] == 200
    assert sorted(os.listdir(folder(node) / "releases")) == releases_before


def test_hand_edited_release_is_put_back_by_the_next_deploy(base: Project,
                                                            fleet: FleetHandle) -> None:
    ensure(base)
    node = base.nodes["sim-spark-1"]
    release = current_of(node)
    assert release is not None
    compose = folder(node) / "releases" / release / "compose.yaml"
    rendered = compose.read_bytes()
    fleet.ssh("sim-spark-1", f"printf '# edited by hand\\n' >> {compose}")
    assert compose.read_bytes() == rendered + b"# edited by hand\n"
    stack = placed(base, DEFAULT)
    items, errors = plan_fleet(stack, ["sim-spark-1"], SECRETS)
    assert not errors
    [item] = items
    assert item.action == "update" and item.repair and item.upload
    assert item.release_id == item.current_release == release
    assert item.reasons == ("files edited on the node: compose.yaml",)
    assert "  files edited on the node: compose.yaml" in item.summary_lines()

    [result] = deploy_when_free(stack, ["sim-spark-1"])
    assert result.ok, result.to_json()
    [dep] = result.deployments
    assert dep.status == "deployed" and dep.release_id == release
    assert "upload" in dict(dep.phases)
    assert dep.health is not None and dep.health.ok
    assert compose.read_bytes() == rendered
    assert current_of(node) == release
    [aside] = [p for p in (folder(node) / "releases").iterdir()
               if p.name.startswith(f"{release}.edited-")]
    assert (aside / "compose.yaml").read_bytes() == rendered + b"# edited by hand\n"
    assert running_release(fleet, "sim-spark-1") == release
    assert get(node, "/health")[0] == 200
    items, _ = plan_fleet(stack, ["sim-spark-1"], SECRETS)
    assert [i.action for i in items] == ["unchanged"]


def test_rollback_goes_to_the_previous_release(base: Project, fleet: FleetHandle) -> None:
    ensure(base)
    ensure(base)
    ensure(base, {**DEFAULT, "sim-spark-2": "qwen36-fp8-mtp"})
    node = base.nodes["sim-spark-2"]
    infos = list_releases(base, "sim-spark-2", DEP)
    [current] = [i for i in infos if i.current]
    [previous] = [i for i in infos if i.previous]
    assert (current.profile, previous.profile) == ("qwen36-fp8-mtp", "qwen36-fp8")
    result = rollback(base, "sim-spark-2", DEP)
    assert result.status == "deployed", result.to_json()
    assert result.release_id == previous.release_id
    assert current_of(node) == previous.release_id
    assert result.health is not None and result.health.ok
    mode = next(c for c in result.health.checks if c.fact == "CUDA graph mode")
    assert mode.observed == "FULL_AND_PIECEWISE"
    audit = (folder(node) / "audit.log").read_text().splitlines()[-1]
    assert audit.split("\t")[2] == "rollback"
    # A second rollback goes back to where the first one came from.
    again = rollback(base, "sim-spark-2", DEP)
    assert again.status == "deployed" and again.release_id == current.release_id


def test_cli_deploy_plan_releases_and_logs(base: Project, fleet: FleetHandle, tmp_path: Path,
                                          run_cli: Callable[..., Result]) -> None:
    ensure(base)
    copy = project_copy(fleet, tmp_path / "project", DEFAULT)
    env = {"HF_TOKEN": SECRETS["HF_TOKEN"]}
    run = functools.partial(run_cli, project=copy, stack="rt")
    plan = run("plan", env=env)
    assert plan.exit_code == 0, plan.output
    assert plan.output.count(f"/{DEP}: unchanged (release ") == 3, plan.output
    done = run("deploy", "--yes", "--json", env=env)
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["ok"] and [n["status"] for n in data["nodes"]] == ["unchanged"] * 3
    listed = run("releases", "sim-spark-1", "-d", DEP, "--json")
    assert listed.exit_code == 0, listed.output
    assert sum(r["current"] for r in json.loads(listed.output)) == 1
    logs = run("logs", "sim-spark-1", "-d", DEP)
    assert logs.exit_code == 0, logs.output
    assert "Application startup complete" in logs.output
    assert SECRETS["HF_TOKEN"] not in logs.output

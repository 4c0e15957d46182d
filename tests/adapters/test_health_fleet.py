"""Health of live deployments on the simulated fleet: real sshd, real dockerd, the real
stand-in engine, faults set through each node's control file.

Engines are brought up by the rollout's own deploy, on a deployment of this module's own
(``hc`` on port 8002), so the stack's ``main`` and the rollout tests' ``rt`` are left alone.
A fault is shown by writing its word to the node's control file and re-creating the
container through the rollout's remote command builders (``stop``, then compose ``up
--force-recreate`` of the current release), as an operator restarting an engine would.
The tests share one fleet and run in file order.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from servefleet.adapters import compose_commands, remote
from servefleet.adapters.node_health import HealthOptions, check_fleet, gate_checks
from servefleet.adapters.observe import observe_node
from servefleet.adapters.releases import upload
from servefleet.adapters.rollout import NodeResult, deploy
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.baselines import BASELINE_FILE, BaselineBook, parse_book
from servefleet.core.bootlog import parse_text
from servefleet.core.errors import ValidationFailed
from servefleet.core.health_table import DeploymentHealth
from servefleet.core.models import Deployment, Node, Profile
from servefleet.core.project import Project, load_project
from servefleet.core.render.release import manifest_for, render_deployments
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import real_standin

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

DEP = "hc"
PORT = 8002
SECRETS = {"HF_TOKEN": "hf_health-test-secret-value"}
LOCK_WAIT_SECONDS = 300
SHORT_DEADLINE = 15
"""Boot deadline of the short-deadline profile (the smallest a profile may set is 10 s)."""
# This machine's runc may refuse the rendered compose file's memlock/stack ulimits
# ("error setting rlimits … operation not permitted"); a node override drops them.
NO_ULIMITS = "services:\n  engine:\n    ulimits: !reset {}\n"


# -- fixtures and helpers --------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet(sim_fleet: FleetHandle) -> FleetHandle:
    """The fleet, with the real stand-in engine (a placeholder proves no boot facts)."""
    return real_standin(sim_fleet, "the stand-in engine image is not built (servefleet/sim/"
                        "standin has no Dockerfile.vllm): health checks need its boot log and "
                        "endpoints")


GB10_CEILING = 0.83
"""The largest utilization a GB10 boots (the sim nodes' boot_free_gib over cuda_memory_gib)."""


def _profile(base: Profile, name: str, **update: Any) -> Profile:
    data = base.model_dump()
    data.update(update, name=name, extends=None)
    return Profile.model_validate(data)


@pytest.fixture(scope="module")
def base(fleet: FleetHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """The sim project plus two test profiles, every node wiped of this module's deployment
    and of KV baselines; at the end the module's engines are stopped."""
    project = load_project(fleet.project_dir, "sim")
    # Inside the project: render takes no override from outside it.
    # (.j2: files ending .yaml in nodes/ are node inventories; a template renders as is.)
    override = fleet.project_dir / "nodes" / "sim" / "health-fleet-no-ulimits.override.yaml.j2"
    override.write_text(NO_ULIMITS)
    nodes = {}
    for name, node in project.nodes.items():
        if name in fleet.nodes:
            stop_engine(fleet, name)
            shutil.rmtree(Path(node.base_dir) / DEP, ignore_errors=True)
            (Path(node.base_dir) / BASELINE_FILE).unlink(missing_ok=True)
            fault_file(node).unlink(missing_ok=True)
        nodes[name] = node.model_copy(update={
            "compose_overrides": [*node.compose_overrides,
                                  str(override.relative_to(fleet.project_dir))]})
    fp8 = project.profiles["qwen36-fp8"]
    short = _profile(fp8, "hc-short-deadline", health={
        **fp8.health.model_dump(), "boot_deadline_seconds": SHORT_DEADLINE})
    # The W8A16 profile is written for an 80 GB GPU (0.92 of it); on a GB10, which frees at
    # most 102.2 of its 121.69 GiB at boot, it runs at that ceiling, 0.83.
    gb10 = {name: _profile(project.profiles[name], name, vllm={
        **project.profiles[name].vllm.model_dump(),  # type: ignore[union-attr]
        "gpu_memory_utilization": GB10_CEILING}) for name in ("qwen36-w8a16",)}
    profiles = {**project.profiles, **gb10, short.name: short}
    yield dataclasses.replace(project, nodes=nodes, profiles=profiles)
    override.unlink(missing_ok=True)
    for name in fleet.nodes:
        fault_file(project.nodes[name]).unlink(missing_ok=True)
        stop_engine(fleet, name)


def stop_engine_of(node: Node) -> None:
    """:func:`stop_engine` over the node's own SSH transport."""
    with SshTransport(node) as transport:
        transport.run(["sh", "-c", "ids=$(docker ps -aq --filter "
                       f"label=com.docker.compose.project=servefleet-{DEP}); "
                       "[ -z \"$ids\" ] || docker rm -f $ids >/dev/null"])


def stop_engine(fleet: FleetHandle, name: str) -> None:
    fleet.ssh(name, "ids=$(docker ps -aq --filter "
                    f"label=com.docker.compose.project=servefleet-{DEP}); "
                    "[ -z \"$ids\" ] || docker rm -f $ids >/dev/null")


def fault_file(node: Node) -> Path:
    assert node.sim is not None
    return Path(node.sim.control_dir) / "fault"


def placed(project: Project, profiles: dict[str, str]) -> Project:
    """``project`` whose stack places ``profiles`` (node → profile) as deployment ``hc``."""
    deployments = [Deployment(node=node, name=DEP, profile=profile, port=PORT)
                   for node, profile in profiles.items()]
    return dataclasses.replace(project, stack=project.stack.model_copy(
        update={"deployments": deployments}))


def ensure(project: Project, profiles: dict[str, str]) -> Project:
    """Deploy ``profiles`` (a no-op where they run already); waits while another session's
    rollout holds a node's lock."""
    stack = placed(project, profiles)
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        results: list[NodeResult] = deploy(stack, secrets=SECRETS)
        foreign = [r for r in results if r.error_kind == "LockHeld"
                   and f" pid={os.getpid()} " not in (r.error or "")]
        if not foreign or time.monotonic() > deadline:
            break
        time.sleep(2)
    problems = [{"node": r.node, "error": r.error,
                 "failures": [d.failure.to_json() for d in r.deployments if d.failure]}
                for r in results if not r.ok]
    assert not problems, json.dumps(problems, indent=1)
    return stack


def health(stack: Project, nodes: list[str] | None = None,
           **options: Any) -> dict[str, DeploymentHealth]:
    """Health of the stack's ``hc`` deployments. An engine still booting (re-created by a
    restart, or by Docker after a crash) is waited for until its deadline (``wait``) unless
    a test asks for the snapshot (``wait=False``)."""
    results = check_fleet(stack, nodes, options=HealthOptions(**{"wait": True, **options}))
    return {r.node: r for r in results}


def rows(result: DeploymentHealth) -> dict[str, Any]:
    return {r.fact: r for r in result.rows}


def failing(result: DeploymentHealth) -> list[str]:
    return [r.fact for r in result.failures]


def restart(stack: Project, name: str, fault: str | None = None) -> None:
    """Set (or clear) the node's fault, then re-create the engine container of the current
    release: ``stop``, then compose ``up -d --force-recreate`` (fresh log, no restarts).
    Without a fault, returns once the engine is up again."""
    node = stack.nodes[name]
    if fault:
        fault_file(node).write_text(fault + "\n")
    else:
        fault_file(node).unlink(missing_ok=True)
    with SshTransport(node) as transport:
        observed = observe_node(transport, [DEP]).deployments[DEP]
        assert observed.current_release is not None and observed.manifest is not None
        transport.run(compose_commands.stop(DEP, grace_seconds=1), timeout=120)
        transport.run(compose_commands.compose(("docker", "compose"), node.base_dir, DEP,
                                     observed.current_release,
                                     observed.manifest["compose_files"],
                                     "up", "-d", "--force-recreate"), timeout=300)
    if fault is None:
        wait_for("the engine to come up again",
                 lambda: "Application startup complete." in engine_log_of(stack, name))


def engine_log_of(stack: Project, name: str) -> str:
    node = stack.nodes[name]
    with SshTransport(node) as transport:
        done = transport.run(compose_commands.logs(DEP), timeout=60, check=False)
    return (done.stdout + done.stderr).decode("utf-8", "replace")


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


def restarts(fleet: FleetHandle, name: str) -> int:
    result = fleet.ssh(name, f"docker inspect --format '{{{{.RestartCount}}}}' $(docker ps -aq "
                             "--latest --filter "
                             f"label=com.docker.compose.project=servefleet-{DEP})",
                       check=False)
    return int(result.stdout.strip() or 0)


def book_of(node: Node) -> BaselineBook:
    path = Path(node.base_dir) / BASELINE_FILE
    book, problem = parse_book(path.read_text() if path.exists() else "")
    assert problem is None
    return book


def baselines(node: Node) -> dict[str, Any]:
    return {name: entry.model_dump() for name, entry in book_of(node).baselines.items()}


def images(node: Node) -> dict[str, Any]:
    return {name: entry.model_dump() for name, entry in book_of(node).images.items()}


def project_copy(fleet: FleetHandle, destination: Path, profiles: dict[str, str]) -> Path:
    """The project with the fleet's inventory and a stack ``hc`` placing ``profiles``."""
    for name in ("nodes", "profiles", "templates"):
        shutil.copytree(fleet.project_dir / name, destination / name)
    shutil.copy(fleet.project_dir / "Pulumi.yaml", destination / "Pulumi.yaml")
    stack = {node: {DEP: {"profile": profile, "port": PORT}} for node, profile in profiles.items()}
    (destination / f"Pulumi.{DEP}.yaml").write_text(
        yaml.safe_dump({"config": {"servefleet:profiles": stack}}))
    return destination


@pytest.fixture
def health_cli(run_cli: Callable[..., Result], fleet: FleetHandle,
               tmp_path: Path) -> Callable[..., Result]:
    """``health_cli(profiles, *args)``: ``servefleet health ARGS…`` (the real group) on a copy
    of the fleet's project whose stack places ``profiles``."""
    def run(profiles: dict[str, str], *args: str) -> Result:
        copy = project_copy(fleet, tmp_path / "project", profiles)
        return run_cli("health", *args, project=copy, stack=DEP)

    return run


GB10_ROUNDS = ({"sim-spark-1": "qwen36-fp8", "sim-spark-2": "qwen36-fp8"},
               {"sim-spark-1": "qwen36-w8a16", "sim-spark-2": "qwen36-fp8-mtp"},
               {"sim-spark-1": "qwen36-w8a16-1m"})
RTX_ROUNDS = ({"sim-5090": "qwen36-nvfp4-tq"}, {"sim-5090": "qwen36-q4-llamacpp"})


# -- every shipped profile -------------------------------------------------------------------
def test_every_shipped_profile_has_a_node_here(base: Project) -> None:
    """The FP8 and both W8A16 profiles run on the GB10 nodes (128 GiB: the W8A16 ones need
    an 80 GB GPU), NVFP4 + TurboQuant and the Q4 GGUF on the RTX 5090."""
    # A profile for more GPUs than one node has spans two nodes: the pair's
    # (tests/sim/test_multinode_fleet.py).
    shipped = {name for name, p in base.profiles.items() if not name.startswith("hc-")
               and (p.vllm is None or (p.vllm.tensor_parallel_size or 1) == 1)}
    placed_here = {p for rounds in (GB10_ROUNDS, RTX_ROUNDS) for r in rounds for p in r.values()}
    assert shipped == placed_here


def test_gb10_profiles_are_healthy(base: Project, health_cli: Callable[..., Result]) -> None:
    stack = ensure(base, GB10_ROUNDS[0])
    first = health(stack, determinism=True)
    for name, result in first.items():
        assert result.ok, (name, result.error, result.failures)
        got = rows(result)
        assert got["boot outcome"].verdict == got["GET /health"].verdict == "pass"
        assert got["chat completion (thinking off)"].verdict == "pass"
        assert got["determinism (temperature 0)"].verdict == "pass"
        # The deploy's health gate recorded the pool of the healthy boot (and the image it
        # ran); the check compares with it and rewrites nothing.
        assert got["KV pool vs baseline"].verdict == "pass", got["KV pool vs baseline"]
        assert "KV baseline" not in got
        book = baselines(stack.nodes[name])
        assert book["qwen36-fp8"]["deployment"] == DEP
        assert book["qwen36-fp8"]["kv_pool"] == result.facts["kv_cache_tokens"]
        assert result.facts["cudagraph_mode"] == "FULL_AND_PIECEWISE"
        image = images(stack.nodes[name])[DEP]
        assert image["release_id"] == result.release_id
        assert image["image_id"].startswith("sha256:")

    stack = ensure(base, GB10_ROUNDS[1])
    second = health(stack, determinism=True)
    for name, result in second.items():
        assert result.ok, (name, result.error, result.failures)
    mtp = rows(second["sim-spark-2"])
    assert mtp["CUDA graph mode"].observed == "PIECEWISE"  # MTP on FlashInfer off SM100
    assert mtp["speculative decoding"].verdict == "pass"
    assert mtp["speculative decoding"].observed.startswith("acceptance ")
    # Seeds 000/002: MTP makes identical requests differ; expected, not a failure.
    assert mtp["determinism (temperature 0)"].verdict == "info"
    assert mtp["determinism (temperature 0)"].observed.endswith("(expected)")
    # The MTP pool is smaller than the same node's baseline of the profile without MTP.
    smaller = mtp["KV pool vs without speculation"]
    assert smaller.verdict == "pass" and "(qwen36-fp8 on this node" in smaller.expected
    assert set(baselines(stack.nodes["sim-spark-2"])) == {"qwen36-fp8", "qwen36-fp8-mtp"}

    # The 1M-context profile takes 0.97 of an 80 GB GPU; a GB10 cannot free that much at
    # boot: the startup-memory rule refuses it before the node is touched.
    with pytest.raises(ValidationFailed, match=r"frees at most 102\.2 GiB at boot"):
        ensure(base, GB10_ROUNDS[2])

    # The command: JSON for machines, exit 0 when healthy.
    done = health_cli(GB10_ROUNDS[1], "--json", "--wait")
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["ok"] and len(data["deployments"]) == 2
    assert SECRETS["HF_TOKEN"] not in done.output


def test_nvfp4_turboquant_on_the_5090_is_healthy(base: Project) -> None:
    stack = ensure(base, RTX_ROUNDS[0])
    result = health(stack, determinism=True)["sim-5090"]
    assert result.ok, result.to_json()
    tq = rows(result)
    # The PR #40798 overlay lets TurboQuant answer a prompt longer than one chunk.
    assert tq["prompt > max_num_batched_tokens (8,192)"].verdict == "pass"
    assert tq["KV cache dtype"].observed == "turboquant_4bit_nc"


def test_q4_gguf_on_the_5090_is_healthy(base: Project) -> None:
    stack = ensure(base, RTX_ROUNDS[1])
    result = health(stack, determinism=True)["sim-5090"]
    assert result.ok, result.to_json()
    llama = rows(result)
    assert llama["determinism (temperature 0)"].verdict == "pass"  # one slot, no prompt cache
    assert llama["slots (total_slots)"].verdict == "pass"
    assert llama["context per slot (n_ctx)"].verdict == "pass"
    assert llama["KV pool vs baseline"].verdict == "pass"  # recorded by the deploy's gate
    mib = result.facts["kv_cache_mib"]
    assert llama["KV pool vs baseline"].observed.startswith(f"{mib:,.2f} MiB")


# -- faults ----------------------------------------------------------------------------------
VLLM_NODE = "sim-spark-1"


@pytest.fixture
def fp8(base: Project) -> Iterator[Project]:
    """qwen36-fp8 healthy on :data:`VLLM_NODE`, freshly deployed; afterwards the fault is
    cleared and the engine re-created."""
    node = base.nodes[VLLM_NODE]
    fault_file(node).unlink(missing_ok=True)
    stop_engine_of(node)
    shutil.rmtree(Path(node.base_dir) / DEP, ignore_errors=True)
    stack = ensure(base, {VLLM_NODE: "qwen36-fp8"})
    yield stack
    restart(stack, VLLM_NODE)


def test_kv_oom_fails_with_its_class_and_proving_line(
        fp8: Project, health_cli: Callable[..., Result]) -> None:
    restart(fp8, VLLM_NODE, "kv_oom")
    wait_for("the KV-cache OOM", lambda: "No available memory for the cache blocks" in
             engine_log_of(fp8, VLLM_NODE))
    result = health(fp8)[VLLM_NODE]
    assert not result.ok
    assert result.failure_class == "kv_cache_oom"
    proving = [line for row in result.failures for line in row.evidence]
    assert any("No available memory for the cache blocks" in line for line in proving), proving
    assert "boot outcome" in failing(result) or "engine restarts" in failing(result)
    # The command names the failed fact and shows the proving line; exit 1.
    done = health_cli({VLLM_NODE: "qwen36-fp8"})
    assert done.exit_code == 1, done.output
    assert "UNHEALTHY [kv_cache_oom]" in done.output
    assert "FAILED " in done.output
    assert "No available memory for the cache blocks" in done.output


def test_crash_after_boot_shows_the_dead_run(fp8: Project, fleet: FleetHandle) -> None:
    restart(fp8, VLLM_NODE, "crash_after_boot=1")
    wait_for("a restart after the crash", lambda: restarts(fleet, VLLM_NODE) >= 1)
    fault_file(fp8.nodes[VLLM_NODE]).unlink()  # the next run stays up
    result = health(fp8)[VLLM_NODE]
    assert not result.ok
    restarted = rows(result)["engine restarts"]
    assert restarted.verdict == "fail"
    assert "an earlier run failed: gpu_runtime_error" in restarted.observed
    assert any("an illegal memory access was encountered" in e for e in restarted.evidence)
    assert result.failure_class == "gpu_runtime_error"


def test_health_fail_is_an_http_failure(fp8: Project) -> None:
    fault_file(fp8.nodes[VLLM_NODE]).write_text("health_fail\n")  # read at runtime
    time.sleep(2)
    result = health(fp8)[VLLM_NODE]
    assert failing(result) == ["GET /health"]
    got = rows(result)["GET /health"]
    assert got.observed.startswith("HTTP 503")
    assert got.evidence == (f"http://{fp8.nodes[VLLM_NODE].address}:{PORT}/health: HTTP 503",)
    assert rows(result)["boot outcome"].verdict == "pass"
    assert result.failure_class is None


def test_kv_small_is_flagged_against_the_baseline(fp8: Project) -> None:
    node = fp8.nodes[VLLM_NODE]
    baseline = baselines(node)["qwen36-fp8"]
    restart(fp8, VLLM_NODE, "kv_small=0.5")
    result = health(fp8, wait=True)[VLLM_NODE]
    # A pool half the size of the node's own last boot is far below the planner's too
    # (kv_small=F: the stand-in loses that fraction of its pool).
    assert failing(result) == ["KV pool vs baseline", "KV pool vs prediction"], \
        result.to_json()
    predicted = rows(result)["KV pool vs prediction"]
    assert f"KV pool {result.facts['kv_cache_tokens']:,} tokens is" in predicted.observed
    flagged = rows(result)["KV pool vs baseline"]
    tokens = result.facts["kv_cache_tokens"]
    day = baseline["recorded_at"][:10]
    assert flagged.observed == (f"KV pool {baseline['kv_pool']:,.0f} → {tokens:,} tokens "
                                f"({(tokens - baseline['kv_pool']) / baseline['kv_pool']:+.0%}) "
                                f"against the baseline of {day}")
    assert any("GPU KV cache size" in e for e in flagged.evidence)
    assert baselines(node)["qwen36-fp8"] == baseline  # an unhealthy boot records nothing
    restart(fp8, VLLM_NODE)
    healed = health(fp8, wait=True)[VLLM_NODE]
    assert healed.ok and rows(healed)["KV pool vs baseline"].verdict == "pass"


def test_gate_checks_extend_a_rollout_gate(fp8: Project) -> None:
    """What a rollout's gate can add after its own checks: the probes beyond /health and
    /v1/models, and the baselines; the boot facts and start time are the gate's."""
    node = fp8.nodes[VLLM_NODE]
    with SshTransport(node) as transport:
        facts = parse_text(engine_log_of(fp8, VLLM_NODE))
        rows_, failure = gate_checks(transport, node, fp8.profiles["qwen36-fp8"], DEP,
                                     release_id=None, facts=facts,
                                     base_url=f"http://{node.address}:{PORT}", since=None)
    got = {r.fact: r for r in rows_}
    assert failure is None
    assert "GET /health" not in got and "served model name" not in got
    assert got["GET /version"].verdict == "pass"
    assert got["chat completion (thinking off)"].verdict == "pass"
    assert got["KV pool vs baseline"].verdict == "pass"
    assert not [r for r in rows_ if r.verdict == "fail"]


def test_boot_deadline_slow_boot_and_hang(base: Project) -> None:
    node = "sim-spark-2"
    stack = ensure(base, {node: "hc-short-deadline"})
    try:
        # Twice as slow still boots well within the deadline.
        restart(stack, node, "slow_boot=2")
        result = health(stack, wait=True)[node]
        assert result.ok, result.to_json()
        # A boot that needs far longer is caught at the deadline.
        restart(stack, node, "slow_boot=40")
        early = health(stack, wait=False)[node]
        assert early.booting and early.state == "booting", early.to_json()
        booting = rows(early)["boot outcome"]
        assert booting.verdict == "info" and booting.observed.startswith(
            f"booting: {early.boot_phase} ("), booting.observed
        assert f"of the {SHORT_DEADLINE} s deadline" in booting.observed
        late = health(stack, wait=True)[node]
        assert late.failure_class == "boot_deadline", late.to_json()
        assert rows(late)["boot outcome"].observed.startswith("incomplete after ")
        # Loading that never finishes: the last lines show where it stopped.
        restart(stack, node, "hang_loading")
        hung = health(stack, wait=True)[node]
        assert hung.failure_class == "boot_deadline"
        outcome = rows(hung)["boot outcome"]
        assert outcome.verdict == "fail"
        assert any("Loading safetensors checkpoint shards:   0% Completed" in line
                   for line in outcome.evidence), outcome.evidence
    finally:
        restart(stack, node)


def test_turboquant_without_the_overlay_dies_on_a_long_prompt(base: Project) -> None:
    node = "sim-5090"
    # Only this test's project has the profile: validation refuses a project that holds it.
    unpatched = _profile(base.profiles["qwen36-nvfp4-tq"], "hc-tq-without-overlay",
                         patches=[])
    with_unpatched = dataclasses.replace(
        base, profiles={**base.profiles, unpatched.name: unpatched})
    stack = placed(with_unpatched, {node: unpatched.name})
    # The validation rules refuse it before any node is touched (test_rollout.py)…
    with pytest.raises(ValidationFailed):
        deploy(stack, secrets=SECRETS)
    # …so it is put on the node and started by hand, as an operator bypassing servefleet
    # would, and then checked.
    [deployment] = stack.stack.deployments
    [rendered] = render_deployments(stack, [deployment], SECRETS)
    target = stack.nodes[node]
    with SshTransport(target) as transport:
        upload(transport, rendered, manifest_for(rendered, deployment, created_at="now",
                                                 created_by="test"))
        transport.run(remote.switch_current(target.base_dir, DEP, rendered.release_id))
    restart(stack, node)
    result = health(stack)[node]
    assert not result.ok
    assert result.failure_class == "turboquant_continuation_prefill_assertion"
    got = rows(result)
    assert got["prompt > max_num_batched_tokens (8,192)"].verdict == "fail"
    after = got["engine after probes"]
    assert after.observed == "failed: turboquant_continuation_prefill_assertion"
    assert any("AssertionError: Workspace is locked" in line and "_continuation_prefill" in line
               for line in after.evidence), after.evidence

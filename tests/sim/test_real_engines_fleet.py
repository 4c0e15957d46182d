"""The real engines on the simulated fleet: the CPU build of vLLM and llama.cpp's
``llama-server`` built from source, each on a tiny model, deployed, switched, failed and
killed through servefleet's own rollout, health checks and drift check.

Every figure asserted here is one the real engine printed or served; nothing in this file
talks to a stand-in (``real_engines`` lists every real engine in the node files again).
The tests share one deployment (``re`` on port 8001) and run in file order.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.request
from collections.abc import Iterator

import pytest

from servefleet.adapters.drift_collect.check import check_fleet as check_drift
from servefleet.adapters.node_health import HealthOptions, check_fleet
from servefleet.adapters.rollout import NodeResult, deploy
from servefleet.core.models import Deployment, Node, Profile
from servefleet.core.project import Project
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import derived, http_get, wiped_project

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

DEP = "re"
PORT = 8001
SECRETS = {"HF_TOKEN": "hf_real-engine-test-secret"}
SPARK = "sim-spark-1"
RTX = "sim-5090"


# -- helpers ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def project(real_engines: FleetHandle) -> Iterator[Project]:
    yield from wiped_project(real_engines, DEP)


def placed(project: Project, profiles: dict[str, str],
           extra: dict[str, Profile] | None = None) -> Project:
    """``project`` placing ``profiles`` (node → profile) as :data:`DEP` on :data:`PORT`,
    with ``extra`` profiles added to the project."""
    deployments = [Deployment(node=node, name=DEP, profile=profile, port=PORT)
                   for node, profile in profiles.items()]
    stack = project.stack.model_copy(update={"deployments": deployments})
    return dataclasses.replace(project, stack=stack,
                               profiles={**project.profiles, **(extra or {})})


def one(results: list[NodeResult], node: str) -> NodeResult:
    [found] = [r for r in results if r.node == node]
    return found


def get(node: Node, path: str) -> tuple[int, bytes]:
    return http_get(node, PORT, path, timeout=30)


def chat(node: Node, model: str, text: str) -> None:
    body = json.dumps({"model": model, "max_tokens": 16, "temperature": 0,
                       "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(f"http://{node.address}:{PORT}/v1/chat/completions",
                                     data=body, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=120) as response:
        assert response.status == 200


def engine_log(fleet: FleetHandle) -> str:
    return fleet.ssh(SPARK, "docker logs $(docker ps -aq --filter "
                            f"label=io.servefleet.deployment={DEP} | head -n1) 2>&1").stdout


# -- the scenarios ---------------------------------------------------------------------------
def test_real_engines_deploy_and_pass_their_gates(project: Project,
                                                  real_engines: FleetHandle) -> None:
    results = deploy(placed(project, {SPARK: "qwen36-fp8", RTX: "qwen36-q4-llamacpp"}),
                     secrets=SECRETS)
    for name in (SPARK, RTX):
        result = one(results, name)
        assert result.ok, result.to_json()
        [dep] = result.deployments
        assert dep.health is not None and dep.health.ok, dep.health and dep.health.to_json()
    vllm = one(results, SPARK).deployments[0].health
    assert vllm is not None
    # The real CPU build's own figures: version, KV pool in tokens, concurrency.
    assert vllm.facts["engine_version"] == "0.32.0"
    assert isinstance(vllm.facts["kv_cache_tokens"], int) and vllm.facts["kv_cache_tokens"] > 0
    assert vllm.facts["max_concurrency"] is not None
    log = engine_log(real_engines)
    assert "servefleet-sim: the real vllm 0.32.0 (CPU build) runs" in log
    assert "--attention-backend FLASHINFER dropped" in log
    llama = one(results, RTX).deployments[0].health
    assert llama is not None
    verdicts = {c.fact: c.verdict for c in llama.checks}
    assert verdicts["boot outcome"] == "pass"
    assert verdicts["context per slot (n_ctx)"] == "pass"


def test_speculative_switch_shows_real_counters(project: Project,
                                                real_engines: FleetHandle) -> None:
    results = deploy(placed(project, {SPARK: "qwen36-fp8-mtp"}), nodes=[SPARK],
                     secrets=SECRETS)
    result = one(results, SPARK)
    assert result.ok, result.to_json()
    [dep] = result.deployments
    assert dep.status == "deployed"
    assert dep.health is not None and dep.health.facts["spec_decode"]
    node = project.nodes[SPARK]
    for _ in range(3):
        chat(node, "qwen36", "one two three one two three one two three one two")
    status, body = get(node, "/metrics")
    assert status == 200
    drafted = [line for line in body.decode().splitlines()
               if line.startswith("vllm:spec_decode_num_draft_tokens_total")]
    assert drafted and float(drafted[0].rsplit(" ", 1)[1]) > 0, drafted
    assert "ngram" in engine_log(real_engines)


def test_real_kv_that_does_not_fit_is_rolled_back(project: Project,
                                                  real_engines: FleetHandle) -> None:
    before = one(deploy(placed(project, {SPARK: "qwen36-fp8"}), nodes=[SPARK],
                        secrets=SECRETS), SPARK)
    assert before.ok, before.to_json()
    # 4M tokens of context (YaRN x16, as the rules ask) need 2 GiB of FP8 KV; the CPU build
    # has 1 GiB (VLLM_CPU_KVCACHE_SPACE).
    yarn = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 262144}
    too_long = derived(project, "qwen36-fp8", "re-too-long",
                       vllm={"max_model_len": 4_194_304,
                             "hf_overrides": {"text_config": {"rope_parameters": yarn}}},
                       env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    result = one(deploy(placed(project, {SPARK: "re-too-long"}, {"re-too-long": too_long}),
                        nodes=[SPARK], secrets=SECRETS), SPARK)
    [dep] = result.deployments
    assert dep.status == "rolled_back", dep.to_json()
    # The real engine's own refusal, classified, and the previous release serving again.
    assert "max_model_len_exceeds_kv_cache" in json.dumps(dep.to_json()), \
        json.dumps(dep.to_json())[:3000]
    assert "larger than the available KV cache memory" in json.dumps(dep.to_json())
    assert dep.restore is not None and dep.restore.ok, dep.to_json()
    assert dep.restore.release_id == before.deployments[0].release_id
    assert get(project.nodes[SPARK], "/health")[0] == 200


def test_killed_engine_is_seen_by_health_and_drift(project: Project,
                                                   real_engines: FleetHandle) -> None:
    stack = placed(project, {RTX: "qwen36-q4-llamacpp"})
    result = one(deploy(stack, nodes=[RTX], secrets=SECRETS), RTX)
    assert result.ok, result.to_json()
    assert check_drift(stack, [RTX], secrets=SECRETS).exit_code == 0
    # The real engine process dies; docker's bounded restart policy may bring it back, so
    # the engine is stopped for good afterwards to see the deployment down.
    # The bracket keeps pkill from matching the shell that runs it.
    real_engines.ssh(RTX, "pkill -KILL -f '[/]opt/servefleet-engine/bin/llama-server'")
    time.sleep(2)
    real_engines.ssh(RTX, "docker stop $(docker ps -q --filter "
                          f"label=io.servefleet.deployment={DEP}) >/dev/null")
    [health] = check_fleet(stack, [RTX], deployments=[DEP],
                           options=HealthOptions(secrets=SECRETS))
    assert not health.ok, health
    report = check_drift(stack, [RTX], secrets=SECRETS)
    assert report.exit_code == 2, report.to_json()
    kinds = {item.kind for item in report.items}
    assert any(str(kind).startswith(("container", "DriftKind.CONTAINER")) for kind in kinds), \
        kinds


def test_real_rejected_flag_is_rolled_back(project: Project,
                                           real_engines: FleetHandle) -> None:
    before = one(deploy(placed(project, {RTX: "qwen36-q4-llamacpp"}), nodes=[RTX],
                        secrets=SECRETS), RTX)
    assert before.ok, before.to_json()
    # A flag this llama-server build does not know: it refuses it in one line and exits.
    rejected = derived(project, "qwen36-q4-llamacpp", "re-rejected",
                       llamacpp={"extra_args": ["--no-such-flag"]})
    result = one(deploy(placed(project, {RTX: "re-rejected"}, {"re-rejected": rejected}),
                        nodes=[RTX], secrets=SECRETS), RTX)
    [dep] = result.deployments
    assert dep.status == "rolled_back", dep.to_json()
    shown = json.dumps(dep.to_json())
    assert "error: invalid argument: --no-such-flag" in shown, shown[:3000]
    assert dep.restore is not None and dep.restore.ok, dep.to_json()
    assert dep.restore.release_id == before.deployments[0].release_id
    assert get(project.nodes[RTX], "/health")[0] == 200

"""The gateway on the simulated fleet, in front of the real vLLM CPU build on both
Spark-shaped nodes: HAProxy (Debian's) on sim-5090, rolled out by servefleet; both Sparks
switched to MTP one after the other while a load runs through the gateway, then a switch
whose new release fails its gate; not one request fails. The long-prompt lane and the
thinking default per route are read back from the engines' own request log.

The tests share one deployment per Spark (``gw`` on port 8001) and run in file order.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from servefleet.adapters.gateway.follow import following_gateway
from servefleet.adapters.gateway.rollout import deploy_gateway
from servefleet.adapters.rollout import NodeResult, deploy
from servefleet.adapters.ssh import SshTransport
from servefleet.core.gateway.render import render_gateway
from servefleet.core.models import Deployment, Profile
from servefleet.core.models.gateway import GatewayConfig, GatewayRoute
from servefleet.core.project import Project, load_project
from servefleet.sim.gateway_load import GatewayLoad, summary
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import derived

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

DEP = "gw"
PORT = 8001
SPARKS = ("sim-spark-1", "sim-spark-2")
GATEWAY_NODE = "sim-5090"
GATEWAY_PORT, ADMIN_PORT = 18090, 18099
SECRETS = {"HF_TOKEN": "hf_gateway-test-secret"}
LONG_LANE_BYTES = 4096
# The engine's request log: the prompt each request rendered to (vLLM logs it at DEBUG).
LOGGED = {"extra_args": ["--enable-log-requests"]}
LOG_ENV = {"VLLM_LOGGING_LEVEL": "DEBUG"}


@pytest.fixture(scope="module")
def fleet(real_engines: FleetHandle) -> Iterator[FleetHandle]:
    project = load_project(real_engines.project_dir, "sim")
    real_engines.remove_deployment(project, DEP, SPARKS)
    real_engines.remove_deployment(project, "gateway", [GATEWAY_NODE])
    yield real_engines
    real_engines.remove_deployment(project, DEP, SPARKS)
    real_engines.remove_deployment(project, "gateway", [GATEWAY_NODE])


def stack(fleet: FleetHandle, profiles: dict[str, str]) -> Project:
    """The sim project placing ``profiles`` (node → base profile, request-logged) as
    :data:`DEP`, behind the gateway: long prompts to sim-spark-2 with thinking off, the
    rest to both with thinking on; rolled one node at a time."""
    project = load_project(fleet.project_dir, "sim")
    extra: dict[str, Profile] = {}
    deployments = []
    for node, base in profiles.items():
        name = f"gw-{base}"
        extra[name] = derived(project, base, name, vllm=LOGGED, env=LOG_ENV)
        deployments.append(Deployment(node=node, name=DEP, profile=name, port=PORT))
    gateway = GatewayConfig(
        node=GATEWAY_NODE, port=GATEWAY_PORT, admin_port=ADMIN_PORT,
        image="servefleet-sim/gateway-standin:latest", drain_timeout_seconds=60,
        routes=[GatewayRoute(model="qwen36", prompt_over_bytes=LONG_LANE_BYTES,
                             to=["sim-spark-2"], thinking=False),
                GatewayRoute(model="qwen36", thinking=True)])
    return dataclasses.replace(
        project, profiles={**project.profiles, **extra},
        stack=project.stack.model_copy(update={"deployments": deployments,
                                               "gateway": gateway, "strategy": "rolling"}))


def roll(project: Project, **kwargs: Any) -> list[NodeResult]:
    """What ``servefleet deploy`` does with a gateway: every engine drained before its stop
    and re-admitted after its gate."""
    with following_gateway(project, **kwargs) as gateway:
        assert gateway is not None
        return deploy(project, list(SPARKS), "rolling", SECRETS, hooks=gateway.hooks())


def load(project: Project, content: str = "hello") -> GatewayLoad:
    address = project.nodes[GATEWAY_NODE].address
    return GatewayLoad(f"http://{address}:{GATEWAY_PORT}/v1/chat/completions", {
        "model": "qwen36", "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": content}]}, workers=2).start()


def roll_under_load(project: Project) -> tuple[list[NodeResult], dict[str, Any]]:
    """:func:`roll` while :func:`load` runs (from 3 s before to 3 s after)."""
    running = load(project)
    time.sleep(3)
    results = roll(project)
    time.sleep(3)
    return results, summary(running.stop())


def rotation(project: Project) -> dict[str, str]:
    with following_gateway(project) as gateway:
        assert gateway is not None
        return {f"{s.backend}/{s.server}": s.rotation for s in gateway.api.servers()}


def engine_log(fleet: FleetHandle, node: str, marker: str) -> list[str]:
    """The engine's request-log lines on ``node`` that carry ``marker``."""
    out = fleet.ssh(node, "docker logs $(docker ps -q --filter "
                          f"label=io.servefleet.deployment={DEP} | head -n1) 2>&1 "
                          f"| grep -F 'details: prompt' | grep -F {marker} || true").stdout
    return [line for line in out.splitlines() if line.strip()]


def test_the_gateway_is_rolled_out_and_both_engines_join_it(fleet: FleetHandle) -> None:
    project = stack(fleet, {SPARKS[0]: "qwen36-fp8", SPARKS[1]: "qwen36-fp8"})
    rendered = render_gateway(project)
    with SshTransport(project.nodes[GATEWAY_NODE]) as transport:
        result = deploy_gateway(project, rendered, transport)
    assert result.status == "deployed", result
    assert {s.server for s in result.servers} == {"sim-spark-1.gw", "sim-spark-2.gw"}
    results = roll(project)
    assert all(r.ok for r in results), [r.to_json() for r in results]
    phases = [p for p, _ in results[0].deployments[0].phases]
    assert "gateway-drain" in phases and "gateway-admit" in phases
    assert rotation(project) == {"r0/sim-spark-2.gw": "serving", "r1/sim-spark-1.gw": "serving",
                                 "r1/sim-spark-2.gw": "serving"}


def test_switching_the_first_spark_to_mtp_fails_no_request(fleet: FleetHandle) -> None:
    results, seen = roll_under_load(stack(fleet, {SPARKS[0]: "qwen36-fp8-mtp",
                                                  SPARKS[1]: "qwen36-fp8"}))
    assert all(r.ok for r in results), [r.to_json() for r in results]
    assert results[0].deployments[0].status == "deployed"
    assert seen["requests"] > 20 and seen["failed"] == 0, seen


def test_long_prompts_and_the_thinking_default_follow_the_routes(fleet: FleetHandle) -> None:
    """Read back from vLLM's own request log: the long prompt reached sim-spark-2 (the
    engine without MTP) rendered with the empty think block of ``enable_thinking=false``;
    a short one rendered without it (the other route's default, thinking on); and a short
    one that says ``enable_thinking: false`` itself keeps its own."""
    project = stack(fleet, {SPARKS[0]: "qwen36-fp8-mtp", SPARKS[1]: "qwen36-fp8"})
    mark = uuid.uuid4().hex[:8]
    long_mark, short_mark, own_mark = f"long{mark}", f"short{mark}", f"own{mark}"
    address = project.nodes[GATEWAY_NODE].address
    url = f"http://{address}:{GATEWAY_PORT}/v1/chat/completions"
    for content, extra in ((long_mark + " word" * 1000, {}), (short_mark, {}),
                           (own_mark, {"chat_template_kwargs": {"enable_thinking": False}})):
        runner = GatewayLoad(url, {"model": "qwen36", "max_tokens": 2, "messages": [
            {"role": "user", "content": content}], **extra}, workers=1)
        assert runner._one().ok
    assert len(json.dumps({"m": long_mark + " word" * 1000})) > LONG_LANE_BYTES
    [long_line] = engine_log(fleet, SPARKS[1], long_mark)
    assert "</think>" in long_line, long_line[-300:]
    assert not engine_log(fleet, SPARKS[0], long_mark)
    [short_line] = engine_log(fleet, SPARKS[0], short_mark) + \
        engine_log(fleet, SPARKS[1], short_mark)
    assert "<|im_start|>assistant\\n'" in short_line and "</think>" not in short_line, \
        short_line[-300:]
    [own_line] = engine_log(fleet, SPARKS[0], own_mark) + engine_log(fleet, SPARKS[1], own_mark)
    assert "</think>" in own_line, own_line[-300:]


def test_switching_the_second_spark_to_mtp_fails_no_request(fleet: FleetHandle) -> None:
    project = stack(fleet, {SPARKS[0]: "qwen36-fp8-mtp", SPARKS[1]: "qwen36-fp8-mtp"})
    results, seen = roll_under_load(project)
    assert all(r.ok for r in results), [r.to_json() for r in results]
    assert results[1].deployments[0].status == "deployed"
    assert seen["requests"] > 20 and seen["failed"] == 0, seen
    assert set(rotation(project).values()) == {"serving"}


def test_a_release_failing_its_gate_is_restored_and_fails_no_request(
        fleet: FleetHandle) -> None:
    """4M tokens of context do not fit the CPU build's 1 GiB KV cache: the real engine
    refuses to start, the old release comes back, and only then does the gateway send to
    the node again; meanwhile the other node serves everything."""
    project = stack(fleet, {SPARKS[0]: "qwen36-fp8-mtp", SPARKS[1]: "qwen36-fp8-mtp"})
    yarn = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 262144}
    too_long = derived(project, "gw-qwen36-fp8-mtp", "gw-too-long",
                       vllm={"max_model_len": 4_194_304,
                             "hf_overrides": {"text_config": {"rope_parameters": yarn}}},
                       env={**LOG_ENV, "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    failing = dataclasses.replace(
        project, profiles={**project.profiles, "gw-too-long": too_long},
        stack=project.stack.model_copy(update={"deployments": [
            Deployment(node=SPARKS[0], name=DEP, profile="gw-too-long", port=PORT),
            *project.stack.deployments[1:]]}))
    results, seen = roll_under_load(failing)
    [dep] = results[0].deployments
    assert dep.status == "rolled_back", dep.to_json()
    assert dep.restore is not None and dep.restore.ok
    assert not dep.warnings, dep.warnings  # the re-admit after the restore worked
    assert seen["failed"] == 0, seen
    assert set(rotation(project).values()) == {"serving"}

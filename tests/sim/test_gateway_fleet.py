"""The gateway on the simulated fleet, in front of the real vLLM CPU build on both
Spark-shaped nodes: HAProxy (Debian's) on sim-5090, rolled out by servefleet; both Sparks
switched to MTP one after the other while a load runs through the gateway, then a switch
whose new release fails its gate; not one request fails. The long-prompt lane and the
thinking default per route are read back from the engines' own request log.

The tests share one deployment per Spark (``gw`` on port 8001) and the gateway; each test
first brings the Sparks to the profiles it starts from (a no-op when they run them
already), so each passes alone and in any order.

Every zero-failure claim is counted by :mod:`servefleet.sim.gateway_load` (every request
in one class, with the engine that answered), has a floor (a load that died or sent little
cannot pass), and, for the drain, a cause: between a node's drain and its re-admission not
one new request reached it.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from servefleet.adapters.gateway.follow import GatewayEvent, following_gateway
from servefleet.adapters.gateway.rollout import deploy_gateway
from servefleet.adapters.rollout import NodeResult, deploy
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.gateway.render import render_gateway
from servefleet.core.models import Deployment, Profile
from servefleet.core.models.gateway import GatewayConfig, GatewayRoute
from servefleet.core.project import Project, load_project
from servefleet.sim.gateway_load import (
    GatewayLoad,
    drain_windows,
    phase_table,
    phases,
    summary,
)
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


@pytest.fixture(scope="module")
def gateway(fleet: FleetHandle) -> Any:
    """The gateway rolled out on sim-5090 (once per module), its deploy result."""
    project = stack(fleet, {SPARKS[0]: "qwen36-fp8", SPARKS[1]: "qwen36-fp8"})
    with SshTransport(project.nodes[GATEWAY_NODE]) as transport:
        return deploy_gateway(project, render_gateway(project), transport)


LOAD_PAUSE = 0.2
"""Seconds between a worker's requests: the engine booting beside the load keeps a core
(the full-speed load made each real boot under it take minutes on two cores)."""

MIN_REQUESTS_PER_DRAIN = 10
"""The floor: a drain window with fewer requests than this proves nothing about it."""


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


def roll(project: Project, **kwargs: Any) -> tuple[list[NodeResult], list[GatewayEvent]]:
    """What ``servefleet deploy`` does with a gateway: every engine drained before its stop
    and re-admitted after its gate; the results and the gateway's drains and re-admissions."""
    with following_gateway(project, **kwargs) as follower:
        assert follower is not None
        results = deploy(project, list(SPARKS), "rolling", SECRETS, hooks=follower.hooks())
        return results, follower.events


def given(fleet: FleetHandle, gateway: Any, profiles: dict[str, str]) -> Project:
    """The gateway up and the Sparks serving ``profiles``: where a test starts from."""
    assert gateway.status == "deployed", gateway
    project = stack(fleet, profiles)
    results, _ = roll(project)
    assert all(r.ok for r in results), [r.to_json() for r in results]
    return project


def load(project: Project, content: str = "hello") -> GatewayLoad:
    address = project.nodes[GATEWAY_NODE].address
    return GatewayLoad(f"http://{address}:{GATEWAY_PORT}/v1/chat/completions", {
        "model": "qwen36", "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": content}]}, workers=2, pause=LOAD_PAUSE).start()


@dataclasses.dataclass
class Rolled:
    """A rollout under load: its results, every request, and the gateway's timeline."""

    results: list[NodeResult]
    load: GatewayLoad
    events: list[GatewayEvent]
    start: float
    end: float

    @property
    def seen(self) -> dict[str, Any]:
        return summary(self.load.between(self.start, self.end))

    def table(self) -> str:
        return "\n".join(phase_table(self.load, phases(self.events, self.start, self.end)))

    def assert_no_failure(self, floor: int) -> None:
        """Not one failed request among at least ``floor``, and every request of the load
        in exactly one phase of the table."""
        seen = self.seen
        print(self.table())  # the per-phase record, shown with -s or on failure
        assert seen["requests"] >= floor and seen["failed"] == 0, f"{seen}\n{self.table()}"
        parts = phases(self.events, self.start, self.end)
        assert sum(len(self.load.between(a, b)) for _, a, b in parts) == \
            len(self.load.outcomes), self.table()

    def assert_drained_nodes_got_nothing(self, servers: set[str]) -> None:
        """Each of ``servers`` was drained, then re-admitted; in between, at least
        :data:`MIN_REQUESTS_PER_DRAIN` requests were sent and answered and none of them by
        the drained server."""
        windows = drain_windows(self.events)
        assert {w.server for w in windows} == servers, (windows, self.table())
        for window in windows:
            assert window.start < window.end < float("inf"), window
            inside = self.load.within(window.start, window.end)
            to_drained = window.leaked(inside)
            assert len(inside) >= MIN_REQUESTS_PER_DRAIN and not to_drained, \
                f"{window}: {len(inside)} requests, {len(to_drained)} to it\n{self.table()}"


def roll_under_load(project: Project, **kwargs: Any) -> Rolled:
    """:func:`roll` while :func:`load` runs (from 3 s before to 3 s after)."""
    start = time.monotonic()  # before the first request: every one lies in a phase
    running = load(project)
    time.sleep(3)
    results, events = roll(project, **kwargs)
    time.sleep(3)
    running.stop()
    return Rolled(results, running, events, start, time.monotonic())


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


def test_the_gateway_is_rolled_out_and_both_engines_join_it(fleet: FleetHandle,
                                                           gateway: Any) -> None:
    assert gateway.status == "deployed", gateway
    assert {s.server for s in gateway.servers} == {"sim-spark-1.gw", "sim-spark-2.gw"}
    project = stack(fleet, {SPARKS[0]: "qwen36-fp8", SPARKS[1]: "qwen36-fp8"})
    fleet.remove_deployment(project, DEP, SPARKS)  # a first rollout, whatever ran before
    results, events = roll(project)
    assert all(r.ok for r in results), [r.to_json() for r in results]
    phases_run = [p for p, _ in results[0].deployments[0].phases]
    assert phases_run.index("gateway-drain") < phases_run.index("stop") \
        < phases_run.index("health") < phases_run.index("gateway-admit"), phases_run
    assert [(e.what, e.server) for e in events if e.backend == "r1"] == [
        ("drained", "sim-spark-1.gw"), ("admitting", "sim-spark-1.gw"),
        ("drained", "sim-spark-2.gw"), ("admitting", "sim-spark-2.gw")]
    assert rotation(project) == {"r0/sim-spark-2.gw": "serving", "r1/sim-spark-1.gw": "serving",
                                 "r1/sim-spark-2.gw": "serving"}


def test_switching_the_first_spark_to_mtp_fails_no_request(fleet: FleetHandle,
                                                           gateway: Any) -> None:
    given(fleet, gateway, {SPARKS[0]: "qwen36-fp8", SPARKS[1]: "qwen36-fp8"})
    rolled = roll_under_load(stack(fleet, {SPARKS[0]: "qwen36-fp8-mtp",
                                           SPARKS[1]: "qwen36-fp8"}))
    assert all(r.ok for r in rolled.results), [r.to_json() for r in rolled.results]
    assert rolled.results[0].deployments[0].status == "deployed"
    rolled.assert_no_failure(floor=50)
    rolled.assert_drained_nodes_got_nothing({"sim-spark-1.gw"})


def test_long_prompts_and_the_thinking_default_follow_the_routes(fleet: FleetHandle,
                                                                gateway: Any) -> None:
    """Read back from vLLM's own request log: the long prompt reached sim-spark-2 (the
    engine without MTP) rendered with the empty think block of ``enable_thinking=false``;
    a short one rendered without it (the other route's default, thinking on); and a short
    one that says ``enable_thinking: false`` itself keeps its own."""
    project = given(fleet, gateway, {SPARKS[0]: "qwen36-fp8-mtp", SPARKS[1]: "qwen36-fp8"})
    mark = uuid.uuid4().hex[:8]
    long_mark, short_mark, own_mark = f"long{mark}", f"short{mark}", f"own{mark}"
    address = project.nodes[GATEWAY_NODE].address
    url = f"http://{address}:{GATEWAY_PORT}/v1/chat/completions"
    for content, extra in ((long_mark + " word" * 1000, {}), (short_mark, {}),
                           (own_mark, {"chat_template_kwargs": {"enable_thinking": False}})):
        runner = GatewayLoad(url, {"model": "qwen36", "max_tokens": 2, "messages": [
            {"role": "user", "content": content}], **extra}, workers=1, max_requests=1)
        assert summary(runner.start().wait(timeout=120))["failed"] == 0
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


def test_switching_the_second_spark_to_mtp_fails_no_request(fleet: FleetHandle,
                                                            gateway: Any) -> None:
    given(fleet, gateway, {SPARKS[0]: "qwen36-fp8-mtp", SPARKS[1]: "qwen36-fp8"})
    project = stack(fleet, {SPARKS[0]: "qwen36-fp8-mtp", SPARKS[1]: "qwen36-fp8-mtp"})
    rolled = roll_under_load(project)
    assert all(r.ok for r in rolled.results), [r.to_json() for r in rolled.results]
    assert rolled.results[1].deployments[0].status == "deployed"
    rolled.assert_no_failure(floor=50)
    # sim-spark-2 serves two routes (the long-prompt lane and the catch-all): drained in both.
    rolled.assert_drained_nodes_got_nothing({"sim-spark-2.gw"})
    assert set(rotation(project).values()) == {"serving"}


def test_a_release_failing_its_gate_is_restored_and_fails_no_request(
        fleet: FleetHandle, gateway: Any) -> None:
    """4M tokens of context do not fit the CPU build's 1 GiB KV cache: the real engine
    refuses to start, the old release comes back, and only then does the gateway send to
    the node again; meanwhile the other node serves everything."""
    project = given(fleet, gateway, {SPARKS[0]: "qwen36-fp8-mtp",
                                     SPARKS[1]: "qwen36-fp8-mtp"})
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
    rolled = roll_under_load(failing)
    [dep] = rolled.results[0].deployments
    assert dep.status == "rolled_back", dep.to_json()
    assert dep.restore is not None and dep.restore.ok
    assert not dep.warnings, dep.warnings  # the re-admit after the restore worked
    rolled.assert_no_failure(floor=50)
    # Drained from before the failed boot until its restore passed the gate.
    rolled.assert_drained_nodes_got_nothing({"sim-spark-1.gw"})
    assert set(rotation(project).values()) == {"serving"}

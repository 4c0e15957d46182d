"""Drain and re-admit in the real HAProxy, through its runtime API: directly on loopback,
and through a real sshd's forwarded channel as a rollout reaches it on a node."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from live_gateway import (
    engines,
    follow_in,
    pair_project,
    rotation,
    running_gateway,
)

from servefleet.adapters.gateway.follow import OutageRefused
from servefleet.adapters.gateway.runtime_api import (
    RuntimeApi,
    api_through,
    local_connect,
    wait_for,
)
from servefleet.adapters.runtime.ssh.transport import SshTransport


def test_drain_waits_for_the_request_in_flight_and_sends_new_ones_elsewhere(
        haproxy: str, tmp_path: Path) -> None:
    with engines(2) as (e1, e2):
        project = pair_project(e1, e2)
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            api = RuntimeApi(local_connect("127.0.0.1", gw.admin_port))
            follow = follow_in(project, api)
            e1.delay = 2.0
            e2.delay = 2.0
            # Two slow requests: leastconn puts one on each engine.
            answers: list[dict[str, object]] = []
            threads = [threading.Thread(target=lambda: answers.append(
                gw.post("/v1/completions", {"model": "qwen36", "prompt": "slow"})[1]))
                for _ in range(2)]
            for thread in threads:
                thread.start()
            time.sleep(0.5)
            said: list[str] = []
            started = time.monotonic()
            follow.drain("dgx-spark-1", "main", said.append)
            waited = time.monotonic() - started
            assert 0.5 < waited < 5, waited
            assert "no request in flight" in said[-1]
            assert rotation(api)["dgx-spark-1.main"] == "out"
            e1.delay = e2.delay = 0.0
            before = len(e1.bodies)
            ports = {gw.post("/v1/completions", {"model": "qwen36", "prompt": "new"})[1]["port"]
                     for _ in range(5)}
            assert ports == {e2.port} and len(e1.bodies) == before
            for thread in threads:
                thread.join()
            assert len(answers) == 2  # the request in flight on the drained engine finished
            follow.readmit("dgx-spark-1", "main", said.append)
            assert rotation(api) == {"dgx-spark-1.main": "serving",
                                      "dgx-spark-2.main": "serving"}
            # The timeline a load test counts a drained engine's share against.
            assert [(e.what, e.server) for e in follow.events] == [
                ("drained", "dgx-spark-1.main"), ("admitting", "dgx-spark-1.main")]
            assert started < follow.events[0].at < follow.events[1].at < time.monotonic()


def test_draining_the_last_serving_engine_of_a_route_is_refused(haproxy: str,
                                                                tmp_path: Path) -> None:
    with engines(2) as (e1, e2):
        project = pair_project(e1, e2)
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            api = RuntimeApi(local_connect("127.0.0.1", gw.admin_port))
            follow = follow_in(project, api)
            follow.drain("dgx-spark-1", "main", lambda line: None)
            with pytest.raises(OutageRefused, match="last engine serving route m0"):
                follow.drain("dgx-spark-2", "main", lambda line: None)
            assert rotation(api)["dgx-spark-2.main"] == "serving"
            # Told to: the outage is the operator's choice.
            follow_in(project, api, allow_outage=True).drain("dgx-spark-2", "main",
                                                           lambda line: None)
            assert gw.post("/v1/completions", {"model": "qwen36", "prompt": "x"})[0] == 503


def test_an_engine_that_fails_the_gateway_check_is_not_admitted(haproxy: str,
                                                               tmp_path: Path) -> None:
    with engines(2) as (e1, e2):
        project = pair_project(e1, e2, readyTimeoutSeconds=3)
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            api = RuntimeApi(local_connect("127.0.0.1", gw.admin_port))
            follow = follow_in(project, api)
            follow.drain("dgx-spark-1", "main", lambda line: None)
            e1.healthy = False  # its engine stopped: the gateway's check sees it down
            wait_for(api, lambda now: not {s.server: s.up for s in now}["dgx-spark-1.main"],
                     timeout=15)
            with pytest.raises(Exception, match="health check does not pass within 3 s"):
                follow.readmit("dgx-spark-1", "main", lambda line: None)
            assert rotation(api)["dgx-spark-1.main"] == "out"


def test_a_rollout_failing_before_its_drain_leaves_the_gateway_as_it_was(
        haproxy: str, tmp_path: Path) -> None:
    with engines(2) as (e1, e2):
        project = pair_project(e1, e2)
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            api = RuntimeApi(local_connect("127.0.0.1", gw.admin_port))
            api.set_state("m0", "dgx-spark-1.main", "maint")  # the operator's, by hand
            follow_in(project, api).readmit_if_drained("dgx-spark-1", "main", lambda line: None)
            assert {s.server: s.admin for s in api.servers()}["dgx-spark-1.main"] == "maint"


def test_runtime_api_through_a_real_sshd_forwarded_channel(haproxy: str, tmp_path: Path,
                                                           sshd) -> None:  # type: ignore[no-untyped-def]
    with engines(2) as (e1, e2):
        project = pair_project(e1, e2)
        with running_gateway(haproxy, project, tmp_path / "gw") as gw, \
                SshTransport(sshd.node()) as transport:
            api = api_through(transport, gw.admin_port)
            follow = follow_in(project, api)
            follow.drain("dgx-spark-2", "main", lambda line: None)
            assert rotation(api) == {"dgx-spark-1.main": "serving",
                                      "dgx-spark-2.main": "out"}
            follow.readmit("dgx-spark-2", "main", lambda line: None)
            assert rotation(api)["dgx-spark-2.main"] == "serving"


def test_a_drained_lane_falls_through_to_the_model_s_other_engines(haproxy: str,
                                                                  tmp_path: Path) -> None:
    """The long-prompt lane has one engine: drained for its rollout, long prompts go to
    the model's catch-all route, so the drain is no outage; the catch-all's last engine
    still is."""
    with engines(2) as (e1, e2):
        project = pair_project(e1, e2, routes=[
            {"model": "qwen36", "promptOverBytes": 1000, "to": ["dgx-spark-2"]}])
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            api = RuntimeApi(local_connect("127.0.0.1", gw.admin_port))
            follow = follow_in(project, api)
            long_body = {"model": "qwen36", "prompt": "x" * 2000}
            assert gw.post("/v1/completions", long_body)[1]["port"] == e2.port
            follow.drain("dgx-spark-2", "main", lambda line: None)
            assert gw.post("/v1/completions", long_body)[1]["port"] == e1.port
            with pytest.raises(OutageRefused, match="last engine serving route m1"):
                follow.drain("dgx-spark-1", "main", lambda line: None)

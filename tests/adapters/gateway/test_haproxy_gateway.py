"""The rendered gateway in the real HAProxy: routing by model, by prompt size and by
header, the thinking default, refusals that say why, and retries before a response."""

from __future__ import annotations

from pathlib import Path

import pytest
from live_gateway import engines, free_port, loopback_project, running_gateway, show_info

SPARK1, NOMTP, SPARK2, Q4 = "dgx-spark-1/main", "dgx-spark-1/nomtp", "dgx-spark-2/main", \
    "rtx5090/main"


def _gateway(ports: dict[str, int], routes: list[dict[str, object]], **extra: object) -> dict:
    return {"node": "rtx5090", "port": free_port(), "adminPort": free_port(),
            "routes": routes, **extra}


@pytest.fixture
def fleet(haproxy: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Four engines (the reference stack's deployments) behind a gateway with a long-prompt
    lane, a header lane and a thinking default per route."""
    with engines(4) as (e1, e2, e3, e4):
        ports = {SPARK1: e1.port, NOMTP: e2.port, SPARK2: e3.port, Q4: e4.port}
        project = loopback_project(ports, _gateway(ports, [
            {"model": "qwen36", "promptOverBytes": 2000, "to": ["dgx-spark-1/nomtp"],
             "thinking": False},
            {"model": "qwen36", "header": "x-servefleet-lane: long",
             "to": ["dgx-spark-1/nomtp"]},
            {"model": "qwen36", "to": ["dgx-spark-1/main", "dgx-spark-2"], "thinking": True},
        ]))
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            yield gw, {"spark1": e1, "nomtp": e2, "spark2": e3, "q4": e4}


def _chat(model: str, content: str = "hi", **extra: object) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def test_requests_go_to_the_engines_serving_their_model(fleet) -> None:  # type: ignore[no-untyped-def]
    gw, e = fleet
    for _ in range(6):
        assert gw.post("/v1/completions", {"model": "qwen36", "prompt": "x"})[0] == 200
    assert gw.post("/v1/completions", {"model": "qwen36-q4", "prompt": "x"})[1]["port"] \
        == e["q4"].port
    # leastconn over the catch-all route's two engines: both get some; the lanes none.
    assert e["spark1"].bodies and e["spark2"].bodies
    assert not e["nomtp"].bodies
    status, listed = gw.get("/v1/models")
    assert status == 200 and [m["id"] for m in listed["data"]] == ["qwen36", "qwen36-q4"]


def test_every_answer_names_the_engine_that_gave_it(fleet) -> None:  # type: ignore[no-untyped-def]
    """The gateway's ``x-servefleet-engine`` header, read by the load generator: what the
    rollout's drain tests count per engine."""
    from servefleet.sim.gateway_load import GatewayLoad, summary

    gw, e = fleet
    load = GatewayLoad(f"http://127.0.0.1:{gw.port}/v1/chat/completions", _chat("qwen36"),
                       workers=2, timeout=10, max_requests=12).start()
    seen = summary(load.wait(timeout=60))
    # These engines echo the request instead of completing it: 200 without ``choices``.
    assert seen["requests"] == 12 and seen["by_class"]["other"] == 12, seen
    assert set(seen["engines"]) == {"dgx-spark-1.main", "dgx-spark-2.main"}, seen
    assert seen["engines"]["dgx-spark-1.main"] == len(e["spark1"].bodies)
    # And the route each took (the drain tests count a drained route's requests only).
    routes = {o.route for o in load.outcomes}
    assert len(routes) == 1 and None not in routes, routes


def test_unknown_or_missing_model_is_refused_with_a_reason(fleet) -> None:  # type: ignore[no-untyped-def]
    gw, e = fleet
    status, answer = gw.post("/v1/completions", {"model": "gpt-4", "prompt": "x"})
    assert status == 404 and "GET /v1/models" in answer["error"]["message"]
    status, answer = gw.post("/v1/completions", {"prompt": "x"})
    assert status == 400 and "names no model" in answer["error"]["message"]
    assert not any(engine.bodies for engine in e.values())


def test_long_prompts_and_the_lane_header_reach_the_long_context_engine(fleet) -> None:  # type: ignore[no-untyped-def]
    gw, e = fleet
    status, answer = gw.post("/v1/chat/completions", _chat("qwen36", "y" * 3000))
    assert status == 200 and answer["port"] == e["nomtp"].port
    status, answer = gw.post("/v1/completions", {"model": "qwen36", "prompt": "short"},
                             headers={"x-servefleet-lane": "long"})
    assert status == 200 and answer["port"] == e["nomtp"].port
    status, answer = gw.post("/v1/completions", {"model": "qwen36", "prompt": "short"},
                             headers={"x-servefleet-lane": "other"})
    assert answer["port"] in (e["spark1"].port, e["spark2"].port)


def test_thinking_default_is_per_route_and_a_request_keeps_its_own(fleet) -> None:  # type: ignore[no-untyped-def]
    gw, _ = fleet
    _, short = gw.post("/v1/chat/completions", _chat("qwen36"))
    assert short["body"]["chat_template_kwargs"] == {"enable_thinking": True}
    _, long = gw.post("/v1/chat/completions", _chat("qwen36", "z" * 3000))
    assert long["body"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert long["body"]["messages"][0]["content"] == "z" * 3000
    _, own = gw.post("/v1/chat/completions", _chat(
        "qwen36", chat_template_kwargs={"enable_thinking": False, "keep": 1}))
    assert own["body"]["chat_template_kwargs"] == {"enable_thinking": False, "keep": 1}
    _, merged = gw.post("/v1/chat/completions", _chat("qwen36",
                                                      chat_template_kwargs={"keep": 1}))
    assert merged["body"]["chat_template_kwargs"] == {"enable_thinking": True, "keep": 1}
    _, completion = gw.post("/v1/completions", {"model": "qwen36", "prompt": "x"})
    assert "chat_template_kwargs" not in completion["body"]
    _, q4 = gw.post("/v1/chat/completions", _chat("qwen36-q4"))
    assert "chat_template_kwargs" not in q4["body"]


def test_a_body_too_big_to_read_whole_is_refused_saying_which_setting(haproxy: str,
                                                                       tmp_path: Path) -> None:
    with engines(1) as (engine,):
        project = loopback_project({"rtx5090/main": engine.port},
                                   _gateway({}, [], maxBodyBytes=16384))
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            status, answer = gw.post("/v1/chat/completions", _chat("qwen36-q4", "w" * 40000))
            assert status == 413
            assert "maxBodyBytes 16384" in answer["error"]["message"]
            assert gw.post("/v1/chat/completions", _chat("qwen36-q4", "w" * 4000))[0] == 200
    assert len(engine.bodies) == 1


def test_a_refused_connection_is_retried_on_another_engine(haproxy: str,
                                                          tmp_path: Path) -> None:
    """An engine that stopped listening before the health check noticed: the request goes
    to the other one, and the client never sees the failure."""
    with engines(2) as (alive, dead):
        project = loopback_project({SPARK1: alive.port, SPARK2: dead.port},
                                   _gateway({}, []))
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            dead.stop()
            answers = [gw.post("/v1/completions", {"model": "qwen36", "prompt": str(i)})
                       for i in range(8)]
    assert {status for status, _ in answers} == {200}
    assert {a["port"] for _, a in answers} == {alive.port}


def test_rendered_config_names_every_route_in_a_comment(haproxy: str, tmp_path: Path) -> None:
    with engines(1) as (engine,):
        project = loopback_project({NOMTP: engine.port}, _gateway({}, [
            {"model": "qwen36", "promptOverBytes": 100, "thinking": False}]))
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            text = gw.rendered.files["haproxy.cfg"].decode()
    assert "# r0: qwen36, body over 100 bytes -> dgx-spark-1/nomtp; thinking off" in text


def test_the_thinking_rewrite_holds_under_concurrent_requests(haproxy: str,
                                                             tmp_path: Path) -> None:
    """The body rewrite runs in HAProxy's threads at once. With one Lua state shared by
    all threads (``lua-load``) HAProxy 2.6.12 failed some of these ("attempt to index a
    thread value") and then died of a double free; the script is loaded per thread."""
    from concurrent.futures import ThreadPoolExecutor

    with engines(2) as (e1, e2):
        project = loopback_project({SPARK1: e1.port, SPARK2: e2.port}, _gateway({}, [
            {"model": "qwen36", "thinking": True}]))
        # Set, not left to the host: on a one-CPU runner HAProxy would start one thread
        # and the shared-state bug could not happen.
        with running_gateway(haproxy, project, tmp_path / "gw", threads=4) as gw:
            assert show_info(gw.admin_port)["Nbthread"] == "4"
            def one(index: int) -> bool:
                try:
                    status, answer = gw.post("/v1/chat/completions", _chat("qwen36", str(index)),
                                             timeout=20)
                except OSError:
                    return False
                return status == 200 and answer["body"]["chat_template_kwargs"] == \
                    {"enable_thinking": True}

            with ThreadPoolExecutor(16) as pool:
                results = list(pool.map(one, range(2000)))
        log = gw.log.read_text()
    assert sum(results) == len(results), log[-2000:]
    assert "Lua" not in log and "ALERT" not in log, log[-2000:]

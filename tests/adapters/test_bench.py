"""Reading the bench command's lines (the node side runs for real in
``tests/sim/test_bench_fleet.py``); the node command's values arrive as parameters only."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess

import pytest
import yaml

from servefleet.adapters.bench import (
    EXIT,
    RESULT,
    append_command,
    follow,
    job_for,
    load_program,
    run_beside_command,
    run_command,
)
from servefleet.core.bench.scenario import Scenario
from servefleet.core.errors import RemoteError
from tests.core.bench.test_compare import rec


def lines(*items: str) -> list[str]:
    return list(items)


def test_a_result_comes_with_the_image_and_heartbeats() -> None:
    beats: list[float] = []
    result = follow(lines("@@bench-image sha256:abc", "@@bench-alive 2", "noise",
                          RESULT + json.dumps({"completed": 4}), EXIT + "0"), "n", beats.append)
    assert (result.image_id, result.figures, beats) == ("sha256:abc", {"completed": 4}, [2.0])


@pytest.mark.parametrize(("given", "says"), [
    ((EXIT + "4",), "no running engine container"),
    (("@@bench-error vllm bench serve exited with status 2: usage", EXIT + "1"),
     "exited with status 2: usage"),
    (("Traceback", "ImportError: x", EXIT + "1"), "status 1: Traceback | ImportError: x"),
    (("@@bench-alive 4",), "cut short"),
])
def test_no_result_says_why(given: tuple[str, ...], says: str) -> None:
    with pytest.raises(RemoteError, match=says):
        follow(lines(*given), "n", lambda _s: None)


def test_values_reach_the_node_as_parameters_only() -> None:
    job = job_for(Scenario(name="A"), 42, port=8000, kv_gauges=["vllm:kv_cache_usage_perc"])
    argv = run_command("x'; rm -rf /; '", job)
    assert argv[:2] == ["sh", "-c"] and "rm -rf" not in argv[2]
    assert argv[5] == load_program() and json.loads(argv[6]) == job
    record = rec("A", 42, 1, 1)
    appended = append_command("/srv/base", "main", record)
    assert appended[-1] == record.to_line() and record.to_line() not in appended[2]


def test_the_append_script_keeps_a_line_with_quotes_and_newlines_escaped(tmp_path) -> None:
    record = rec("A", 42, 1, 1, errors=["it's \"bad\"\nreally"])
    (tmp_path / "main").mkdir()
    subprocess.run(shlex.join(append_command(str(tmp_path), "main", record)), shell=True,
                   check=True)
    [line] = (tmp_path / "main" / "bench.jsonl").read_text().splitlines()
    assert line == record.to_line()


def test_a_bench_beside_the_engine_adds_its_service_file_before_the_node_overrides() -> None:
    job = job_for(Scenario(name="A"), 42, port=8000, kv_gauges=[], tokenizer="Qwen/Q",
                  api=("openai-chat", "/v1/chat/completions"))
    argv = run_beside_command("/srv/base", "x'; rm -rf /; '", "r1",
                              ["compose.yaml", "compose.override.1.yaml"],
                              "vllm/vllm-openai:v0.26.0", "/srv/hf", job)
    assert argv[:2] == ["sh", "-c"] and "rm -rf" not in argv[2]
    assert argv[5] == load_program() and json.loads(argv[6]) == job
    assert (job["tokenizer"], job["backend"], job["endpoint"]) == (
        "Qwen/Q", "openai-chat", "/v1/chat/completions")
    service_file = "/srv/base/x'; rm -rf /; '/bench-service.json"
    assert yaml.safe_load(argv[7])["services"]["bench"]["image"] == "vllm/vllm-openai:v0.26.0"
    assert argv[8] == service_file and argv[9] == "servefleet-bench-x'; rm -rf /; '"
    files = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-f"]
    assert files == ["/srv/base/x'; rm -rf /; '/releases/r1/compose.yaml", service_file,
                     "/srv/base/x'; rm -rf /; '/releases/r1/compose.override.1.yaml"]


def test_a_target_read_for_canaries_alone_never_loads_beside_the_engine() -> None:
    from servefleet.adapters.bench.session import BenchTarget
    from servefleet.core.engines import engine_named

    llama = BenchTarget(node="n", deployment="main", release="r1", profile="p",
                        profile_identity="x", engine=engine_named("llama.cpp"),
                        engine_version="b1", image="i", port=8000)
    vllm = dataclasses.replace(llama, engine=engine_named("vllm"))
    assert llama.beside and not vllm.beside
    assert vllm.load_command("/srv", {"seed": 1})[2] == run_command("main", {"seed": 1})[2]
    with pytest.raises(ValueError, match="read without a load image"):
        llama.load_command("/srv", {"seed": 1})
    loaded = dataclasses.replace(llama, load_image="vllm/vllm-openai:v0.26.0")
    assert "servefleet-bench-main" in loaded.load_command("/srv", {"seed": 1})


def test_the_saved_result_keeps_why_each_request_failed() -> None:
    """``vllm bench serve`` drops the per-request ``errors`` from its saved result unless
    ``--save-detailed`` is given (the real H200 run in ``data/bench-gpu-real`` shows
    ``"failed": 2`` beside ``"errors": []``): every run asks for it, texts or not."""
    from servefleet.adapters.bench import load

    # The keys the load program adds itself before it builds the command line.
    job = {**job_for(Scenario(name="A"), 42, port=8000, kv_gauges=[]),
           "vllm": "vllm", "model": "m"}
    assert "--save-detailed" in load.argv_for(job, "tok", "/tmp/result")
    assert "--save-detailed" in load.argv_for({**job, "texts": True}, "tok", "/tmp/result")


# The error of the one failed request of a real `servefleet bench` run against llama-server
# (b11434) on the simulated fleet, as `vllm bench serve` 0.32.0 saved it (paths shortened).
DROPPED_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "vllm/benchmarks/lib/endpoint_request_func.py", line 410, in '
    "async_request_openai_chat_completions\n"
    "    async with session.post(url=api_url, json=payload, headers=headers) as response:\n"
    '  File "aiohttp/client.py", line 878, in _connect_and_send_request\n'
    "    await resp.start(conn)\n"
    '  File "aiohttp/streams.py", line 716, in read\n'
    "    await self._waiter\n"
    "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected\n")


def test_a_request_lost_to_a_closed_connection_runs_the_seed_again() -> None:
    """llama-server closes its connection after each streamed answer although it says
    keep-alive (tests/sim/test_engine_llamacpp.py checks it on the real binary): a request
    sent on it first fails without reaching the engine, and only such runs go again."""
    from servefleet.adapters.bench import load

    lost = {"failed": 1, "errors": [DROPPED_ERROR, ""]}
    assert load.dropped_connections(lost) == [DROPPED_ERROR]
    assert load.dropped_connections({"failed": 0, "errors": ["", ""]}) == []
    # Any other failure is the engine's: an HTTP error beside the dropped one, or failures
    # whose errors the result does not hold.
    http_error = "Bad Request: the prompt is longer than the context"
    assert load.dropped_connections({"failed": 2, "errors": [DROPPED_ERROR, http_error]}) == []
    assert load.dropped_connections({"failed": 2, "errors": [DROPPED_ERROR]}) == []
    assert load.dropped_connections({"failed": 1, "errors": []}) == []

"""``servefleet bench`` of llama.cpp on the simulated fleet: the real llama-server serves,
the real ``vllm bench serve`` loads it from a vLLM image beside it (llama.cpp's image has no
Python) through the chat endpoint, where llama-server reports its own token counts; the
records stay on the node and ``history`` shows them; the load container goes away after."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.bench.beside import BENCH_SERVICE_FILE
from servefleet.core.project import Project
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import BENCH_SECRETS, deployed_bench_bed, http_get

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NODE = "sim-5090"
DEP = "bl"
PORT = 8001


@pytest.fixture(scope="module")
def bed(real_engines: FleetHandle, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[Project, Callable[..., Result]]]:
    """A copy of the sim project whose stack places the llama.cpp profile as ``bl`` on the
    RTX 5090-shaped node; deployed, gated."""
    yield from deployed_bench_bed(real_engines, tmp_path_factory.mktemp("bench-llamacpp"),
                                  "bl", NODE, DEP, "qwen36-q4-llamacpp", PORT)


def on_node(project: Project, script: str) -> str:
    node = project.nodes[NODE]
    with SshTransport(node) as transport:
        return transport.run(["sh", "-c", script, "sh", node.base_dir, DEP]).text()


def predicted_tokens(project: Project) -> float | None:
    """llama-server's own count of the tokens it generated (``/metrics``), or ``None``
    while it does not answer."""
    status, body = http_get(project.nodes[NODE], PORT, "/metrics", timeout=5)
    if status != 200:
        return None
    for line in body.decode().splitlines():
        if line.startswith("llamacpp:tokens_predicted_total "):
            return float(line.split()[1])
    return None


def wait_until_loading(project: Project, child: subprocess.Popen[str],
                       timeout: float = 240) -> None:
    """Until the load container runs and the engine generates tokens for it: its running
    container seen on the node, then llama-server's generated-token count rising between
    two reads. Fails, saying which part never came, after ``timeout`` seconds (or when the
    bench ended first)."""
    deadline = time.monotonic() + timeout
    container = "servefleet-bench-" + DEP
    running = False
    first = None
    while time.monotonic() < deadline:
        assert child.poll() is None, f"the bench ended (exit {child.returncode}) before loading"
        if not running:
            running = container in on_node(project, 'docker ps --format "{{.Names}}"').split()
        if running:
            now = predicted_tokens(project)
            if first is not None and now is not None and now > first:
                return
            first = now if first is None else first
        time.sleep(0.5)
    missing = ("the load container ran, but the engine generated no token for it"
               if running else f"no running container {container} on {NODE}")
    pytest.fail(f"within {timeout:g} s: {missing}")


def test_llamacpp_is_loaded_by_vllm_bench_serve_from_a_vllm_image_beside_it(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    project, run = bed
    done = run("bench", f"{NODE}/{DEP}", "--json")
    assert done.exit_code == 0, done.output
    printed = json.loads(done.stdout)
    assert [(r["scenario"], r["seed"]) for r in printed] == [
        ("A", 42), ("A", 123), ("C", 42), ("C", 123)]
    for record in printed:
        figures = record["figures"]
        assert record["engine"] == "llama.cpp" and record["profile"] == "qwen36-q4-llamacpp"
        prompts, output_len = (2, 16) if record["scenario"] == "A" else (4, 16)
        assert figures["completed"] == prompts and figures["failed"] == 0, figures
        # llama-server's own count (its usage chunk), not the text counted again by a
        # tokenizer that is not the GGUF's: every request ran to its length (ignore_eos).
        assert figures["total_output_tokens"] == prompts * output_len, figures
        assert figures["output_throughput"] > 0 and figures["mean_ttft_ms"] > 0
        assert figures["mean_tpot_ms"] > 0
        assert figures["model"] == "qwen36-q4"
        assert figures["tokenizer"].startswith("/opt/servefleet-models/")
        # The image measured is the engine's, not the load container's.
        assert record["image_id"].startswith("sha256:")
    history = run("history", NODE, "-d", DEP)
    assert history.exit_code == 0, history.output
    assert "Bench by release" in history.output
    # The load container is gone; its compose file stays beside bench.jsonl, outside every
    # release (a bench changes no release).
    left = on_node(project, 'docker ps -a --format "{{.Names}}" | grep -c "^servefleet-bench-'
                   f'{DEP}$" || true')
    assert left.strip() == "0"
    files = on_node(project, 'ls "$1/$2"; ls "$1/$2"/releases/*/')
    assert BENCH_SERVICE_FILE in files.split("releases")[0]
    assert files.count(BENCH_SERVICE_FILE) == 1


def test_a_replay_is_refused_for_llamacpp_before_anything_runs(
        bed: tuple[Project, Callable[..., Result]], tmp_path: Path) -> None:
    _, run = bed
    (tmp_path / "mix.jsonl").write_text(
        '{"timestamp": 0, "input_length": 20, "output_length": 4}\n')
    (tmp_path / "replay.yaml").write_text(yaml.safe_dump({"scenarios": [
        {"name": "R", "replay": "mix.jsonl"}]}))
    done = run("bench", f"{NODE}/{DEP}", "--scenarios", str(tmp_path / "replay.yaml"))
    assert done.exit_code == 3, done.output
    assert "replay a trace" in done.output and "/v1/chat/completions" in done.output


def test_sigterm_stops_the_load_container_and_keeps_the_finished_runs(
        bed: tuple[Project, Callable[..., Result]], tmp_path: Path) -> None:
    """Unlike `docker exec`, a container keeps loading the engine when its client goes:
    a stopped bench removes it."""
    project, _ = bed
    long = tmp_path / "long.yaml"
    long.write_text(yaml.safe_dump({"scenarios": [
        {"name": "S", "input_len": 16, "output_len": 8, "concurrency": 1, "prompts": 2,
         "warmups": 0, "seeds": [42]},
        {"name": "L", "input_len": 64, "output_len": 256, "concurrency": 1, "prompts": 400,
         "warmups": 0, "seeds": [42]}]}))
    # Run alone, no bench has run on the node yet: no records file.
    before = len(on_node(project, 'cat "$1/$2/bench.jsonl" 2>/dev/null || true').splitlines())
    cli = [sys.executable, "-c", "from servefleet.cli.main import main; main()"]
    child = subprocess.Popen(
        [*cli, "--project", str(project.root), "--stack", "bl", "bench", f"{NODE}/{DEP}",
         "--scenarios", str(long)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **BENCH_SECRETS})
    assert child.stdout is not None
    seen = []
    for line in child.stdout:
        seen.append(line)
        if " L (" in line and "running" in line:
            break
    wait_until_loading(project, child)
    child.send_signal(signal.SIGTERM)
    rest, _ = child.communicate(timeout=120)
    output = "".join(seen) + rest
    assert child.returncode == 130, output
    assert "interrupted (SIGTERM)" in output
    assert "servefleet-bench-" + DEP not in on_node(project, 'docker ps -a --format '
                                                    '"{{.Names}}"')
    # Scenario S finished before the stop: its record stays.
    after = on_node(project, 'cat "$1/$2/bench.jsonl"').splitlines()
    assert len(after) == before + 1 and json.loads(after[-1])["scenario"] == "S"

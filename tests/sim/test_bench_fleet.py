"""``servefleet bench`` on the simulated fleet with the real vLLM CPU build: the real
``vllm bench serve`` runs in the engine's container, its records stay on the node, history
and ``--compare`` read them back, ``--repeat`` reports stability, an A/B of MTP on and off
runs its control and leaves the node on A, gated; an engine that may not be measured is
refused. The tests share one deployment (``bn`` on sim-spark-1) and run in file order."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from servefleet.adapters.lock import NodeLock
from servefleet.adapters.rollout import deploy
from servefleet.adapters.ssh import SshTransport
from servefleet.core.bench.record import BENCH_FILE, parse_records
from servefleet.core.models import Deployment
from servefleet.core.models.health import Canary
from servefleet.core.project import Project
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import BENCH_SECRETS, deployed_bench_bed

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NODE = "sim-spark-1"
DEP = "bn"
PORT = 8001


@pytest.fixture(scope="module")
def bed(real_engines: FleetHandle, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[Project, Callable[..., Result]]]:
    """A copy of the sim project whose stack places ``qwen36-fp8`` as ``bn`` on the node,
    with the tiny scenarios as its bench default; the deployment deployed, gated."""
    yield from deployed_bench_bed(real_engines, tmp_path_factory.mktemp("bench-project"),
                                  "bn", NODE, DEP, "qwen36-fp8", PORT)


def node_records(project: Project) -> list:
    with SshTransport(project.nodes[NODE]) as transport:
        text = transport.run(["sh", "-c", f'cat "$1/{DEP}/{BENCH_FILE}"', "sh",
                              project.nodes[NODE].base_dir]).text()
    records, skipped = parse_records(text.splitlines())
    assert skipped == 0
    return records


def test_bench_runs_vllm_bench_serve_and_keeps_a_record_per_scenario_and_seed(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    project, run = bed
    done = run("bench", f"{NODE}/{DEP}", "--json")
    assert done.exit_code == 0, done.output
    printed = json.loads(done.stdout)
    assert [(r["scenario"], r["seed"]) for r in printed] == [
        ("A", 42), ("A", 123), ("C", 42), ("C", 123)]
    for record in printed:
        figures = record["figures"]
        # vLLM's own figures: every request measured, none failed, times from its client.
        assert figures["completed"] == (2 if record["scenario"] == "A" else 4), figures
        assert figures["failed"] == 0 and figures["errors"] == []
        assert figures["output_throughput"] > 0 and figures["mean_ttft_ms"] > 0
        assert figures["p99_itl_ms"] >= figures["median_itl_ms"] > 0
        # The tokenizer is what the engine says it loaded (its /v1/models root).
        assert figures["tokenizer"].startswith("/opt/servefleet-models/")
        assert figures["model"] == "qwen36"
        assert 0 <= figures["kv_peak"] <= 1
        assert record["image_id"].startswith("sha256:")
        assert record["profile"] == "qwen36-fp8" and record["engine"] == "vllm"
    kept = node_records(project)
    assert [json.loads(r.to_line()) for r in kept[-4:]] == printed


def test_history_and_compare_read_the_records_back(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    _, run = bed
    history = run("history", NODE, "-d", DEP, "--json")
    assert history.exit_code == 0, history.output
    data = json.loads(history.output)
    release = data["releases"][-1]["release_id"]
    assert {r["release"] for r in data["bench"]} == {release}
    text = run("history", NODE, "-d", DEP)
    assert "Bench by release" in text.output and f"{release}  A " in text.output
    compared = run("bench", NODE, "-d", DEP, "--compare", release[:6], release, "--json")
    assert compared.exit_code == 0, compared.output
    changes = json.loads(compared.output)
    assert {c["verdict"] for c in changes} == {"no change"}
    missing = run("bench", NODE, "-d", DEP, "--compare", release, "0000")
    assert missing.exit_code == 1 and "no bench recorded for release '0000'" in missing.output


def test_repeat_reports_per_prompt_stability(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    project, run = bed
    done = run("bench", f"{NODE}/{DEP}", "--repeat", "2", "--only", "A", "--json")
    assert done.exit_code == 0, done.output
    [result] = json.loads(done.stdout)
    # One user at temperature 0 without speculative decoding: the CPU build is stable.
    assert (result["scenario"], result["runs"], result["prompts"]) == ("A", 2, 2)
    assert result["stable"] == 2 and result["expected_reason"] is None
    repeats = [r for r in node_records(project) if r.role == "repeat"][-2:]
    assert all(len(r.figures["answers"]) == 2 for r in repeats)
    assert all("texts" not in r.figures for r in repeats)  # digests, never the text


def test_a_recorded_request_mix_is_replayed_request_by_request(
        bed: tuple[Project, Callable[..., Result]], tmp_path: Path) -> None:
    _, run = bed
    mix = [(0, 28, 10, [0]), (300, 36, 11, [0, 1]), (600, 51, 22, []), (900, 50, 20, [0])]
    (tmp_path / "mix.jsonl").write_text("".join(
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
        + "\n" for t, i, o, h in mix))
    (tmp_path / "replay.yaml").write_text(yaml.safe_dump({"scenarios": [
        {"name": "R", "replay": "mix.jsonl", "replay_time_scale": 0.001, "concurrency": 2,
         "warmups": 1, "seeds": [42]}]}))
    done = run("bench", f"{NODE}/{DEP}", "--scenarios", str(tmp_path / "replay.yaml"),
               "--json")
    assert done.exit_code == 0, done.output
    [record] = json.loads(done.stdout)
    figures = record["figures"]
    # Every request as recorded: its prompt length, its output length, its arrival time.
    assert figures["completed"] == 4 and figures["failed"] == 0, figures
    assert figures["total_input_tokens"] == sum(i for _, i, _, _ in mix)
    assert figures["total_output_tokens"] == sum(o for _, _, o, _ in mix)
    assert figures["duration"] >= 0.9
    assert record["shape"] == "replay ×2"


def test_ab_of_mtp_runs_the_control_and_leaves_the_node_on_a_gated(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    _, run = bed
    done = run("bench", f"{NODE}/{DEP}", "--ab", "qwen36-fp8-mtp", "--only", "C", "--json")
    assert done.exit_code == 0, done.output
    outcome = json.loads(done.stdout)
    assert outcome["failure"] is None and outcome["serving"] == "qwen36-fp8"
    records = outcome["records"]
    assert set(records) == {"A", "B", "control"}
    assert {r["profile"] for r in records["B"]} == {"qwen36-fp8-mtp"}
    assert {r["release"] for r in records["A"]} == {r["release"] for r in records["control"]}
    # B drafts: vLLM's client read the speculative counters, A has none.
    assert all("spec_decode_acceptance_rate" in r["figures"] for r in records["B"])
    assert all("spec_decode_acceptance_rate" not in r["figures"] for r in records["A"])
    assert outcome["decision"]["keep"] in ("A", "B")
    figures = {c["figure"] for c in outcome["changes"]}
    assert {"output_throughput", "mean_ttft_ms"} <= figures
    assert all(c["control"] is not None for c in outcome["changes"])
    # Left on A, gated: a plain bench accepts it.
    again = run("bench", f"{NODE}/{DEP}", "--only", "A", "--json")
    assert again.exit_code == 0, again.output
    assert {r["profile"] for r in json.loads(again.stdout)} == {"qwen36-fp8"}


def test_canaries_are_sent_and_their_verdicts_recorded(
        bed: tuple[Project, Callable[..., Result]], tmp_path: Path) -> None:
    project, run = bed
    file = tmp_path / "canaries.yaml"
    file.write_text(yaml.safe_dump({"canaries": [
        {"name": "answers", "prompt": "Say hello.", "expect": r"\w", "max_tokens": 8},
        {"name": "never", "prompt": "Say hello.", "expect": "zq-never-said-zq",
         "max_tokens": 8}]}))
    done = run("bench", f"{NODE}/{DEP}", "--canaries", str(file), "--json")
    assert done.exit_code == 1, done.output
    rows = {row["fact"]: row for row in json.loads(done.stdout)}
    assert rows["canary answers"]["verdict"] == "pass"
    assert rows["canary never"]["verdict"] == "fail"
    assert rows["canary never"]["evidence"][0].startswith("answer: '")  # the real answer
    kept = [r for r in node_records(project) if r.role == "canary"][-2:]
    assert [(r.scenario, r.figures["passed"]) for r in kept] == [("answers", True),
                                                                ("never", False)]


def test_a_profile_whose_canary_fails_fails_its_gate_and_the_node_keeps_a(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    project, _ = bed
    before = bench_target_profile(project)
    canaried = project.profiles["qwen36-fp8"].model_copy(update={
        "name": "qwen36-fp8-canaried",
        "health": project.profiles["qwen36-fp8"].health.model_copy(update={"canaries": [
            Canary(name="never", prompt="Say hello.", expect="zq-never-said-zq",
                   max_tokens=8)]})})
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=NODE, name=DEP, profile=canaried.name, port=PORT)]})
    [result] = deploy(dataclasses.replace(
        project, stack=stack, profiles={**project.profiles, canaried.name: canaried}),
        [NODE], secrets=BENCH_SECRETS)
    [deployed] = result.deployments
    assert deployed.status == "rolled_back", result.to_json()
    assert deployed.failure is not None and "canary never" in deployed.failure.message
    assert bench_target_profile(project) == before == "qwen36-fp8"


def bench_target_profile(project: Project) -> str:
    from servefleet.adapters.bench.session import bench_target

    with SshTransport(project.nodes[NODE]) as transport:
        return bench_target(transport, DEP, project).profile


def test_a_node_a_rollout_holds_is_refused(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    project, run = bed
    with SshTransport(project.nodes[NODE]) as transport:
        lock = NodeLock(transport, "deploy", datetime.now(UTC), unlock_id=None)
        lock.acquire()
        try:
            done = run("bench", f"{NODE}/{DEP}", "--only", "A")
        finally:
            lock.release()
    assert done.exit_code == 3, done.output
    assert "a bench waits until the rollout ends" in done.output


def test_an_engine_started_again_after_its_gate_is_refused(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    project, run = bed
    with SshTransport(project.nodes[NODE]) as transport:
        transport.run(["sh", "-c", "docker restart $(docker ps -q --filter "
                       f"label=com.docker.compose.project=servefleet-{DEP})"], timeout=120)
    done = run("bench", f"{NODE}/{DEP}", "--only", "A")
    assert done.exit_code == 3, done.output
    assert "ungated (its container started again after its gate)" in done.output

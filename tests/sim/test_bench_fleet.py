"""``servefleet bench`` on the simulated fleet with the real vLLM CPU build: the real
``vllm bench serve`` runs in the engine's container, its records stay on the node, history
and ``--compare`` read them back, ``--repeat`` reports stability, an A/B of MTP on and off
runs its control and leaves the node on A, gated; an engine that may not be measured is
refused; with ``--keep-better`` it leaves the node on the winner. The tests share one
deployment (``bn`` on sim-spark-1); each establishes the state it starts from (the bed
deploys ``qwen36-fp8``, and a test that moves the node away puts it back)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from statistics import mean
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from servefleet.adapters.lock import NodeLock
from servefleet.adapters.rollout import deploy
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.cli.main import build_cli
from servefleet.core.bench.record import BENCH_FILE, BenchRecord, parse_records
from servefleet.core.models import Deployment
from servefleet.core.models.health import Canary
from servefleet.core.project import Project, load_project
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import BENCH_SECRETS, deployed_bench_bed

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NODE = "sim-spark-1"
DEP = "bn"
PORT = 8001
SERIAL = "qwen36-fp8-serial"
"""``qwen36-fp8`` taking one request at a time (``max_num_seqs: 1``): scenario C's four
users queue behind each other, so ``qwen36-fp8`` beats it on throughput and TTFT by far
more than any noise band (what makes an A/B's decision known beforehand)."""
SERIAL_STACK = "bn-serial"
"""The bed's stack with :data:`SERIAL` as ``bn``."""
LABELS = {"output_throughput": "out tok/s", "mean_ttft_ms": "TTFT mean"}
"""The deciding figures (throughput and mean TTFT) and the labels a decision names them
by (``servefleet/core/bench/record.py``)."""


@pytest.fixture(scope="module")
def bed(real_engines: FleetHandle, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[Project, Callable[..., Result]]]:
    """A copy of the sim project whose stack places ``qwen36-fp8`` as ``bn`` on the node,
    with the tiny scenarios as its bench default; the deployment deployed, gated."""
    for project, run in deployed_bench_bed(real_engines,
                                           tmp_path_factory.mktemp("bench-project"), "bn",
                                           NODE, DEP, "qwen36-fp8", PORT):
        (project.root / "profiles" / f"{SERIAL}.yaml").write_text(yaml.safe_dump({
            "extends": "qwen36-fp8", "description": "one request at a time (bench tests)",
            "vllm": {"max_num_seqs": 1}}))
        (project.root / f"Pulumi.{SERIAL_STACK}.yaml").write_text(yaml.safe_dump({
            "config": {"servefleet:benchScenarios": "tiny.yaml", "servefleet:profiles": {
                NODE: {DEP: {"profile": SERIAL, "port": PORT}}}}}))
        yield project, run


def on_stack(project: Project, stack: str, *args: str) -> Result:
    """The CLI on another stack of the bed's project copy."""
    return CliRunner().invoke(build_cli(), ["--project", str(project.root), "--stack", stack,
                                            *args], env=BENCH_SECRETS, catch_exceptions=False)


def deploy_stack(project: Project, stack: str) -> str:
    """Deploy ``stack`` of the bed's project copy to the node, gated; the release."""
    [result] = deploy(load_project(project.root, stack), [NODE], secrets=BENCH_SECRETS)
    assert result.ok, result.to_json()
    [deployed] = result.deployments
    assert deployed.release_id, result.to_json()
    return str(deployed.release_id)


def newest_values(records: Sequence[BenchRecord], release: str, scenario: str,
                  figure: str) -> list[float]:
    """``figure`` of each seed of the newest run of ``scenario`` on ``release``, from the
    node's records (what a comparison must take for that release)."""
    mine = [r for r in records if r.release == release and r.scenario == scenario]
    assert mine, (release, scenario)
    newest = mine[-1].run_id
    return [float(r.figures[figure]) for r in mine if r.run_id == newest]


def expected_verdict(change: dict[str, Any]) -> str:
    """The noise-band rule, recomputed from a printed change: ``better``/``worse`` only
    outside the band, which is at least 2% and at least the control's move."""
    a, b, band = change["a"], change["b"], change["band"]
    moved = (b - a) / a
    assert math.isclose(change["change"], moved, rel_tol=1e-9, abs_tol=1e-12), change
    assert band >= 0.02, change
    if change["control"] is not None:
        assert band >= abs(change["control"] - a) / abs(a) - 1e-12, change
    if abs(moved) <= band:
        return "no change"
    higher = change["figure"].endswith("_throughput")  # tok/s and req/s; the rest are ms
    return "better" if (moved > 0) == higher else "worse"


def expected_band(change: dict[str, Any], *sides: Sequence[float],
                  control: float | None = None) -> float:
    """The noise band from the seeds' figures of each side: the largest of 2%, each side's
    spread ((max - min) / mean) and the control's move from A."""
    def spread(values: Sequence[float]) -> float:
        return (max(values) - min(values)) / abs(mean(values)) if len(values) > 1 else 0.0

    band = max(0.02, *(spread(values) for values in sides))
    if control is not None:
        band = max(band, abs(control - change["a"]) / abs(change["a"]))
    return band


def expected_decision(changes: Sequence[dict[str, Any]]) -> tuple[str, str, list[str]]:
    """The decision the seeds' rule gives for the printed changes: keep B when it is better
    on a deciding figure somewhere and worse on none; the reason's first words; and the
    phrases the reason must name (``out tok/s +120% on C``)."""
    deciding = [c for c in changes if c["figure"] in LABELS]
    assert len(deciding) >= 2, changes  # the floor: throughput and TTFT of scenario C
    better = [c for c in deciding if expected_verdict(c) == "better"]
    worse = [c for c in deciding if expected_verdict(c) == "worse"]
    named = [f"{LABELS[c['figure']]} {c['change']:+.0%} on {c['scenario']}"
             for c in better + worse]
    if better and not worse:
        return "B", "better outside the noise band", named
    if worse and not better:
        return "A", "B is worse", named
    if better:
        return "A", "mixed:", named
    return "A", "no change outside the noise band", named


def check_decision(outcome: dict[str, Any]) -> None:
    """An A/B's printed changes are its records' figures (means over the seeds) with the
    band they give; its verdicts and decision are what the rule gives for them, and the
    reason says why in those figures."""
    records = outcome["records"]
    for change in outcome["changes"]:
        seeds = {role: [float(r["figures"][change["figure"]]) for r in records[role]
                        if r["scenario"] == change["scenario"]]
                 for role in ("A", "B", "control")}
        assert all(len(values) >= 2 for values in seeds.values()), seeds  # both seeds ran
        for side, role in (("a", "A"), ("b", "B"), ("control", "control")):
            assert math.isclose(change[side], mean(seeds[role]), rel_tol=1e-9), (side, change)
        band = expected_band(change, seeds["A"], seeds["B"], control=change["control"])
        assert math.isclose(change["band"], band, rel_tol=1e-9), (band, change)
        assert change["verdict"] == expected_verdict(change), change
    keep, opening, named = expected_decision(outcome["changes"])
    decision = outcome["decision"]
    assert decision["keep"] == keep, (decision, outcome["changes"])
    assert decision["reason"].startswith(opening), decision
    for phrase in named:
        assert phrase in decision["reason"], (phrase, decision)


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
    project, run = bed
    first = deploy_stack(project, "bn")  # qwen36-fp8 (the bed's; nothing to do when it runs)
    assert run("bench", f"{NODE}/{DEP}", "--only", "A").exit_code == 0
    second = deploy_stack(project, SERIAL_STACK)  # another release of the same deployment
    try:
        assert second != first
        done = run("bench", f"{NODE}/{DEP}", "--only", "A")
        assert done.exit_code == 0, done.output
    finally:
        assert deploy_stack(project, "bn") == first  # the same content: the same release
    history = run("history", NODE, "-d", DEP, "--json")
    assert history.exit_code == 0, history.output
    data = json.loads(history.output)
    assert {first, second} <= {r["release_id"] for r in data["releases"]}
    assert {first, second} <= {r["release"] for r in data["bench"]}
    text = run("history", NODE, "-d", DEP)
    assert "Bench by release" in text.output
    for release in (first, second):  # each release's line, its newest A figure on it
        assert re.search(rf"^\s*{release}\s.*\bA [\d.,]+", text.output, re.MULTILINE), (
            release, text.output)
    # Two releases: the figures are each release's newest run, the verdicts the band's.
    records = node_records(project)
    compared = run("bench", NODE, "-d", DEP, "--compare", first, second, "--json")
    assert compared.exit_code == 0, compared.output
    changes = json.loads(compared.output)
    assert {c["scenario"] for c in changes} == {"A"}  # only what both ran
    assert {"output_throughput", "mean_ttft_ms"} <= {c["figure"] for c in changes}
    for change in changes:
        sides = [newest_values(records, release, "A", change["figure"])
                 for release in (first, second)]
        assert math.isclose(change["a"], mean(sides[0]), rel_tol=1e-9), change
        assert math.isclose(change["b"], mean(sides[1]), rel_tol=1e-9), change
        assert change["control"] is None  # no control ran: the band is the seeds' spread
        assert math.isclose(change["band"], expected_band(change, *sides), rel_tol=1e-9)
        assert change["verdict"] == expected_verdict(change), change
    shown = run("bench", NODE, "-d", DEP, "--compare", first, second)
    assert shown.exit_code == 0, shown.output
    assert f"{first} (A) against {second} (B)" in shown.output
    # A release against itself: every figure the same, no change.
    same = run("bench", NODE, "-d", DEP, "--compare", first[:6], first, "--json")
    assert same.exit_code == 0, same.output
    itself = json.loads(same.output)
    assert itself and all(c["a"] == c["b"] and c["change"] == 0 for c in itself)
    assert {c["verdict"] for c in itself} == {"no change"}
    missing = run("bench", NODE, "-d", DEP, "--compare", first, "0000")
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
    # Four requests over ten seconds (timestamps in ms): replayed at their times, the run
    # lasts at least the ten seconds; the same mix squeezed into 10 ms is a burst.
    mix = [(0, 28, 10, [0]), (3000, 36, 11, [0, 1]), (6000, 51, 22, []),
           (10000, 50, 20, [0])]
    span = (mix[-1][0] - mix[0][0]) * 0.001
    (tmp_path / "mix.jsonl").write_text("".join(
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
        + "\n" for t, i, o, h in mix))
    (tmp_path / "replay.yaml").write_text(yaml.safe_dump({"scenarios": [
        {"name": name, "replay": "mix.jsonl", "replay_time_scale": scale, "concurrency": 2,
         "warmups": 1, "seeds": [42]}
        for name, scale in (("R", 0.001), ("burst", 0.000001))]}))
    done = run("bench", f"{NODE}/{DEP}", "--scenarios", str(tmp_path / "replay.yaml"),
               "--json")
    assert done.exit_code == 0, done.output
    replayed, burst = json.loads(done.stdout)
    assert (replayed["scenario"], burst["scenario"]) == ("R", "burst")
    for record in (replayed, burst):
        figures = record["figures"]
        # Every request as recorded: its prompt length, its output length.
        assert figures["completed"] == 4 and figures["failed"] == 0, figures
        assert figures["total_input_tokens"] == sum(i for _, i, _, _ in mix)
        assert figures["total_output_tokens"] == sum(o for _, _, o, _ in mix)
        assert record["shape"] == "replay ×2"
    # ... and its arrival time: the last request leaves only after the recorded span.
    assert replayed["figures"]["duration"] >= span, replayed["figures"]
    assert replayed["figures"]["duration"] >= burst["figures"]["duration"] + span / 2, (
        replayed["figures"]["duration"], burst["figures"]["duration"])


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
    figures = {c["figure"] for c in outcome["changes"]}
    assert {"output_throughput", "mean_ttft_ms"} <= figures
    assert all(c["control"] is not None for c in outcome["changes"])
    # The figures are the records' (scenario C, the mean over its seeds), the band theirs
    # and the control's, and the decision the rule's on them, whichever way MTP went here.
    check_decision(outcome)
    # Left on A, gated: a plain bench accepts it.
    again = run("bench", f"{NODE}/{DEP}", "--only", "A", "--json")
    assert again.exit_code == 0, again.output
    assert {r["profile"] for r in json.loads(again.stdout)} == {"qwen36-fp8"}


def test_keep_better_leaves_the_node_on_the_winner_gated(
        bed: tuple[Project, Callable[..., Result]]) -> None:
    project, run = bed
    deploy_stack(project, SERIAL_STACK)  # A: one request at a time
    try:
        done = on_stack(project, SERIAL_STACK, "bench", f"{NODE}/{DEP}", "--ab",
                        "qwen36-fp8", "--keep-better", "--only", "C", "--json")
        assert done.exit_code == 0, done.output
        outcome = json.loads(done.stdout)
        assert outcome["failure"] is None, outcome["failure"]
        assert (outcome["a"], outcome["b"]) == (SERIAL, "qwen36-fp8")
        check_decision(outcome)
        # Four users queued behind each other against four served together: B wins.
        assert outcome["decision"]["keep"] == "B", (outcome["decision"], outcome["changes"])
        assert outcome["serving"] == "qwen36-fp8"
        # Left on B, gated: a plain bench accepts it and measures B's release.
        again = run("bench", f"{NODE}/{DEP}", "--only", "A", "--json")
        assert again.exit_code == 0, again.output
        measured = json.loads(again.stdout)
        assert {r["profile"] for r in measured} == {"qwen36-fp8"}
        assert {r["release"] for r in measured} == {r["release"]
                                                    for r in outcome["records"]["B"]}
    finally:
        deploy_stack(project, "bn")  # what the later tests start from


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

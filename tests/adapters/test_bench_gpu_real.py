"""The bench load program's output from real vLLM 0.26.0 runs on an NVIDIA H200
(``data/bench-gpu-real``), read by the controller's own reader: every figure the tables
need is there, the counts are the scenarios', and a trace only replays whole as servefleet
sends it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefleet.adapters.bench import follow
from servefleet.core.bench.scenario import load_scenarios

DATA = Path(__file__).parent / "data" / "bench-gpu-real"
REPO = Path(__file__).resolve().parents[2]
SEEDS = {s.name: s for s in load_scenarios(REPO / "scenarios" / "seeds.yaml")}
RAN = {"A": 8, "B": 16, "C": 64, "D": 16}
"""Requests per run (``run.sh``): the seeds' counts, A halved to fit the machine's call."""


def figures(name: str) -> dict:
    lines = (DATA / name).read_text().splitlines()
    return follow([*lines, "@@bench-exit 0"], "h200", lambda _s: None).figures


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("[ABCD]-seed*.out")))
def test_every_seed_scenario_ran_whole_on_the_gpu(name: str) -> None:
    scenario = SEEDS[name.split("-")[0]]
    prompts = RAN[scenario.name]
    got = figures(name)
    assert got["completed"] == prompts and got["failed"] == 0
    assert got["total_output_tokens"] == prompts * scenario.output_len
    assert got["total_input_tokens"] == prompts * scenario.input_len
    for key in ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                "p99_itl_ms", "request_throughput"):
        assert got[key] > 0, key
    assert 0 < got["kv_peak"] < 0.01  # a tiny model's pool on a 141 GB GPU


def test_speculative_decoding_reports_its_acceptance_in_percent() -> None:
    got = figures("C-ngram-seed42.out")
    assert got["completed"] == 64 and got["failed"] == 0
    assert 1 < got["spec_decode_acceptance_rate"] <= 100  # percent, not a fraction
    assert got["spec_decode_acceptance_length"] > 1


def test_a_trace_replays_whole_only_with_its_prompts_covered() -> None:
    trace = [json.loads(line) for line in (REPO / "scenarios" / "chat-mix.jsonl").open()]
    covered = figures("R-seed42.out")
    assert covered["completed"] == len(trace) and covered["failed"] == 0
    assert covered["total_input_tokens"] == sum(e["input_length"] for e in trace)
    assert covered["total_output_tokens"] == sum(e["output_length"] for e in trace)
    raw = figures("R-raw-seed42.out")
    # As the file is: prompts cut to their blocks (16 tokens each), empty ones failed.
    assert raw["failed"] == sum(1 for e in trace if not e["hash_ids"])
    assert raw["total_input_tokens"] == 16 * sum(len(e["hash_ids"]) for e in trace)

"""Replaying a recorded request mix: the trace is checked on the controller, each bad line
named; prompts are covered by blocks; its content, not its path, is the scenario's load."""

from __future__ import annotations

import base64
import gzip
import json
import random
from pathlib import Path

import pytest
import yaml

from servefleet.core.bench.scenario import load_scenarios
from servefleet.core.bench.trace import MAX_SENT_BYTES, read_trace
from servefleet.core.errors import ConfigError


def write_trace(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_a_mooncake_line_is_kept_and_the_trace_travels_compressed(tmp_path: Path) -> None:
    line = {"timestamp": 0, "input_length": 40, "output_length": 8, "hash_ids": [0, 1, 2]}
    trace = read_trace(write_trace(tmp_path / "t.jsonl", [line, {**line, "timestamp": 5}]),
                       "t.jsonl")
    assert trace.requests == 2
    assert gzip.decompress(base64.b64decode(trace.packed())).decode() == trace.text
    assert [json.loads(x) for x in trace.text.splitlines()][1] == {**line, "timestamp": 5}


def test_blocks_are_added_where_the_ids_do_not_cover_the_prompt(tmp_path: Path) -> None:
    trace = read_trace(write_trace(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 40, "output_length": 8, "hash_ids": [7]},
        {"timestamp": 1, "input_length": 33, "output_length": 8}]), "t.jsonl", 16)
    first, second = (json.loads(x)["hash_ids"] for x in trace.text.splitlines())
    # 40 tokens need 3 blocks of 16; the new ones are unique to their request.
    assert first == [7, 8, 9] and second == [10, 11, 12]


@pytest.mark.parametrize(("line", "says"), [
    ("not json", "t.jsonl:2: not JSON"),
    ('{"timestamp": 3, "output_length": 4}', "t.jsonl:2: no 'input_length'"),
    ('{"timestamp": 3, "input_length": 0, "output_length": 4}',
     "'input_length' is 0; expected at least 1"),
    ('{"timestamp": 3, "input_length": 2.5, "output_length": 4}',
     "expected a whole number of tokens"),
    ('{"timestamp": -1, "input_length": 2, "output_length": 4}', "expected at least 0"),
    ('{"timestamp": 3, "input_length": 2, "output_length": 4, "hash_ids": ["a"]}',
     "'hash_ids' must be a list of whole numbers"),
    ("[1, 2]", "expected a JSON object"),
    ('{"timestamp": 1, "input_length": 2, "output_length": 4}', "before the line above"),
])
def test_a_bad_line_is_named_with_the_reason(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 2, "input_length": 2, "output_length": 4}\n' + line + "\n")
    with pytest.raises(ConfigError, match=says):
        read_trace(path, "t.jsonl")


def test_a_trace_too_long_to_send_says_how_to_cut_it(tmp_path: Path) -> None:
    rng = random.Random(1)
    entries = [{"timestamp": i, "input_length": 16, "output_length": 4,
                "hash_ids": [rng.randrange(10**12)]} for i in range(20_000)]
    with pytest.raises(ConfigError, match=r"KiB compressed.*head -n \d+") as caught:
        read_trace(write_trace(tmp_path / "t.jsonl", entries), "t.jsonl")
    keep = int(str(caught.value).rsplit("head -n ", 1)[1].rstrip(")"))
    kept = read_trace(write_trace(tmp_path / "k.jsonl", entries[:keep]), "k.jsonl")
    assert len(kept.packed()) <= MAX_SENT_BYTES


def scenario_file(tmp_path: Path, **fields: object) -> Path:
    write_trace(tmp_path / "mix.jsonl", [
        {"timestamp": t, "input_length": 20, "output_length": 5} for t in (0, 100, 200)])
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{"name": "R", "replay": "mix.jsonl",
                                                   **fields}]}))
    return path


def test_a_replay_scenario_reads_its_trace_beside_the_file(tmp_path: Path) -> None:
    [scenario] = load_scenarios(scenario_file(tmp_path, replay_time_scale=0.001))
    assert scenario.prompts == 3 and scenario.trace.requests == 3
    assert scenario.shape() == "replay ×1"
    before = scenario.identity
    # The same requests from another path are the same load; other requests are not.
    moved = tmp_path / "other"
    moved.mkdir()
    (moved / "copy.jsonl").write_text((tmp_path / "mix.jsonl").read_text())
    (moved / "s.yaml").write_text(yaml.safe_dump({"scenarios": [
        {"name": "R", "replay": "copy.jsonl", "replay_time_scale": 0.001}]}))
    assert load_scenarios(moved / "s.yaml")[0].identity == before
    (moved / "copy.jsonl").write_text('{"timestamp": 0, "input_length": 21, '
                                      '"output_length": 5}\n')
    assert load_scenarios(moved / "s.yaml")[0].identity != before


def test_a_replay_asking_more_prompts_than_the_trace_holds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="prompts 5 but its trace holds 3 requests"):
        load_scenarios(scenario_file(tmp_path, prompts=5))


def test_a_missing_trace_names_the_scenario(tmp_path: Path) -> None:
    path = scenario_file(tmp_path)
    (tmp_path / "mix.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"scenario R: replay mix\.jsonl: no such file"):
        load_scenarios(path)

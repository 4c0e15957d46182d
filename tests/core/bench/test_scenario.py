"""Scenario files: the seeds' suite as shipped, and bad files refused with file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.bench.scenario import Scenario, load_scenarios, select
from servefleet.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def test_the_seeds_suite_ships_as_the_operators_ran_it() -> None:
    scenarios = load_scenarios(REPO / "scenarios" / "seeds.yaml")
    shapes = {s.name: (s.input_len, s.output_len, s.concurrency) for s in scenarios}
    # A: 512 in / 512 out, 1 concurrent; B: 8192/256, 4; C: 2048/512, 16; D: 2048/256, 2.
    assert shapes == {"A": (512, 512, 1), "B": (8192, 256, 4), "C": (2048, 512, 16),
                      "D": (2048, 256, 2)}
    assert all(s.seeds == [42, 123] and s.warmups == 3 for s in scenarios)


def test_the_replay_example_ships_with_its_trace() -> None:
    [mix] = load_scenarios(REPO / "scenarios" / "replay.yaml")
    assert mix.replay == "chat-mix.jsonl" and mix.prompts == mix.trace.requests == 24


def test_the_sim_suite_keeps_the_seeds_shapes() -> None:
    seeds = {s.name: s for s in load_scenarios(REPO / "scenarios" / "seeds.yaml")}
    sim = load_scenarios(REPO / "scenarios" / "sim.yaml")
    assert [s.name for s in sim] == list(seeds)
    for scenario in sim:
        assert scenario.concurrency == seeds[scenario.name].concurrency


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return path


def test_an_unknown_field_names_the_file_the_field_and_the_close_one(tmp_path: Path) -> None:
    path = write(tmp_path, "scenarios:\n  - name: A\n    input_length: 512\n")
    with pytest.raises(ConfigError) as error:
        load_scenarios(path, "scenarios/mine.yaml")
    [line] = error.value.problems
    assert line.startswith("scenarios/mine.yaml: scenarios[0].input_length:")
    assert "input_len" in line


@pytest.mark.parametrize(("text", "says"), [
    ("scenarios:\n  - {name: A}\n  - {name: A}\n", "scenario names repeat: A"),
    ("scenarios:\n  - {name: A, seeds: [42, 42]}\n", "seeds repeat"),
    ("scenarios:\n  - {name: A, concurrency: 0}\n", r"scenarios\[0\]\.concurrency"),
    ("scenarios: []\n", "scenarios"),
    ("- name: A\n", "expected a mapping with 'scenarios:'"),
    ("scenarios:\n  - {name: 'a b'}\n", r"scenarios\[0\]\.name"),
])
def test_bad_scenarios_are_refused_with_the_reason(tmp_path: Path, text: str,
                                                   says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_scenarios(write(tmp_path, text))


def test_identity_follows_the_load_not_the_name_or_the_seeds() -> None:
    base = Scenario(name="A", input_len=512, output_len=512)
    assert Scenario(name="other", input_len=512, output_len=512,
                    seeds=[7]).identity == base.identity
    assert Scenario(name="A", input_len=513, output_len=512).identity != base.identity


def test_select_keeps_the_file_order_and_refuses_an_unknown_name() -> None:
    scenarios = [Scenario(name=n) for n in "ABC"]
    assert [s.name for s in select(scenarios, ["C", "A"], "f")] == ["A", "C"]
    assert select(scenarios, [], "f") == scenarios
    with pytest.raises(ConfigError, match=r"no scenario 'Z' \(known: A, B, C\)"):
        select(scenarios, ["Z"], "f")

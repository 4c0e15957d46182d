"""The determinism probe's verdicts (seeds 000 and 002: vLLM + MTP varies, llama.cpp with one
slot and no prompt cache does not)."""

from __future__ import annotations

from typing import Any

import pytest

from servefleet.core.determinism import distinct_outputs, instability_reason, judge_determinism
from servefleet.core.models import Profile
from servefleet.core.project import Project, load_project
from tests.reference_project import REPO_ROOT

SAME = ["The Moon is 3,474 km wide."] * 3
DIFFERENT = ["The Moon is 3,474 km wide.", "The Moon is 3,474 km across.",
             "The Moon is 3,474 km wide."]


@pytest.fixture(scope="module")
def shipped() -> Project:
    return load_project(REPO_ROOT, "reference")


def with_health(profile: Profile, **determinism: Any) -> Profile:
    data = profile.model_dump()
    data["health"]["determinism"].update(determinism)
    return Profile.model_validate(data)


def test_stable_passes(shipped: Project) -> None:
    row = judge_determinism(SAME, shipped.profiles["qwen36-q4-llamacpp"])
    assert (row.verdict, row.observed) == ("pass", "stable: 3/3 identical")
    assert row.expected == "identical x3 (determinism.wanted)"


def test_unstable_with_mtp_is_expected_not_a_failure(shipped: Project) -> None:
    row = judge_determinism(DIFFERENT, shipped.profiles["qwen36-fp8-mtp"])
    assert row.verdict == "info"
    assert row.observed == "unstable: 2 different answers in 3 runs (expected)"
    assert row.evidence[0] == "run 1, 3: 'The Moon is 3,474 km wide.'"
    assert row.evidence[1] == "run 2: 'The Moon is 3,474 km across.'"
    assert row.evidence[2].startswith("expected: speculative decoding (MTP) is on")


def test_unstable_when_wanted_fails_even_with_mtp(shipped: Project) -> None:
    wanted = with_health(shipped.profiles["qwen36-fp8-mtp"], wanted=True)
    row = judge_determinism(DIFFERENT, wanted)
    assert row.verdict == "fail"
    assert row.expected == "identical x3 (determinism.wanted)"
    assert row.evidence[-1].startswith("cause: speculative decoding (MTP)")
    llama = shipped.profiles["qwen36-q4-llamacpp"]
    row = judge_determinism(DIFFERENT, llama)
    assert row.verdict == "fail" and not any(e.startswith("cause") for e in row.evidence)


def test_unstable_without_a_known_cause_warns(shipped: Project) -> None:
    row = judge_determinism(DIFFERENT, shipped.profiles["qwen36-fp8"])
    assert (row.verdict, row.expected) == ("warn", "identical x3")


def test_instability_reasons(shipped: Project) -> None:
    assert instability_reason(shipped.profiles["qwen36-fp8"]) is None
    assert instability_reason(shipped.profiles["qwen36-q4-llamacpp"]) is None
    data = shipped.profiles["qwen36-q4-llamacpp"].model_dump()
    data["llamacpp"].update(parallel=4, cache_prompt=None)
    reason = instability_reason(Profile.model_validate(data))
    assert reason is not None and "4 slots and the prompt cache on" in reason


def test_distinct_outputs_keep_run_numbers() -> None:
    assert distinct_outputs(["a", "b", "a", "c"]) == [((1, 3), "a"), ((2,), "b"), ((4,), "c")]

"""Canaries: the checks of an answer, the files, and a profile's canaries refused when
they cannot check anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from servefleet.core.canary import judge_canary, load_canaries
from servefleet.core.errors import ConfigError
from servefleet.core.models.health import Canary
from servefleet.core.project import load_project, profile_identity

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_canaries_judge_the_right_and_the_wrong_answer() -> None:
    czech, korean = load_canaries(REPO / "canaries" / "quality.yaml")
    assert judge_canary(czech, "A").verdict == "pass"
    assert judge_canary(czech, "**A** (1 800 Kč)").verdict == "pass"
    wrong = judge_canary(czech, "B")
    assert wrong.verdict == "fail" and "contains 'B'" in wrong.observed
    assert judge_canary(korean, "서울입니다.").verdict == "pass"
    assert judge_canary(korean, "seoul").verdict == "pass"  # case-insensitive
    assert judge_canary(korean, "부산").verdict == "fail"


def test_a_canary_needs_a_check_and_valid_patterns() -> None:
    with pytest.raises(ValidationError, match="a canary needs a check"):
        Canary(name="x", prompt="p")
    with pytest.raises(ValidationError, match="'expect' is not a regular expression"):
        Canary(name="x", prompt="p", expect="(")


def test_a_bad_canary_file_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("canaries:\n  - name: x\n    prompt: p\n    expected: A\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: canaries\[0\]\.expected"):
        load_canaries(path, "c.yaml")


def test_canaries_do_not_change_the_profile_identity() -> None:
    project = load_project(REPO, "reference")
    profile = project.profiles["qwen36-fp8"]
    canaried = profile.model_copy(update={"health": profile.health.model_copy(update={
        "canaries": [Canary(name="x", prompt="p", expect="A")]})})
    assert profile_identity(canaried) == profile_identity(profile)

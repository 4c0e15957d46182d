"""A public model deploys without ``HF_TOKEN`` (a warning, the env file carries it empty);
a profile whose model is gated (``model.gated: true``) is warned about and its deploy
stops before any node is touched. Real CLI on a copy of the shipped project."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from servefleet.core.project import load_project
from servefleet.core.secrets import optional_blanks

Run = Callable[..., Result]


@pytest.fixture(autouse=True)
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)


def _gate(project: Path, profile: str) -> None:
    path = project / f"profiles/{profile}.yaml"
    text = path.read_text()
    path.write_text(re.sub(r"^model:\n", "model:\n  gated: true\n", text, count=1, flags=re.M))


def test_a_public_model_deploys_without_the_token(run: Run) -> None:
    # The reference nodes pin no host key: the deploy gets as far as the node, refused
    # there, which proves the secret did not stop it.
    result = run("deploy", "dgx-spark-2", "--yes")
    assert result.exit_code == 1
    assert "secret HF_TOKEN is not set" not in result.output
    assert "no host key is pinned" in result.output
    assert "warning: HF_TOKEN is not set: Qwen/Qwen3.6-35B-A3B-FP8 (profiles qwen36-fp8, " \
        "qwen36-fp8-mtp) is a public model and deploys without a token" in result.output


def test_a_gated_model_warns_and_stops_the_deploy(run: Run, project: Path) -> None:
    _gate(project, "qwen36-fp8")  # qwen36-fp8-mtp extends it
    plan = run("plan", "dgx-spark-2")
    assert "is a gated model (model.gated): its download needs the token" in plan.output
    result = run("deploy", "dgx-spark-2", "--yes")
    assert result.exit_code == 1
    assert "error: secret HF_TOKEN is not set in the environment" in result.output
    assert "no host key is pinned" not in result.output  # stopped before any node


def test_the_token_when_set_is_used_and_not_warned_about(run: Run) -> None:
    result = run("deploy", "dgx-spark-2", "--yes", env={"HF_TOKEN": "hf_abcdef"})
    assert "HF_TOKEN is not set" not in result.output


def test_optional_blanks_fill_only_what_no_profile_needs(project: Path) -> None:
    _gate(project, "qwen36-w8a16")
    loaded = load_project(project, "reference")
    public, gated = loaded.profiles["qwen36-fp8"], loaded.profiles["qwen36-w8a16"]
    assert public.needs_secret("HF_TOKEN") is False and gated.needs_secret("HF_TOKEN")
    assert optional_blanks([public], {}) == {"HF_TOKEN": ""}
    assert optional_blanks([public, gated], {}) == {}
    assert optional_blanks([public], {"HF_TOKEN": "hf_x"}) == {"HF_TOKEN": "hf_x"}


def test_gated_is_not_part_of_the_profile_identity(project: Path) -> None:
    from servefleet.core.project import profile_identity

    before = profile_identity(load_project(project, "reference").profiles["qwen36-fp8"])
    _gate(project, "qwen36-fp8")
    assert profile_identity(load_project(project, "reference").profiles["qwen36-fp8"]) \
        == before
    assert "HF_TOKEN" not in os.environ

"""The node reader asks the real ``docker compose config`` how a release's compose files
merge (Compose's own truth, not a copy of its rules): the engine service's image, command,
environment and labels, with no secret value leaving the node."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servefleet.adapters.drift_collect import collector_script as script
from servefleet.core.project import load_project
from servefleet.core.render import render_release
from tests.reference_project import REPO_ROOT

SECRET = "hf_compose_config_secret_4711"


def write_release(folder: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return folder


def test_compose_merges_the_rendered_reference_releases(
        tmp_path: Path, need_program: Callable[[str], str]) -> None:
    compose = need_program("docker-compose")
    project = load_project(REPO_ROOT, "reference")
    for deployment in project.deployments():
        rendered = render_release(project, deployment, {"HF_TOKEN": SECRET})
        folder = write_release(tmp_path / deployment.node / deployment.name, rendered.files)
        got = script.compose_service([compose], str(folder), f"servefleet-{deployment.name}",
                                     list(rendered.compose_files), "engine.env")
        assert "error" not in got, got
        assert got["image"] == rendered.image, deployment.key
        assert got["command"] == list(rendered.engine_argv), deployment.key
        assert got["labels"]["io.servefleet.release"] == rendered.release_id
        # The secret lives in engine.env, an env file Compose was told not to resolve.
        assert "HF_TOKEN" not in got["environment"]
        assert SECRET not in json.dumps(got)


OVERRIDE = b"""services:
  engine:
    image: ${ENGINE_IMAGE}
    command: !override ["--port", "8001"]
    environment: !reset {}
    labels:
      extra: "${LABEL_VALUE:-fallback}"
"""
BASE = b"""services:
  engine:
    image: example/base:1
    command: ["--port", "8000", "--max-num-seqs", "4"]
    env_file: [engine.env]
    environment:
      VLLM_LOGGING_LEVEL: INFO
    labels:
      servefleet.release: r1
"""


def test_reset_override_and_interpolation_are_compose_s_own(
        tmp_path: Path, need_program: Callable[[str], str]) -> None:
    compose = need_program("docker-compose")
    folder = write_release(tmp_path, {
        "compose.yaml": BASE, "compose.override.1.yaml": OVERRIDE,
        ".env": b"ENGINE_IMAGE=example/local:dev\n",
        "engine.env": f"HF_TOKEN={SECRET}\n".encode()})
    got = script.compose_service([compose], str(folder), "servefleet-main",
                                 ["compose.yaml", "compose.override.1.yaml"], "engine.env")
    assert got == {"image": "example/local:dev", "command": ["--port", "8001"],
                   "environment": {},
                   "labels": {"servefleet.release": "r1", "extra": "fallback"}}


def test_a_compose_without_no_env_resolution_drops_the_env_file_names(
        tmp_path: Path, need_program: Callable[[str], str]) -> None:
    # Compose before 2.35 refuses the flag and resolves env files into the environment.
    compose = need_program("docker-compose")
    older = tmp_path / "older-compose"
    older.write_text("#!/bin/sh\n"
                     'for a in "$@"; do [ "$a" = --no-env-resolution ] && '
                     '{ echo "unknown flag: --no-env-resolution" >&2; '
                     "echo \"See 'docker compose config --help'.\" >&2; exit 1; }; done\n"
                     f'exec {compose} "$@"\n')
    older.chmod(0o755)
    folder = write_release(tmp_path / "release", {
        "compose.yaml": BASE, "engine.env": f"HF_TOKEN={SECRET}\nOTHER=x\n".encode()})
    got = script.compose_service([str(older)], str(folder), "servefleet-main",
                                 ["compose.yaml"], "engine.env")
    assert got["environment"] == {"VLLM_LOGGING_LEVEL": "INFO"}
    assert SECRET not in json.dumps(got)


def test_a_secret_an_override_takes_from_the_shell_stays_on_the_node(
        tmp_path: Path, need_program: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    compose = need_program("docker-compose")
    monkeypatch.setenv("HF_TOKEN", SECRET)  # the SSH session's environment
    folder = write_release(tmp_path, {
        "compose.yaml": BASE, "engine.env": b"HF_TOKEN=\n",
        "compose.override.1.yaml": b"services:\n  engine:\n"
                                   b"    environment:\n      HF_TOKEN: ${HF_TOKEN}\n"})
    got = script.compose_service([compose], str(folder), "servefleet-main",
                                 ["compose.yaml", "compose.override.1.yaml"], "engine.env",
                                 ["HF_TOKEN"])
    assert got["environment"] == {"VLLM_LOGGING_LEVEL": "INFO"}
    assert SECRET not in json.dumps(got)


def test_a_broken_compose_file_is_an_error_not_a_guess(
        tmp_path: Path, need_program: Callable[[str], str]) -> None:
    compose = need_program("docker-compose")
    folder = write_release(tmp_path, {"compose.yaml": b"services: [not, a, mapping]\n"})
    got = script.compose_service([compose], str(folder), "servefleet-main",
                                 ["compose.yaml"], "engine.env")
    assert set(got) == {"error"} and got["error"]


@pytest.mark.parametrize(("config", "why"), [
    ({}, "names no service 'engine'"),
    ({"services": {"engine": "x"}}, "names no service 'engine'"),
])
def test_an_answer_without_the_engine_service_says_so(config: dict, why: str) -> None:
    assert why in script.compose_service_facts(config, "engine", set())["error"]


def test_values_compose_prints_as_null_or_bool_become_text() -> None:
    config = {"services": {"engine": {"environment": {"A": None, "B": True},
                                      "labels": {"x": False}}}}
    got = script.compose_service_facts(config, "engine", {"B"})
    assert got["environment"] == {"A": ""} and got["labels"] == {"x": "false"}

"""``servefleet import NODE``: what it prints, what --write writes (a profile per engine and
the stack entry with ``adopt:``, comments kept), never over an existing file, and one line
for a node it cannot reach."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from servefleet.core.adopt import RunningEngine, running_engine
from servefleet.core.errors import UnreachableNode
from servefleet.core.project import load_project
from tests.core.adopt_docs import (
    COMPOSE_LLAMA,
    DOCKER_RUN_VLLM,
    HF_SECRET,
    LLAMA_IMAGE,
    VLLM_IMAGE,
    variant,
)

Run = Callable[..., Result]


@pytest.fixture
def box(project: Path) -> Path:
    """The shipped project with a node ``gpu-box`` the reference stack does not place."""
    text = (project / "nodes" / "rtx5090.yaml").read_text()
    (project / "nodes" / "gpu-box.yaml").write_text(text.replace("rtx5090", "gpu-box"))
    return project


def _serve(monkeypatch: pytest.MonkeyPatch, engines: list[RunningEngine]) -> None:
    def read_engines(node: Any, **_: Any) -> list[RunningEngine]:
        return engines

    monkeypatch.setattr("servefleet.adapters.importer.read_engines", read_engines)


def test_dry_run_prints_and_writes_nothing(run: Run, box: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, [running_engine(DOCKER_RUN_VLLM, VLLM_IMAGE)])
    before = (box / "Pulumi.reference.yaml").read_text()
    result = run("import", "gpu-box")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "vllm-qwen: vllm, vllm/vllm-openai:v0.21.0 (running)" in out
    assert "profile: profiles/gpu-box-main.yaml (extends qwen36-fp8)" in out
    assert ("servefleet:profiles.gpu-box: main: {profile: gpu-box-main, port: 8000, "
            "adopt: vllm-qwen}") in out
    assert "| extends: qwen36-fp8" in out
    assert "would write profiles/gpu-box-main.yaml" in out
    assert HF_SECRET not in out
    assert not (box / "profiles" / "gpu-box-main.yaml").exists()
    assert (box / "Pulumi.reference.yaml").read_text() == before


def test_write_adds_profile_and_stack_entry(run: Run, box: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, [running_engine(DOCKER_RUN_VLLM, VLLM_IMAGE)])
    result = run("import", "gpu-box", "--write")
    assert result.exit_code == 0, result.output
    assert "wrote profiles/gpu-box-main.yaml, Pulumi.reference.yaml" in result.output
    stack_text = (box / "Pulumi.reference.yaml").read_text()
    assert "# The reference fleet: two DGX Spark and one RTX 5090." in stack_text
    assert "Imported by `servefleet import gpu-box`" in stack_text
    assert HF_SECRET not in stack_text
    assert HF_SECRET not in (box / "profiles" / "gpu-box-main.yaml").read_text()
    project = load_project(box, "reference")
    placed = {d.key: d for d in project.stack.deployments}
    assert placed["gpu-box/main"].adopt == "vllm-qwen"
    assert placed["gpu-box/main"].profile == "gpu-box-main" and placed["gpu-box/main"].port == 8000
    assert "dgx-spark-1/nomtp" in placed  # the other deployments are still there
    assert project.profiles["gpu-box-main"].extends == "qwen36-fp8"


def test_write_never_overwrites(run: Run, box: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, [running_engine(DOCKER_RUN_VLLM, VLLM_IMAGE)])
    mine = box / "profiles" / "gpu-box-main.yaml"
    shutil.copy(box / "profiles" / "qwen36-fp8.yaml", mine)
    before = mine.read_text(), (box / "Pulumi.reference.yaml").read_text()
    result = run("import", "gpu-box", "--write")
    assert result.exit_code == 1
    assert "profiles/gpu-box-main.yaml: already exist(s)" in result.output
    assert "Traceback" not in result.output
    assert (mine.read_text(), (box / "Pulumi.reference.yaml").read_text()) == before


def test_several_engines_and_json(run: Run, box: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sglang = variant(DOCKER_RUN_VLLM, Name="/sg", Path="python3",
                     Args=["-m", "sglang.launch_server"])
    _serve(monkeypatch, [running_engine(COMPOSE_LLAMA, LLAMA_IMAGE),
                         running_engine(DOCKER_RUN_VLLM, VLLM_IMAGE),
                         running_engine(sglang, None)])
    result = run("import", "gpu-box", "--json")
    assert result.exit_code == 1  # one engine cannot be imported
    data = json.loads(result.output)
    by = {e["container"]: e for e in data["engines"]}
    assert by["chat-llama-1"]["deployment"] == "chat-llama-1"
    assert by["chat-llama-1"]["base"] == "qwen36-q4-llamacpp"
    assert by["vllm-qwen"]["stack_entry"] == {"servefleet:profiles.gpu-box": {"vllm-qwen": {
        "profile": "gpu-box-vllm-qwen", "port": 8000, "adopt": "vllm-qwen"}}}
    assert "runs sglang" in by["sg"]["refused"]
    assert HF_SECRET not in result.output


def test_node_already_in_stack_is_refused(run: Run, project: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _serve(monkeypatch, [running_engine(COMPOSE_LLAMA, LLAMA_IMAGE)])
    before = (project / "Pulumi.reference.yaml").read_text()
    result = run("import", "rtx5090", "--write")
    assert result.exit_code == 1
    assert "node 'rtx5090' already has an entry" in result.output
    assert not (project / "profiles" / "rtx5090-main.yaml").exists()
    assert (project / "Pulumi.reference.yaml").read_text() == before


def test_unreachable_node_is_one_line(run: Run, box: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def read_engines(node: Any, **_: Any) -> list[RunningEngine]:
        raise UnreachableNode("gpu-box: cannot reach 10.0.0.9:22 over SSH after 2 attempts "
                              "(timed out)")

    monkeypatch.setattr("servefleet.adapters.importer.read_engines", read_engines)
    result = run("import", "gpu-box")
    assert result.exit_code != 0
    assert result.output.strip().splitlines() == [
        "error: gpu-box: cannot reach 10.0.0.9:22 over SSH after 2 attempts (timed out)"]


def test_real_adapter_refuses_an_unpinned_host_key(run: Run, box: Path) -> None:
    # The copied nodes pin no host key: the transport refuses before connecting.
    result = run("import", "gpu-box")
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1
    assert "no host key is pinned" in result.output and "Traceback" not in result.output


def test_adapter_splits_one_round_trip() -> None:
    from servefleet.adapters.importer import SEPARATOR, import_argv, split_listing

    argv = import_argv({"MY_CRED"})
    assert argv[:2] == ["sh", "-c"] and "docker ps -a -q --no-trunc" in argv[2]
    # Docker is asked through templates, never for the whole inspect document: the
    # listed secret name is in the template (as a name), the script itself is constant.
    assert 'docker inspect --type container --format "$1"' in argv[2]
    assert 'docker image inspect --format "$2"' in argv[2]
    assert '(eq $n "MY_CRED")' in argv[4] and '(eq $n "MY_CRED")' in argv[5]
    assert "MY_CRED" not in argv[2]
    lines = [json.dumps(DOCKER_RUN_VLLM), json.dumps(COMPOSE_LLAMA)]
    text = "\n".join([*lines, SEPARATOR, json.dumps(VLLM_IMAGE)]) + "\n"
    containers, images = split_listing("gpu-box", text)
    assert [c["Name"] for c in containers] == ["/vllm-qwen", "/chat-llama-1"]
    assert [i["Id"] for i in images] == [VLLM_IMAGE["Id"]]
    # A node without containers prints the separator alone.
    assert split_listing("gpu-box", f"{SEPARATOR}\n") == ([], [])

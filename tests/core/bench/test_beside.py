"""The load container beside an engine without ``vllm bench serve``: its compose file, the
image it defaults to, and the tokenizer setting that changes no engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servefleet.core.bench.beside import BENCH_SERVICE, bench_service_file, default_bench_image
from servefleet.core.errors import ConfigError
from servefleet.core.project import load_project, profile_identity

REPO = Path(__file__).resolve().parents[3]


def test_the_bench_service_never_starts_with_up_and_shares_the_node_network() -> None:
    text = bench_service_file('vllm/vllm-openai:v0.26.0"; rm -rf /', "/srv/hf cache")
    service = yaml.safe_load(text)["services"][BENCH_SERVICE]
    assert service["profiles"] == [BENCH_SERVICE]
    # Quoted by construction: the value comes back as it went in.
    assert service["image"] == 'vllm/vllm-openai:v0.26.0"; rm -rf /'
    assert service["entrypoint"] == ["python3", "-u", "-"]
    assert service["network_mode"] == "host" and service["restart"] == "no"
    assert service["env_file"] == ["engine.env"]
    assert service["volumes"][0]["source"] == "/srv/hf cache"
    assert service["volumes"][0]["target"] == "/root/.cache/huggingface"


def test_the_default_image_is_the_newest_vllm_profiles() -> None:
    project = load_project(REPO, "reference")
    newest = max((p for p in project.profiles.values() if p.engine == "vllm"),
                 key=lambda p: tuple(int(x) for x in p.engine_version.split(".")))
    assert default_bench_image(project.profiles.values()) == newest.image.pinned
    assert "@sha256:" in newest.image.pinned


def test_no_vllm_profile_and_no_stack_image_names_the_setting() -> None:
    project = load_project(REPO, "reference")
    llama = [p for p in project.profiles.values() if p.engine == "llama.cpp"]
    with pytest.raises(ConfigError, match="servefleet:benchImage"):
        default_bench_image(llama)


def test_the_tokenizer_does_not_change_the_profile_identity() -> None:
    project = load_project(REPO, "reference")
    profile = project.profiles["qwen36-q4-llamacpp"]
    assert profile.model.tokenizer == "Qwen/Qwen3.6-35B-A3B"
    other = profile.model_copy(update={"model": profile.model.model_copy(
        update={"tokenizer": "someone/else"})})
    assert profile_identity(other) == profile_identity(profile)


def test_the_stack_names_the_bench_image(tmp_path: Path) -> None:
    for name in ("nodes", "profiles", "templates", "healthchecks"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": {
        "servefleet:benchImage": "vllm/vllm-openai:v0.26.0",
        "servefleet:profiles": {"rtx5090": "qwen36-q4-llamacpp"}}}))
    assert load_project(tmp_path, "t").stack.bench_image == "vllm/vllm-openai:v0.26.0"

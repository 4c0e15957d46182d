"""Staged weights in a release: the one-shot ``weights`` service the real Compose CLI
accepts, the engine offline, the pin in the release id and the manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from servefleet.core.project import load_project
from servefleet.core.render import render_release
from servefleet.core.render.release import manifest_for
from servefleet.core.render.weights import WeightsSpec

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MOVED = "fedcba9876543210fedcba9876543210fedcba98"
SHA = "cd" * 32


def _release(tmp_project: Any, name: str, data: dict[str, Any], node: str = "dgx-spark-1",
             secrets: dict[str, str] | None = None) -> Any:
    tmp_project.profile(name, data)
    project = load_project(tmp_project.root, tmp_project.stack({node: name}))
    return project, render_release(project, project.deployments()[0],
                                   secrets or {"HF_TOKEN": "hf_secret_value"})


def test_a_snapshot_source_renders_a_weights_service_and_an_offline_engine(
        tmp_project: Any, kit: Any, compose_bin: str, tmp_path: Path) -> None:
    _, release = _release(tmp_project, "pinned", {
        "extends": "qwen36-fp8", "model": {"source": {"revision": COMMIT}}})
    folder = kit.write_release(release, tmp_path / "r")
    result = kit.run_compose(compose_bin, folder, release, "--profile", "weights", "config",
                             "--format", "json")
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    engine, weights = services["engine"], services["weights"]
    assert engine["environment"]["HF_HUB_OFFLINE"] == "1"
    assert engine["command"][engine["command"].index("--revision") + 1] == COMMIT
    assert weights["entrypoint"] == ["python3", "-u", "-"]
    assert weights["image"] == engine["image"]
    assert weights["profiles"] == ["weights"]
    assert weights["network_mode"] == "host"
    # dgx-spark-1's inventory names its own hf_cache.
    assert weights["volumes"] == [{"type": "bind",
                                   "source": "/home/servefleet/.cache/huggingface",
                                   "target": "/root/.cache/huggingface", "bind": {}}]
    env = weights["environment"]
    assert {k: v for k, v in env.items() if k.startswith("SERVEFLEET_WEIGHTS_")} == {
        "SERVEFLEET_WEIGHTS_KIND": "snapshot",
        "SERVEFLEET_WEIGHTS_REPO": "Qwen/Qwen3.6-35B-A3B-FP8",
        "SERVEFLEET_WEIGHTS_REVISION": COMMIT,
        "SERVEFLEET_WEIGHTS_DEST": "/root/.cache/huggingface/hub"}
    # The token reaches the staging container from engine.env only: never the compose file.
    assert env["HF_TOKEN"] == "hf_secret_value"
    assert b"hf_secret_value" not in release.files["compose.yaml"]
    # `up` never starts it: without the profile, Compose does not list it.
    plain = kit.run_compose(compose_bin, folder, release, "config", "--services")
    assert plain.stdout.split() == ["engine"]


def test_a_moved_revision_is_another_release_and_the_manifest_names_the_pin(
        tmp_project: Any) -> None:
    _, first = _release(tmp_project, "pinned", {
        "extends": "qwen36-fp8", "model": {"source": {"revision": COMMIT}}})
    project, moved = _release(tmp_project, "pinned", {
        "extends": "qwen36-fp8", "model": {"source": {"revision": MOVED}}})
    assert first.release_id != moved.release_id
    manifest = manifest_for(moved, project.deployments()[0], created_at="t", created_by="u")
    spec = WeightsSpec.from_json(json.loads(json.dumps(manifest))["weights"])
    assert spec == moved.weights
    assert spec is not None and spec.pin == f"Qwen/Qwen3.6-35B-A3B-FP8@{MOVED}"
    assert spec.host_path == ("/home/servefleet/.cache/huggingface/hub/"
                              f"models--Qwen--Qwen3.6-35B-A3B-FP8/snapshots/{MOVED}")


def test_a_gguf_file_source_stages_into_models_dir_with_curl(tmp_project: Any) -> None:
    _, release = _release(tmp_project, "gguf", {
        "extends": "qwen36-q4-llamacpp",
        "model": {"source": {"file": "Qwen3.6-35B-A3B-Q4_K_M.gguf", "sha256": SHA}}},
        node="rtx5090")
    compose = yaml.safe_load(release.files["compose.yaml"])
    weights = compose["services"]["weights"]
    assert weights["entrypoint"] == ["sh", "-s"]
    assert weights["volumes"][0]["source"] == "/srv/models"
    assert weights["volumes"][0]["read_only"] is False
    assert weights["environment"]["SERVEFLEET_WEIGHTS_DEST"] == \
        "/models/Qwen3.6-35B-A3B-Q4_K_M.gguf"
    assert weights["environment"]["SERVEFLEET_WEIGHTS_REVISION"] == "main"
    assert compose["services"]["engine"]["environment"]["HF_HUB_OFFLINE"] == "1"
    # The engine still mounts the folder read-only.
    assert compose["services"]["engine"]["volumes"][1]["read_only"] is True


def test_a_profile_without_a_source_renders_as_before(kit: Any) -> None:
    project = kit.shipped_project([{"node": "dgx-spark-1", "name": "main",
                                    "profile": "qwen36-fp8"}])
    release = render_release(project, project.deployments()[0], {"HF_TOKEN": "t"})
    compose = yaml.safe_load(release.files["compose.yaml"])
    assert list(compose["services"]) == ["engine"]
    assert "HF_HUB_OFFLINE" not in compose["services"]["engine"].get("environment", {})
    assert release.weights is None


@pytest.mark.parametrize(("source", "message"), [
    ({"revision": "main"}, "a snapshot source needs 'revision' as a full commit sha"),
    ({}, "a snapshot source needs 'revision'"),
    ({"file": "q.gguf"}, "a 'file' source needs 'sha256'"),
    ({"url": "http://example.com/q.gguf", "sha256": SHA}, "must be an https:// URL"),
    ({"url": "https://example.com/q.gguf", "sha256": SHA, "revision": "main"},
     "a 'url' source takes only 'sha256'"),
    ({"revision": COMMIT, "sha256": SHA}, "'sha256' pins one file"),
    ({"file": "../etc/passwd", "sha256": SHA}, "is not a path inside a repository"),
])
def test_a_wrong_source_names_the_field_and_the_fix(
        tmp_project: Any, source: dict[str, Any], message: str) -> None:
    from servefleet.core.errors import ConfigError
    tmp_project.profile("bad", {"extends": "qwen36-fp8", "model": {"source": source}})
    with pytest.raises(ConfigError) as caught:
        load_project(tmp_project.root, tmp_project.stack({"dgx-spark-1": "bad"}))
    assert "profiles/bad.yaml" in str(caught.value)
    assert "model.source" in str(caught.value)
    assert message in str(caught.value)

"""Compose files: every shipped profile renders to a file the real Compose CLI accepts, and
the values survive the trip through YAML and compose interpolation unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from servefleet.core.errors import RenderError
from servefleet.core.project import load_project, profile_identity
from servefleet.core.render import render_release


def _config_json(kit: Any, compose_bin: str, folder: Path, release: Any) -> dict[str, Any]:
    result = kit.run_compose(compose_bin, folder, release, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _unescape(value: Any) -> Any:
    """Compose writes a literal '$' as '$$' in its canonical output."""
    if isinstance(value, str):
        return value.replace("$$", "$")
    if isinstance(value, list):
        return [_unescape(v) for v in value]
    if isinstance(value, dict):
        return {k: _unescape(v) for k, v in value.items()}
    return value


def test_every_shipped_profile_passes_compose_config(
        shipped_profile: str, kit: Any, compose_bin: str, tmp_path: Path) -> None:
    node = kit.node_for(kit.shipped_project(), shipped_profile)
    project = kit.shipped_project([{"node": node, "name": "main", "profile": shipped_profile,
                                    "port": 8001}])
    deployment = project.deployments()[0]
    release = render_release(project, deployment, {"HF_TOKEN": "hf_test_token"})
    folder = kit.write_release(release, tmp_path / "release")

    quiet = kit.run_compose(compose_bin, folder, release, "config", "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == ""

    config = _config_json(kit, compose_bin, folder, release)
    assert config["name"] == "servefleet-main"
    assert list(config["services"]) == ["engine"]
    engine = config["services"]["engine"]
    profile = project.profiles[shipped_profile]
    assert _unescape(engine["command"]) == list(release.engine_argv)
    assert release.engine_argv[:1] != ("serve",)
    if profile.builds_image:
        assert engine["image"] == f"servefleet/{node}-main:{release.release_id}"
        assert engine["build"]["args"] == {"BASE_IMAGE": profile.image.pinned}
        assert "Dockerfile" in release.files
    else:
        assert engine["image"] == profile.image.pinned
        assert "@sha256:" in engine["image"]
        assert "build" not in engine and "Dockerfile" not in release.files
    assert engine["network_mode"] == "host"
    assert engine["ipc"] == "host"
    assert engine["restart"] == "on-failure:3"
    devices = engine["deploy"]["resources"]["reservations"]["devices"]
    tensor_parallel = profile.vllm.tensor_parallel_size if profile.vllm else None
    # Compose spells count 'all' as -1.
    assert devices == [{"capabilities": ["gpu"], "driver": "nvidia",
                        "count": tensor_parallel or -1}]
    assert engine["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert engine["logging"] == {"driver": "json-file",
                                 "options": {"max-file": "5", "max-size": "100m"}}
    health = engine["healthcheck"]
    assert health["test"][0] == "CMD"
    assert "8001/health" in health["test"][-1]
    assert health["start_period"] == f"{profile.health.boot_deadline_seconds // 60}m0s"
    mounts = {v["target"]: v for v in engine["volumes"]}
    assert mounts["/root/.cache/huggingface"]["source"] == project.nodes[node].hf_cache
    labels = engine["labels"]
    assert labels["io.servefleet.profile"] == shipped_profile
    assert labels["io.servefleet.profile-identity"] == profile_identity(profile)
    assert labels["io.servefleet.release"] == release.release_id
    assert labels["io.servefleet.deployment"] == "main"
    assert labels["io.servefleet.node"] == node
    assert labels["io.servefleet.node-label.site"] == "home-lab"
    # The secret arrives through env_file only; the rendered compose file never holds it.
    assert b"hf_test_token" not in release.files["compose.yaml"]
    for name, value in profile.env.items():
        assert _unescape(engine["environment"][name]) == value


def test_healthcheck_uses_what_each_image_has(kit: Any) -> None:
    project = kit.shipped_project([
        {"node": "dgx-spark-1", "name": "main", "profile": "qwen36-fp8", "port": 8000},
        {"node": "rtx5090", "name": "main", "profile": "qwen36-q4-llamacpp", "port": 8002},
    ])
    vllm, llama = (render_release(project, d, {"HF_TOKEN": "t"}) for d in project.deployments())
    vllm_compose = yaml.safe_load(vllm.files["compose.yaml"])
    llama_compose = yaml.safe_load(llama.files["compose.yaml"])
    assert vllm_compose["services"]["engine"]["healthcheck"]["test"] == [
        "CMD", "python3", "-c",
        "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', "
        "timeout=5)",
    ]
    assert llama_compose["services"]["engine"]["healthcheck"]["test"] == [
        "CMD", "curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8002/health",
    ]
    # The 5090 node has a models folder: mounted read-only and never created empty.
    volumes = llama_compose["services"]["engine"]["volumes"]
    assert volumes[1] == {"type": "bind", "source": "/srv/models", "target": "/models",
                          "read_only": True, "bind": {"create_host_path": False}}


def test_values_with_dollar_and_quotes_survive_compose(
        tmp_project: Any, kit: Any, compose_bin: str, tmp_path: Path) -> None:
    awkward = "a $HOME ${HOME} $$ \"q\" 'x' #c \\ end"
    secret = "hf_Se$cret #not-a-comment \"dq\" ${PATH} back\\slash"
    tmp_project.profile("awkward", {
        "extends": "qwen36-fp8",
        "env": {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1", "ODD_VALUE": awkward},
        "vllm": {"extra_args": ["--override-generation-config={\"note\": \"$5 off\"}"]},
    })
    stack = tmp_project.stack({"dgx-spark-1": "awkward"})
    project = load_project(tmp_project.root, stack)
    release = render_release(project, project.deployments()[0], {"HF_TOKEN": secret})
    folder = kit.write_release(release, tmp_path / "release")
    engine = _config_json(kit, compose_bin, folder, release)["services"]["engine"]
    assert _unescape(engine["environment"]["ODD_VALUE"]) == awkward
    assert _unescape(engine["environment"]["HF_TOKEN"]) == secret
    assert _unescape(engine["command"][-1]) == "--override-generation-config={\"note\": \"$5 off\"}"
    assert secret.encode() not in release.files["compose.yaml"]


def test_tensor_parallel_reserves_that_many_gpus_and_shm_size_replaces_ipc_host(
        tmp_project: Any, kit: Any, compose_bin: str, tmp_path: Path) -> None:
    tmp_project.profile("tp2", {"extends": "qwen36-fp8", "shm_size": "16g",
                                "vllm": {"tensor_parallel_size": 2}})
    project = load_project(tmp_project.root, tmp_project.stack({"dgx-spark-1": "tp2"}))
    release = render_release(project, project.deployments()[0], {"HF_TOKEN": "t"})
    engine = _config_json(kit, compose_bin, kit.write_release(release, tmp_path / "r"),
                          release)["services"]["engine"]
    assert engine["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 2
    assert "ipc" not in engine
    assert engine["shm_size"] == "17179869184"


def test_node_overrides_are_copied_or_rendered_and_applied_in_order(
        tmp_project: Any, kit: Any, compose_bin: str, tmp_path: Path) -> None:
    tmp_project.write("overrides/site.yaml", "services:\n  engine:\n    labels:\n"
                                             "      site.rack: \"r1\"\n")
    tmp_project.write("overrides/sim.yaml.j2", (
        "# {{ node_name }}/{{ deployment }}\n"
        "services:\n"
        "  engine:\n"
        "    image: {{ ('stand-in/' ~ engine ~ ':' ~ engine_version) | yq }}\n"
        "{% if builds_image %}\n"
        "    build: !reset null\n"
        "{% endif %}\n"
        "    deploy: !reset {}\n"
        "    environment:\n"
        "      SIM_PORT: {{ port | string | yq }}\n"
        "      SIM_BUILDS: {{ builds_image | string | yq }}\n"
    ))
    tmp_project.node("box", {"address": "box.lan", "compose_overrides": [
        "overrides/site.yaml", "overrides/sim.yaml.j2"]})
    project = load_project(tmp_project.root, tmp_project.stack(
        {"box": {"second": {"profile": "qwen36-q4-llamacpp", "port": 8004}}}))
    release = render_release(project, project.deployments()[0])
    assert release.compose_files == ("compose.yaml", "compose.override.1.yaml",
                                     "compose.override.2.yaml")
    assert release.files["compose.override.1.yaml"] == \
        (tmp_project.root / "overrides/site.yaml").read_bytes()
    assert release.files["compose.override.2.yaml"].decode() == (
        "# box/second\n"
        "services:\n"
        "  engine:\n"
        "    image: \"stand-in/llama.cpp:b8680\"\n"
        "    deploy: !reset {}\n"
        "    environment:\n"
        "      SIM_PORT: \"8004\"\n"
        "      SIM_BUILDS: \"False\"\n"
    )
    assert b"COMPOSE_FILE=compose.yaml:compose.override.1.yaml:compose.override.2.yaml\n" \
        in release.files[".env"]
    folder = kit.write_release(release, tmp_path / "release")
    engine = _config_json(kit, compose_bin, folder, release)["services"]["engine"]
    assert engine["image"] == "stand-in/llama.cpp:b8680"
    assert "deploy" not in engine
    assert engine["labels"]["site.rack"] == "r1"
    assert engine["labels"]["io.servefleet.release"] == release.release_id
    # Without -f, compose takes the file list from the release's .env.
    plain = kit.run_compose(compose_bin, folder, dataclasses.replace(release, compose_files=()),
                            "config", "--format", "json")
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["services"]["engine"]["image"] == "stand-in/llama.cpp:b8680"


def test_override_template_sees_only_its_variables(tmp_project: Any) -> None:
    tmp_project.write("overrides/bad.yaml.j2", "x: {{ profile_name }}\n")
    tmp_project.node("box", {"address": "box.lan",
                             "compose_overrides": ["overrides/bad.yaml.j2"]})
    project = load_project(tmp_project.root, tmp_project.stack({"box": "qwen36-q4-llamacpp"}))
    with pytest.raises(RenderError, match=r"box/main: nodes/box.yaml: compose_overrides\[0\]: "
                                          r"compose override overrides/bad.yaml.j2: "
                                          r"'profile_name' is undefined"):
        render_release(project, project.deployments()[0])


def test_missing_or_escaping_override_is_an_error(tmp_project: Any) -> None:
    tmp_project.node("box", {"address": "box.lan", "compose_overrides": ["overrides/nope.yaml"]})
    # '..' is refused by the inventory model; a symlink is the remaining way out.
    tmp_project.node("box2", {"address": "box2.lan",
                              "compose_overrides": ["escape/outside.yaml"]})
    (tmp_project.root.parent / "outside.yaml").write_text("services: {}\n")
    (tmp_project.root / "escape").symlink_to(tmp_project.root.parent)
    project = load_project(tmp_project.root, tmp_project.stack(
        {"box": "qwen36-q4-llamacpp", "box2": "qwen36-q4-llamacpp"}))
    box, box2 = project.deployments()
    with pytest.raises(RenderError, match=r"nodes/box.yaml: compose_overrides\[0\]: "
                                          r"'overrides/nope.yaml' does not exist"):
        render_release(project, box)
    with pytest.raises(RenderError, match="points outside the project folder"):
        render_release(project, box2)

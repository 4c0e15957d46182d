"""Releases: determinism, the release id, secrets, modes and the manifest."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from servefleet.core.errors import RenderError
from servefleet.core.models import Deployment
from servefleet.core.project import load_project
from servefleet.core.render import (
    RenderedRelease,
    hashed_env_text,
    manifest_for,
    render_deployments,
    render_release,
)
from servefleet.core.render.release import release_id_of

SECRET = "hf_s3cr3t-V4lue$with#odd chars"


def _reference(kit: Any) -> Any:
    return load_project(kit.repo_root, "reference")


def _sha(kit: Any, data: bytes) -> str:
    return str(kit.sha256(data))


def test_identical_inputs_give_identical_bytes_and_id(kit: Any) -> None:
    first = render_deployments(_reference(kit), _reference(kit).deployments(), {"HF_TOKEN": SECRET})
    second = render_deployments(_reference(kit), _reference(kit).deployments(),
                                {"HF_TOKEN": SECRET})
    assert [r.release_id for r in first] == [r.release_id for r in second]
    assert [r.files for r in first] == [r.files for r in second]
    ids = [r.release_id for r in first]
    assert len(set(ids)) == len(ids)  # every deployment has its own release
    assert all(len(i) == 12 and int(i, 16) >= 0 for i in ids)


def test_release_id_is_the_hash_of_the_files_rendered_without_it(kit: Any) -> None:
    for release in render_deployments(_reference(kit), _reference(kit).deployments(),
                                      {"HF_TOKEN": SECRET}):
        without_id = {path: content.replace(release.release_id.encode(), b"")
                      for path, content in release.files.items()}
        without_id["engine.env"] = hashed_env_text(without_id["engine.env"])
        assert release_id_of(without_id, release.modes) == release.release_id
        assert release.release_id.encode() in release.files["compose.yaml"]
        assert f"SERVEFLEET_RELEASE={release.release_id}\n".encode() in release.files[".env"]


def test_one_changed_flag_changes_the_id_and_only_the_compose_file(tmp_project: Any) -> None:
    tmp_project.profile("base", {"extends": "qwen36-fp8"})
    tmp_project.profile("tweaked", {"extends": "qwen36-fp8", "vllm": {"max_num_seqs": 33}})
    project = load_project(tmp_project.root, tmp_project.stack({
        "dgx-spark-1": {"main": {"profile": "base"}},
        "dgx-spark-2": {"main": {"profile": "base"}},
    }))
    base = render_release(project, Deployment(node="dgx-spark-1", profile="base"),
                          {"HF_TOKEN": SECRET})
    tweaked = render_release(project, Deployment(node="dgx-spark-1", profile="tweaked"),
                             {"HF_TOKEN": SECRET})
    assert base.release_id != tweaked.release_id
    assert base.profile_identity != tweaked.profile_identity
    changed = sorted(p for p in base.files if base.file_hashes[p] != tweaked.file_hashes[p])
    assert changed == [".env", "compose.yaml"]  # .env: profile name and release id
    other_node = render_release(project, Deployment(node="dgx-spark-2", profile="base"),
                                {"HF_TOKEN": SECRET})
    assert other_node.release_id != base.release_id


def test_published_hashes_carry_secret_names_never_anything_of_a_value(kit: Any) -> None:
    project = _reference(kit)
    deployment = project.deployments()[0]
    one = render_release(project, deployment, {"HF_TOKEN": SECRET})
    two = render_release(project, deployment, {"HF_TOKEN": SECRET + "2"})
    # Nothing published is computed from a value: a digest of it would let anyone holding
    # the manifest, plan or Pulumi outputs test guesses offline.
    assert one.release_id == two.release_id
    assert one.file_hashes == two.file_hashes
    assert one.files["engine.env"].endswith(f"HF_TOKEN='{SECRET}'\n".encode())
    assert hashed_env_text(one.files["engine.env"]) == b"HF_TOKEN=(set)\n"
    assert one.file_hashes["engine.env"] == _sha(kit, b"HF_TOKEN=(set)\n")
    manifest = manifest_for(one, deployment, created_at="2026-11-22T01:00:00+00:00",
                            created_by="ops@example")
    published = json.dumps([manifest, one.file_hashes, one.release_id])
    for value in (SECRET, "s3cr3t"):
        assert hashlib.sha256(value.encode()).hexdigest() not in published
    leaks = [SECRET, "s3cr3t"]
    for text in (one.files["compose.yaml"].decode(), one.files[".env"].decode(),
                 json.dumps(manifest), repr(one), json.dumps(one.file_hashes),
                 hashed_env_text(one.files["engine.env"]).decode()):
        for leak in leaks:
            assert leak not in text
    # A secret added or emptied is still a different file.
    placeholder = render_release(project, deployment, None, require_secrets=False)
    assert placeholder.file_hashes["engine.env"] != one.file_hashes["engine.env"]


def test_missing_secret_is_named_without_any_value(kit: Any) -> None:
    project = _reference(kit)
    with pytest.raises(RenderError) as caught:
        render_release(project, project.deployments()[0], {"OTHER": SECRET})
    message = str(caught.value)
    assert message.startswith("dgx-spark-1/main: profile qwen36-fp8-mtp needs secret HF_TOKEN "
                              "but no value was given")
    assert "servefleet:hfToken" in message
    assert SECRET not in message


def test_unsafe_secret_value_is_refused_without_showing_it(kit: Any) -> None:
    project = _reference(kit)
    for bad in ("line\nbreak-" + SECRET, "it's-" + SECRET, SECRET + "\\"):
        with pytest.raises(RenderError) as caught:
            render_release(project, project.deployments()[0], {"HF_TOKEN": bad})
        assert "secret HF_TOKEN" in str(caught.value)
        assert SECRET not in str(caught.value) and bad not in repr(caught.value)


def test_preview_without_secrets_writes_placeholders(kit: Any) -> None:
    project = _reference(kit)
    release = render_release(project, project.deployments()[0], require_secrets=False)
    assert not release.secrets_rendered
    assert release.files["engine.env"].decode() == (
        "# Secret environment of the engine (mode 0600). Rendered by servefleet; never commit "
        "or print.\n"
        "# HF_TOKEN: not rendered here (no value given); a deploy fills it from the stack's "
        "secrets.\n"
        "HF_TOKEN=\n"
    )
    full = render_release(project, project.deployments()[0], {"HF_TOKEN": SECRET})
    assert full.secrets_rendered and full.release_id != release.release_id


def test_modes_and_file_set(kit: Any) -> None:
    project = _reference(kit)
    release = render_release(project, project.deployments()[0], {"HF_TOKEN": SECRET})
    assert release.modes == {".env": 0o644, "compose.yaml": 0o644, "engine.env": 0o600}
    assert release.compose_files == ("compose.yaml",)
    assert release.secret_names == ("HF_TOKEN",)
    assert release.image == release.base_image == (
        "vllm/vllm-openai:v0.21.0@sha256:"
        "a230095847e93bd4df9888b33dab956fa9504537b828a23657d2b26fed57b5c9")
    assert release.engine_argv[0] == "Qwen/Qwen3.6-35B-A3B-FP8"
    assert set(release.file_hashes) == set(release.files)


def test_dotenv_holds_the_compose_variables(kit: Any) -> None:
    project = _reference(kit)
    release = render_release(project, project.deployments()[1], {"HF_TOKEN": SECRET})
    assert release.files[".env"].decode() == (
        "# Compose interpolation variables of this release (no secrets). Rendered by "
        "servefleet.\n"
        "COMPOSE_FILE=compose.yaml\n"
        "SERVEFLEET_DEPLOYMENT=nomtp\n"
        "SERVEFLEET_NODE=dgx-spark-1\n"
        "SERVEFLEET_PROFILE=qwen36-fp8\n"
        f"SERVEFLEET_RELEASE={release.release_id}\n"
        "SERVEFLEET_ENGINE=vllm\n"
        "SERVEFLEET_ENGINE_VERSION=0.21.0\n"
        "SERVEFLEET_PORT=8001\n"
    )


def test_overlay_release_names_its_image_after_node_deployment_and_id(
        tmp_project: Any, overlay_profile: Any) -> None:
    name = overlay_profile()
    project = load_project(tmp_project.root, tmp_project.stack(
        {"dgx-spark-2": {"mtp-test": {"profile": name, "port": 8001}}}))
    release = render_release(project, project.deployments()[0], {"HF_TOKEN": SECRET})
    assert release.builds_image
    assert release.image == f"servefleet/dgx-spark-2-mtp-test:{release.release_id}"
    assert release.modes["patches/01-workspace.diff"] == 0o644
    again = render_release(project, project.deployments()[0], {"HF_TOKEN": SECRET})
    assert again.files == release.files and again.release_id == release.release_id


def test_hashed_env_text_keeps_names_and_drops_values_and_comments() -> None:
    rendered = b"# c\nA='x y'\nB=\n\nC='p$q'\nstray\n"
    assert hashed_env_text(rendered) == b"A=(set)\nB=\nC=(set)\nstray\n"
    assert hashed_env_text(b"") == b""
    assert hashed_env_text(b"A=\xff\n") == b"A=(set)\n"  # not UTF-8: no error


def test_manifest_lists_inputs_hashes_and_who(kit: Any) -> None:
    project = _reference(kit)
    deployment = project.deployments()[0]
    release = render_release(project, deployment, {"HF_TOKEN": SECRET})
    when = datetime(2026, 11, 22, 1, 2, 3, tzinfo=UTC)
    manifest = manifest_for(release, deployment, created_at=when, created_by="alice@laptop")
    assert manifest == {
        "schema": 1,
        "release_id": release.release_id,
        "node": "dgx-spark-1",
        "deployment": "main",
        "port": 8000,
        "profile": "qwen36-fp8-mtp",
        "profile_identity": release.profile_identity,
        "engine": "vllm",
        "engine_version": "0.21.0",
        "base_image": release.base_image,
        "image": release.image,
        "builds_image": False,
        "engine_argv": list(release.engine_argv),
        "compose_files": ["compose.yaml"],
        "files": {
            ".env": {"sha256": release.file_hashes[".env"], "mode": "0644"},
            "compose.yaml": {"sha256": release.file_hashes["compose.yaml"], "mode": "0644"},
            "engine.env": {"sha256": release.file_hashes["engine.env"], "mode": "0600"},
        },
        "secret_env": ["HF_TOKEN"],
        "secrets_rendered": True,
        "created_at": "2026-11-22T01:02:03+00:00",
        "created_by": "alice@laptop",
    }
    json.dumps(manifest)  # JSON-ready
    with pytest.raises(RenderError, match="manifest for a release of dgx-spark-1/main"):
        manifest_for(release, project.deployments()[1], created_at=when, created_by="x")


def test_bad_deployment_name_and_unknown_references(kit: Any, tmp_project: Any) -> None:
    project = _reference(kit)
    with pytest.raises(RenderError, match="cannot be a compose project name"):
        render_release(project, Deployment(node="dgx-spark-1", name="a.b", profile="qwen36-fp8"),
                       {"HF_TOKEN": "t"})
    with pytest.raises(RenderError, match="no profile 'nope'"):
        render_release(project, Deployment(node="dgx-spark-1", profile="nope"))
    with pytest.raises(RenderError, match="no node 'ghost'"):
        render_release(project, Deployment(node="ghost", profile="qwen36-fp8"))


def test_render_deployments_reports_every_problem(kit: Any) -> None:
    project = _reference(kit)
    with pytest.raises(RenderError) as caught:
        render_deployments(project, project.deployments(), {})
    lines = str(caught.value).splitlines()
    assert [line.split(":")[0] for line in lines] == \
        ["dgx-spark-1/main", "dgx-spark-1/nomtp", "dgx-spark-2/main"]


def test_repr_never_carries_file_contents(kit: Any) -> None:
    project = _reference(kit)
    release: RenderedRelease = render_release(project, project.deployments()[0],
                                              {"HF_TOKEN": SECRET})
    assert ", files=" not in repr(release)
    assert SECRET not in repr(release)


def test_project_templates_override_the_builtin_ones(tmp_project: Any) -> None:
    compose = tmp_project.root / "templates" / "compose.yaml.j2"
    compose.write_text("# site-specific\n" + compose.read_text())
    project = load_project(tmp_project.root, tmp_project.stack({"rtx5090": "qwen36-q4-llamacpp"}))
    release = render_release(project, project.deployments()[0])
    assert release.files["compose.yaml"].startswith(b"# site-specific\n")
    (tmp_project.root / "templates" / "engine.env.j2").unlink()
    with pytest.raises(RenderError, match=r"template engine\.env\.j2 missing"):
        render_release(project, project.deployments()[0])


def test_template_with_an_unknown_variable_fails(tmp_project: Any) -> None:
    dotenv = tmp_project.root / "templates" / "dotenv.j2"
    dotenv.write_text(dotenv.read_text() + "X={{ no_such_value }}\n")
    project = load_project(tmp_project.root, tmp_project.stack({"rtx5090": "qwen36-q4-llamacpp"}))
    with pytest.raises(RenderError, match=r"rtx5090/main: template dotenv\.j2: 'no_such_value' "
                                          r"is undefined"):
        render_release(project, project.deployments()[0])


def test_paths_in_a_release_stay_inside_it(kit: Any) -> None:
    for release in render_deployments(_reference(kit), _reference(kit).deployments(),
                                      {"HF_TOKEN": "t"}):
        for path in release.files:
            assert not Path(path).is_absolute() and ".." not in Path(path).parts

"""Parsers of node facts: the node reader's answer, the releases and preflight commands'
output."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servefleet.core.observed import (
    ObservedContainer,
    container_from_facts,
    observed_node,
    parse_answer,
    parse_preflight,
    parse_releases,
)

WORKING_DIR = "com.docker.compose.project.working_dir"
LABELS = {
    "com.docker.compose.project": "main",
    "com.docker.compose.service": "engine",
    "com.docker.compose.project.working_dir": "/srv/sf/main/releases/aaaaaaaaaaaa",
    "io.servefleet.release": "aaaaaaaaaaaa",
}


def container(**fields: object) -> dict[str, Any]:
    """One container as the node reader reports it (``container_facts`` of its inspect)."""
    data: dict[str, Any] = {
        "id": "c1", "name": "main-engine-1", "status": "running", "exit_code": 0,
        "oom_killed": False, "restart_count": 0, "started_at": "2026-11-21T10:00:00Z",
        "image_ref": "vllm/vllm-openai:v0.21.0", "labels": LABELS, "health": "healthy",
        "command": None, "env": {}, "image_id": "sha256:" + "1" * 64}
    data.update(fields)
    return data


def deployment(**fields: object) -> dict[str, Any]:
    """One deployment of the answer, present on the node."""
    data: dict[str, Any] = {"present": True, "current": None, "releases": [],
                            "manifest": None, "files": {}, "containers": []}
    data.update(fields)
    return data


def answer(lock: str | None = None, docker_error: str | None = None,
           **deployments: dict[str, Any]) -> dict[str, Any]:
    return {"schema": 1, "lock": lock, "deployments": deployments,
            "docker_error": docker_error, "errors": [], "baselines": {}}


MANIFEST = {"release_id": "aaaaaaaaaaaa", "engine_argv": ["m", "--port", "8000"]}


def test_a_running_deployment() -> None:
    node = observed_node(answer(main=deployment(
        current="aaaaaaaaaaaa", releases=["bbbbbbbbbbbb", "aaaaaaaaaaaa"], manifest=MANIFEST,
        files={"compose.yaml": "ab" * 32}, containers=[container()])), ["main"])
    assert node.lock_owner is None
    dep = node.deployments["main"]
    assert dep.current_release == "aaaaaaaaaaaa"
    assert dep.releases == ("aaaaaaaaaaaa", "bbbbbbbbbbbb")
    assert dep.file_hashes == {"compose.yaml": "ab" * 32}
    assert dep.engine_argv == ["m", "--port", "8000"]
    assert dep.running and dep.running_release == "aaaaaaaaaaaa"
    assert dep.engine_state() == "running"
    [engine] = dep.containers
    assert (engine.name, engine.service, engine.health) == ("main-engine-1", "engine", "healthy")
    # The one container model: the rollout's read fills the common fields…
    assert isinstance(engine, ObservedContainer)
    assert engine.image_ref == "vllm/vllm-openai:v0.21.0" and engine.labels == LABELS
    assert (engine.release_label, engine.release_id) == ("aaaaaaaaaaaa", "aaaaaaaaaaaa")
    assert engine.started_at == "2026-11-21T10:00:00Z"
    # …and leaves what only the image reads fill empty.
    assert (engine.repo_digests, engine.image_labels, engine.ref_image_id) == ((), {}, None)
    assert not engine.patch_marker_checked
    # No key was sent: no secret digests, even if the node had some.
    assert dep.secret_digests is None


def test_the_release_of_an_unlabelled_container_is_its_project_folder() -> None:
    labels = {k: v for k, v in LABELS.items() if k != "io.servefleet.release"}
    engine = container_from_facts(container(labels=labels))
    assert engine.release_label is None and engine.release_id == "aaaaaaaaaaaa"
    outside = container_from_facts(container(labels={**labels, WORKING_DIR: "/srv/sf/main"}))
    assert outside.release_id is None
    bare = container_from_facts(container(labels=None, image_ref=None, name="/bare"))
    assert (bare.labels, bare.service, bare.release_id, bare.image_ref) == ({}, None, None, None)
    assert bare.name == "bare"


def test_killed_and_oom_killed_engines_and_running_ones_first() -> None:
    killed = observed_node(answer(main=deployment(
        current="aaaaaaaaaaaa", releases=["aaaaaaaaaaaa"],
        containers=[container(status="exited", exit_code=137)])), ["main"]).deployments["main"]
    assert not killed.running
    assert killed.engine_state() == "exited (exit 137)"
    assert killed.manifest is None and killed.engine_argv is None
    oom = observed_node(answer(main=deployment(containers=[
        container(status="restarting", exit_code=1, oom_killed=True, restart_count=4)])),
        ["main"]).deployments["main"]
    assert oom.current_release is None
    assert oom.restart_count == 4
    assert oom.engine_state() == "restarting (OOM-killed, exit 1)"
    both = observed_node(answer(main=deployment(containers=[
        container(name="a-old", status="exited"), container(name="z-new")])),
        ["main"]).deployments["main"]
    assert [c.name for c in both.containers] == ["z-new", "a-old"]


def test_lock_absent_deployment_and_docker_error() -> None:
    node = observed_node(answer(
        lock="alice@ctl pid=7 since=2026-11-21T10:00:00Z op=deploy\n",
        docker_error="Cannot connect to the Docker daemon at unix:///var/run/docker.sock.",
        gone={"present": False, "current": None},
        main=deployment(current="aaaaaaaaaaaa",
                        manifest_error="manifest.json is not a JSON object")),
        ["gone", "main"])
    assert node.lock_owner == "alice@ctl pid=7 since=2026-11-21T10:00:00Z op=deploy\n"
    assert node.lock is not None and node.lock.operation == "deploy"
    assert list(node.deployments) == ["main"]
    dep = node.deployments["main"]
    assert dep.manifest is None and dep.manifest_error == "manifest.json is not a JSON object"
    assert dep.engine_state().startswith("unknown (docker: Cannot connect")


def test_keyed_digests_and_baselines() -> None:
    digests = {"HF_TOKEN": "f" * 64}
    raw = {**answer(main=deployment(current="aaaaaaaaaaaa", keyed_digests=digests)),
           "baselines": {".servefleet-baselines.json": {"profiles": {}}}}
    keyed = observed_node(raw, ["main"], keyed=True)
    assert keyed.deployments["main"].secret_digests == digests
    assert keyed.baselines == {"profiles": {}}
    # Asked with a key, but the release has no engine.env: nothing to compare.
    none = observed_node(answer(main=deployment(current="aaaaaaaaaaaa")), ["main"], keyed=True)
    assert none.deployments["main"].secret_digests is None


def test_what_is_not_a_complete_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="no JSON"):
        parse_answer("sh: 1: python3: not found\n")
    with pytest.raises(ValueError, match="no JSON"):
        parse_answer('{"schema": 1, "deployments": {"main": {"pre')
    with pytest.raises(ValueError, match="unknown format"):
        parse_answer(json.dumps({"schema": 2}))
    cut = {**answer(main=deployment()), "errors": ["the node did not answer within 48 s"]}
    with pytest.raises(ValueError, match="incomplete: the node did not answer"):
        observed_node(cut, ["main"])


def test_releases_newest_first_with_current_and_previous() -> None:
    text = "\n".join([
        "@@servefleet-releases 1", "@@current", "releases/b", "@@previous", "releases/a",
        "@@release a", '{"created_at": "2026-11-20T00:00:00+00:00", "profile": "p1"}',
        "@@release b", '{"created_at": "2026-11-21T00:00:00+00:00", "profile": "p2"}',
        "@@release c", "", "@@end"])
    releases = parse_releases(text)
    assert [(r.release_id, r.current, r.previous, r.profile) for r in releases] == [
        ("b", True, False, "p2"), ("a", False, True, "p1"), ("c", False, False, None)]


def test_preflight_facts() -> None:
    facts = parse_preflight("docker_version=20.10.24\ncompose=docker compose\n"
                            "compose_version=5.6.1\ndisk_free_kib=1048576\nport_in_use=no\n")
    assert facts.docker_version == "20.10.24"
    assert facts.compose == ("docker", "compose")
    assert facts.disk_free_bytes == 1 << 30
    assert facts.port_in_use is False
    missing = parse_preflight("docker_error=Cannot connect to the Docker daemon\n"
                              "disk_free_kib=\nport_in_use=yes\n")
    assert missing.docker_version is None and missing.compose is None
    assert missing.disk_free_bytes is None and missing.port_in_use is True


HAND_LABELS = {"com.docker.compose.project": "handmade", "com.docker.compose.service": "engine"}


def test_a_container_to_adopt_of_a_never_deployed_deployment() -> None:
    node = observed_node(answer(main={"present": False, "current": None, "candidate": container(
        name="vllm-qwen", labels=HAND_LABELS, id="c0ffee",
        command=["Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000"], health=None)}), ["main"])
    dep = node.deployments["main"]
    assert dep.current_release is None and dep.containers == ()
    assert dep.adopt_candidate is not None
    assert (dep.adopt_candidate.name, dep.adopt_candidate.id) == ("vllm-qwen", "c0ffee")
    assert dep.adopt_candidate.command == ("Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000")
    # Without a candidate, a deployment that was never deployed is left out.
    assert observed_node(answer(main={"present": False}), ["main"]).deployments == {}


def test_the_adopted_container_runs_the_release_its_record_names() -> None:
    record = "release=aaaaaaaaaaaa container=c0ffee name=vllm-qwen\n"
    node = observed_node(answer(main=deployment(
        current="aaaaaaaaaaaa", releases=["aaaaaaaaaaaa"], adopted=record, manifest=MANIFEST,
        containers=[container(name="servefleet-main-adopted", labels=HAND_LABELS,
                              id="c0ffee")])), ["main"])
    dep = node.deployments["main"]
    assert (dep.adopted_release, dep.adopted_from) == ("aaaaaaaaaaaa", "vllm-qwen")
    [engine] = dep.containers
    # Its own labels were set by hand; the record gives its release to every reader.
    assert engine.release_id == "aaaaaaaaaaaa" and dep.running_release == "aaaaaaaaaaaa"
    # Another container with the same name but another id is not the adopted one.
    other = observed_node(answer(main=deployment(
        current="aaaaaaaaaaaa", adopted=record,
        containers=[container(name="servefleet-main-adopted", labels=HAND_LABELS,
                              id="beef")])), ["main"])
    assert other.deployments["main"].containers[0].release_id is None

"""Parsers of node facts: the observe, releases and preflight commands' output."""

from __future__ import annotations

import json

import pytest

from servefleet.core.observed import (
    ObservedContainer,
    parse_container,
    parse_observation,
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


def container(**fields: object) -> str:
    """One line as the observe command's docker inspect template prints it."""
    data = {"name": "/main-engine-1", "status": "running", "exit_code": 0,
            "oom_killed": False, "restart_count": 0, "started_at": "2026-11-21T10:00:00Z",
            "image": "vllm/vllm-openai:v0.21.0", "labels": LABELS, "health": "healthy"}
    data.update(fields)
    return json.dumps(data)


def observation(*blocks: str) -> str:
    return "\n".join(["@@servefleet-observe 1", "@@lock", *blocks, "@@end"]) + "\n"


MANIFEST = '{\n  "release_id": "aaaaaaaaaaaa",\n  "engine_argv": ["m", "--port", "8000"]\n}'


def test_a_running_deployment() -> None:
    node = parse_observation(observation(
        "@@deployment main", "@@current", "releases/aaaaaaaaaaaa", "@@releases",
        "aaaaaaaaaaaa", "bbbbbbbbbbbb", "@@manifest", MANIFEST, "", "@@containers",
        container()))
    assert node.lock_owner is None
    dep = node.deployments["main"]
    assert dep.current_release == "aaaaaaaaaaaa"
    assert dep.releases == ("aaaaaaaaaaaa", "bbbbbbbbbbbb")
    assert dep.engine_argv == ["m", "--port", "8000"]
    assert dep.running and dep.running_release == "aaaaaaaaaaaa"
    assert dep.engine_state() == "running"
    [engine] = dep.containers
    assert (engine.name, engine.service, engine.health) == ("main-engine-1", "engine", "healthy")
    # The one container model: the observe command fills the common fields…
    assert isinstance(engine, ObservedContainer)
    assert engine.image_ref == "vllm/vllm-openai:v0.21.0" and engine.labels == LABELS
    assert (engine.release_label, engine.release_id) == ("aaaaaaaaaaaa", "aaaaaaaaaaaa")
    assert engine.started_at == "2026-11-21T10:00:00Z"
    # …and leaves what only the drift collector reads empty.
    assert (engine.id, engine.command, engine.env, engine.image_id) == ("", None, {}, None)
    assert not engine.patch_marker_checked


def test_the_release_of_an_unlabelled_container_is_its_project_folder() -> None:
    labels = {k: v for k, v in LABELS.items() if k != "io.servefleet.release"}
    engine = parse_container(container(labels=labels))
    assert engine.release_label is None and engine.release_id == "aaaaaaaaaaaa"
    outside = parse_container(container(labels={**labels, WORKING_DIR: "/srv/sf/main"}))
    assert outside.release_id is None
    bare = parse_container(container(labels=None, image=None))
    assert (bare.labels, bare.service, bare.release_id, bare.image_ref) == ({}, None, None, None)


def test_killed_and_oom_killed_engines() -> None:
    killed = parse_observation(observation(
        "@@deployment main", "@@current", "releases/aaaaaaaaaaaa", "@@releases",
        "aaaaaaaaaaaa", "@@manifest", "", "@@containers",
        container(status="exited", exit_code=137))).deployments["main"]
    assert not killed.running
    assert killed.engine_state() == "exited (exit 137)"
    assert killed.manifest is None and killed.engine_argv is None
    oom = parse_observation(observation(
        "@@deployment main", "@@current", "", "@@releases", "@@manifest", "", "@@containers",
        container(status="restarting", exit_code=1, oom_killed=True, restart_count=4)
    )).deployments["main"]
    assert oom.current_release is None
    assert oom.restart_count == 4
    assert oom.engine_state() == "restarting (OOM-killed, exit 1)"


def test_lock_absent_deployment_and_docker_error() -> None:
    node = parse_observation(observation(
        "alice@ctl pid=7 since=2026-11-21T10:00:00Z op=deploy",
        "@@deployment gone", "@@absent",
        "@@deployment main", "@@current", "releases/aaaaaaaaaaaa", "@@releases",
        "@@manifest", "{not json", "@@docker-error",
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."))
    assert node.lock_owner == "alice@ctl pid=7 since=2026-11-21T10:00:00Z op=deploy"
    assert list(node.deployments) == ["main"]
    dep = node.deployments["main"]
    assert dep.manifest is None and dep.manifest_error is not None
    assert dep.manifest_error.startswith("manifest.json is not valid JSON")
    assert dep.engine_state().startswith("unknown (docker: Cannot connect")


def test_cut_output_is_refused() -> None:
    with pytest.raises(ValueError, match="incomplete"):
        parse_observation("@@servefleet-observe 1\n@@lock\n@@deployment main\n@@current\n")
    with pytest.raises(ValueError, match="does not start with"):
        parse_observation("bash: sh: command not found\n")


def test_a_current_link_outside_releases_is_not_a_release() -> None:
    dep = parse_observation(observation(
        "@@deployment main", "@@current", "/etc", "@@releases", "@@manifest", "",
        "@@containers")).deployments["main"]
    assert dep.current_release is None


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
    node = parse_observation(observation(
        "@@deployment main", "@@absent", "@@candidate",
        container(name="/vllm-qwen", labels=HAND_LABELS, id="c0ffee",
                  command=["Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000"], health=None)))
    dep = node.deployments["main"]
    assert dep.current_release is None and dep.containers == ()
    assert dep.adopt_candidate is not None
    assert (dep.adopt_candidate.name, dep.adopt_candidate.id) == ("vllm-qwen", "c0ffee")
    assert dep.adopt_candidate.command == ("Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000")
    # Without a candidate, a deployment that was never deployed is left out.
    assert parse_observation(observation("@@deployment main", "@@absent")).deployments == {}


def test_the_adopted_container_runs_the_release_its_record_names() -> None:
    node = parse_observation(observation(
        "@@deployment main", "@@current", "releases/aaaaaaaaaaaa", "@@releases",
        "aaaaaaaaaaaa", "@@gated", "@@adopted",
        "release=aaaaaaaaaaaa container=c0ffee name=vllm-qwen", "@@manifest", MANIFEST, "",
        "@@containers", container(name="/servefleet-main-adopted", labels=HAND_LABELS,
                                  id="c0ffee")))
    dep = node.deployments["main"]
    assert (dep.adopted_release, dep.adopted_from) == ("aaaaaaaaaaaa", "vllm-qwen")
    [engine] = dep.containers
    # Its own labels were set by hand; the record gives its release to every reader.
    assert engine.release_id == "aaaaaaaaaaaa" and dep.running_release == "aaaaaaaaaaaa"
    # Another container with the same name but another id is not the adopted one.
    other = parse_observation(observation(
        "@@deployment main", "@@current", "releases/aaaaaaaaaaaa", "@@adopted",
        "release=aaaaaaaaaaaa container=c0ffee name=vllm-qwen", "@@containers",
        container(name="/servefleet-main-adopted", labels=HAND_LABELS, id="beef")))
    assert other.deployments["main"].containers[0].release_id is None

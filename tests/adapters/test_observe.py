"""The rollout's read of a node: the one node reader run for real by the local ``python3``
against a throw-away base directory (Docker unreachable or the fake one), through the
shell as sshd runs it."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from servefleet.adapters import remote
from servefleet.adapters.drift_collect import REQUEST_MARK
from servefleet.adapters.observe import observe_command, parse_observed
from servefleet.core.errors import RemoteError
from servefleet.core.models import Node
from servefleet.core.project import load_project
from tests.reference_project import REPO_ROOT

ALICE = "alice@a pid=1 since=T op=deploy id=aaaa11112222"
FAKE_DOCKER = Path(__file__).with_name("fake_docker.py")


def node(base: Path) -> Node:
    """A node of the reference stack, its base directory moved to ``base``."""
    first = next(iter(load_project(REPO_ROOT, "reference").nodes.values()))
    return first.model_copy(update={"base_dir": str(base), "name": "n1"})


def run(argv: list[str], stdin: bytes, **env: str) -> subprocess.CompletedProcess[bytes]:
    """Run a built command the way sshd does: the quoted line through a shell."""
    return subprocess.run(["sh", "-c", shlex.join(argv)], input=stdin, capture_output=True,
                          timeout=60, check=False, env={**os.environ, **env})


def read(base: Path, deployments: list[str], *, key: str = "",
         candidates: dict[str, str] | None = None, **env: str):  # type: ignore[no-untyped-def]
    argv, stdin = observe_command(node(base), deployments, key=key, candidates=candidates)
    done = run(argv, stdin, **{"DOCKER_HOST": f"unix://{base}/no-docker.sock", **env})
    assert done.returncode == 0, done.stderr
    return done, parse_observed("n1", done.stdout.decode(), deployments, key=key)


def test_the_key_travels_on_stdin_never_on_the_command_line(tmp_path: Path) -> None:
    argv, stdin = observe_command(node(tmp_path), ["main"], key="k" * 64,
                                  candidates={"main": "vllm-qwen"})
    assert argv[:3] == ["python3", "-S", "-c"]
    assert "k" * 64 not in shlex.join(argv)
    request = stdin.partition(REQUEST_MARK)[2].decode()
    assert "k" * 64 in request and "'vllm-qwen'" in request
    assert "'lock_dir': '.servefleet-lock'" in request
    # The rollout reads no image, marker, boot log or GPU: those are drift's.
    assert "'container_extras': False" in request and "PROBE_SOURCE = None" in request


def test_reads_releases_links_manifest_and_lock(tmp_path: Path) -> None:
    main = tmp_path / "main"
    for release in ("r1", "r2"):
        (main / "releases" / release).mkdir(parents=True)
    (main / "releases" / "r2" / "manifest.json").write_text(
        '{\n  "release_id": "r2",\n  "engine_argv": ["m", "--x", "1"]\n}\n')
    os.symlink("releases/r2", main / "current")
    os.symlink("releases/r1", main / "previous")
    os.symlink(str(main / "releases" / "r1"), main / "last-good")
    (main / "gated").write_text("release=r1 started=2026-11-21T10:00:00Z at=T\n")
    assert run(remote.acquire_lock(str(tmp_path), ALICE), b"").returncode == 0
    _, seen = read(tmp_path, ["main", "other"])
    assert seen.lock is not None and seen.lock.lock_id == "aaaa11112222"
    assert list(seen.deployments) == ["main"]
    dep = seen.deployments["main"]
    assert (dep.current_release, dep.previous_release, dep.last_good) == ("r2", "r1", "r1")
    assert dep.releases == ("r1", "r2")
    assert (dep.gated_release, dep.gated_started_at) == ("r1", "2026-11-21T10:00:00Z")
    assert dep.engine_argv == ["m", "--x", "1"]
    assert dep.docker_error and not dep.running  # no daemon at that socket
    assert seen.baselines is None  # no baselines file yet


def test_a_current_link_outside_releases_is_not_a_release(tmp_path: Path) -> None:
    (tmp_path / "main").mkdir()
    os.symlink("/etc", tmp_path / "main" / "current")
    _, seen = read(tmp_path, ["main"])
    assert seen.deployments["main"].current_release is None


def test_reads_the_node_baselines_in_the_same_round_trip(tmp_path: Path) -> None:
    book = {"baselines": {}, "images": {}, "schema_version": 1}
    (tmp_path / ".servefleet-baselines.json").write_text(repr(book).replace("'", '"'))
    _, seen = read(tmp_path, ["main"])
    assert seen.baselines == book


def test_hashes_the_files_as_the_renderer_and_keys_the_secret_values(tmp_path: Path) -> None:
    from servefleet.core.envdigest import keyed_value_digests
    from servefleet.core.render import hashed_env_text

    release = tmp_path / "main" / "releases" / "r1"
    env = b"# engine\nHF_TOKEN='hf_secret_value'\nEMPTY=\nPLAIN=a b=c\n\nQ='\n"
    files = {"compose.yaml": b"services: {}\n", "patches/01-x.diff": b"--- a\n+++ b\n",
             "manifest.json": b'{"release_id": "r1"}\n', "engine.env": env, ".env": b"X=1\n"}
    for path, content in files.items():
        (release / path).parent.mkdir(parents=True, exist_ok=True)
        (release / path).write_bytes(content)
    (release / "engine.env").chmod(0o600)
    os.symlink("releases/r1", tmp_path / "main" / "current")
    key = "0123456789abcdef" * 4
    done, seen = read(tmp_path, ["main"], key=key)
    assert b"hf_secret_value" not in done.stdout
    dep = seen.deployments["main"]
    assert dep.file_hashes == {path: hashlib.sha256(
        hashed_env_text(content) if path == "engine.env" else content).hexdigest()
        for path, content in files.items() if path != "manifest.json"}
    assert dep.secret_digests == dict(keyed_value_digests(env, key.encode()))
    # Without a key the node computes none.
    _, plain = read(tmp_path, ["main"])
    assert plain.deployments["main"].secret_digests is None


def test_reads_the_containers_and_an_adopt_candidate(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    docker = bindir / "docker"
    docker.write_text(f"#!/bin/sh\nexec {sys.executable} -S -E {FAKE_DOCKER} \"$@\"\n")
    docker.chmod(0o755)
    state = tmp_path / "docker.json"
    state.write_text('{"containers": {"c00000000001": {"project": "servefleet-main", '
                     '"release": "r1", "dir": "/x/main/releases/r1", "image": "img:1", '
                     '"status": "running", "exit_code": 0, "started_at": "T1", "created": 1},'
                     ' "c00000000002": {"project": "hand", "release": "-", "dir": "/h", '
                     '"image": "img:1", "status": "running", "exit_code": 0, '
                     '"started_at": "T2", "created": 2}}, "images": [], '
                     '"pulls_during_up": 0, "serial": 2}')
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_DOCKER_STATE": str(state)}
    (tmp_path / "main" / "releases" / "r1").mkdir(parents=True)
    os.symlink("releases/r1", tmp_path / "main" / "current")
    (tmp_path / "new").mkdir()
    _, seen = read(tmp_path, ["main", "new"], candidates={"new": "hand-engine-1"},
                   DOCKER_HOST="", **env)
    [engine] = seen.deployments["main"].containers
    assert (engine.id, engine.name, engine.release_id, engine.started_at) == (
        "c00000000001", "servefleet-main-engine-1", "r1", "T1")
    assert seen.deployments["main"].running_release == "r1"
    candidate = seen.deployments["new"].adopt_candidate
    assert candidate is not None and candidate.name == "hand-engine-1"
    assert seen.deployments["new"].containers == ()


def test_a_node_without_python_or_a_cut_answer_is_an_error() -> None:
    with pytest.raises(RemoteError, match="n1: observe: the node's reader printed no JSON"):
        parse_observed("n1", "sh: 1: python3: not found\n", ["main"])
    with pytest.raises(RemoteError, match="incomplete"):
        parse_observed("n1", '{"schema": 1, "errors": ["the node did not answer within 48 s"]}',
                       ["main"])

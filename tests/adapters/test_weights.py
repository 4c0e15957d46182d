"""Weight staging's fetchers, run for real against the local hub: the snapshot fetcher with
the real ``huggingface_hub`` client, the file fetcher with ``sh``, ``curl`` and
``sha256sum``; and the controller's reading of what they print."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from servefleet.adapters import weights
from servefleet.core.errors import RemoteError
from servefleet.core.render.weights import WeightsSpec
from servefleet.sim.hub import LocalHub
from tests.hub_client import client_env

REPO = "Qwen/Tiny-FP8"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3_moe"}\n')
    (folder / "model-00001-of-00002.safetensors").write_bytes(os.urandom(200 * 1024))
    (folder / "model-00002-of-00002.safetensors").write_bytes(os.urandom(120 * 1024))
    return folder


def _snapshot_spec(revision: str) -> WeightsSpec:
    return WeightsSpec(kind="snapshot", pin=f"{REPO}@{revision}", tool="python",
                       host_folder="/srv/hf", container_folder="/root/.cache/huggingface",
                       repo=REPO, revision=revision)


def _fetch_snapshot(hub: LocalHub, home: Path, revision: str, **env: str,
                    ) -> tuple[int, list[str]]:
    """Run the snapshot fetcher as the staging container does (``python3 -u -``)."""
    environ = client_env(hub.url(), home / "unused-home", SERVEFLEET_WEIGHTS_REPO=REPO,
                         SERVEFLEET_WEIGHTS_REVISION=revision,
                         SERVEFLEET_WEIGHTS_DEST=str(home / "hub"), **env)
    done = subprocess.run(["python3", "-u", "-"], input=weights.program("python"),
                          env=environ, capture_output=True, timeout=120, check=False)
    return done.returncode, done.stdout.decode().splitlines()


def _words(lines: list[str]) -> list[str]:
    return [line.split()[1] for line in lines if line.startswith("@@weights ")]


def test_a_snapshot_is_fetched_verified_recorded_then_found_cached(
        hub: LocalHub, model: Path, tmp_path: Path) -> None:
    commit = hub.add_repo(REPO, model)
    home = tmp_path / "hf"
    status, lines = _fetch_snapshot(hub, home, commit)
    assert status == 0, lines
    assert _words(lines)[0] == "plan" and _words(lines)[-1] == "verified"
    assert lines[-1] == f"@@weights verified 3 {sum(f.stat().st_size for f in model.iterdir())}"
    snapshot = home / "hub" / "models--Qwen--Tiny-FP8" / "snapshots" / commit
    assert (snapshot / "config.json").read_bytes() == (model / "config.json").read_bytes()
    assert (home / "servefleet" / "verified" / f"models--Qwen--Tiny-FP8@{commit}.json").is_file()
    gets = len([r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path])
    status, lines = _fetch_snapshot(hub, home, commit)
    assert status == 0 and _words(lines) == ["cached"]
    assert len([r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]) == gets


def test_a_corrupt_snapshot_file_is_refused_and_fetched_again_next_time(
        hub: LocalHub, model: Path, tmp_path: Path) -> None:
    commit = hub.add_repo(REPO, model)
    home = tmp_path / "hf"
    hub.fault("model-00002-of-00002.safetensors", corrupt_at=1000)
    status, lines = _fetch_snapshot(hub, home, commit)
    assert status == 4
    assert "@@weights corrupt model-00002-of-00002.safetensors sha256" in lines
    state = weights.StagingState()
    for line in [*lines, "@@weights-exit 4"]:
        state.feed(line)
    failure = state.failure(_snapshot_spec(commit))
    assert failure is not None and failure.startswith(
        f"staging {REPO}@{commit} failed: corrupt download refused "
        "(model-00002-of-00002.safetensors sha256)")
    assert "The old engine still serves" in failure
    snapshot = home / "hub" / "models--Qwen--Tiny-FP8" / "snapshots" / commit
    assert not (snapshot / "model-00002-of-00002.safetensors").exists()
    hub.fault()
    status, lines = _fetch_snapshot(hub, home, commit)
    assert status == 0 and _words(lines)[-1] == "verified"
    refetched = [r for r in hub.requests if r.method == "GET" and
                 r.path.endswith("model-00001-of-00002.safetensors")]
    assert len(refetched) == 1, "the intact shard is not fetched a second time"


def test_a_snapshot_cut_mid_file_keeps_the_finished_files_for_the_next_run(
        hub: LocalHub, model: Path, tmp_path: Path) -> None:
    commit = hub.add_repo(REPO, model)
    home = tmp_path / "hf"
    hub.fault("model-00002-of-00002.safetensors", cut_after=50_000)
    status, lines = _fetch_snapshot(hub, home, commit)
    assert status == 5 and any(line.startswith("@@weights error download:") for line in lines)
    hub.fault()
    status, lines = _fetch_snapshot(hub, home, commit)
    assert status == 0
    plan = next(line for line in lines if line.startswith("@@weights plan"))
    # The shards finished before the cut are not fetched again.
    assert int(plan.split()[-1]) >= 200 * 1024


def test_the_token_reaches_the_hub_from_the_environment(model: Path, tmp_path: Path) -> None:
    with LocalHub(token="hf_tok") as hub:
        commit = hub.add_repo(REPO, model)
        status, lines = _fetch_snapshot(hub, tmp_path / "a", commit)
        assert status == 5 and "RepositoryNotFoundError" in "\n".join(lines)
        status, lines = _fetch_snapshot(hub, tmp_path / "b", commit, HF_TOKEN="hf_tok")
        assert status == 0, lines
        assert all("hf_tok" not in line for line in lines)


# -- the file fetcher ------------------------------------------------------------------------
def _file_env(hub: LocalHub, dest: Path, sha: str, **env: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HF_ENDPOINT": hub.url(),
            "SERVEFLEET_WEIGHTS_REPO": "unsloth/Tiny-GGUF", "SERVEFLEET_WEIGHTS_REVISION": "main",
            "SERVEFLEET_WEIGHTS_FILE": "tiny.gguf", "SERVEFLEET_WEIGHTS_SHA256": sha,
            "SERVEFLEET_WEIGHTS_DEST": str(dest), **env}


def _fetch_file(env: dict[str, str]) -> tuple[int, list[str]]:
    done = subprocess.run(["sh", "-s"], input=weights.program("sh"), env=env,
                          capture_output=True, timeout=120, check=False)
    return done.returncode, done.stdout.decode().splitlines()


@pytest.fixture
def gguf(tmp_path: Path, hub: LocalHub) -> tuple[Path, str]:
    folder = tmp_path / "gguf-repo"
    folder.mkdir()
    data = os.urandom(400 * 1024)
    (folder / "tiny.gguf").write_bytes(data)
    hub.add_repo("unsloth/Tiny-GGUF", folder)
    return folder / "tiny.gguf", hashlib.sha256(data).hexdigest()


def test_a_file_is_fetched_verified_and_then_found_cached(
        hub: LocalHub, gguf: tuple[Path, str], tmp_path: Path, need_program) -> None:
    need_program("curl")
    source, sha = gguf
    dest = tmp_path / "models" / "tiny.gguf"
    dest.parent.mkdir()
    status, lines = _fetch_file(_file_env(hub, dest, sha))
    assert status == 0, lines
    assert lines[0] == f"@@weights plan 1 {400 * 1024} 0"
    assert lines[-1] == f"@@weights verified 1 {400 * 1024}"
    assert dest.read_bytes() == source.read_bytes()
    status, lines = _fetch_file(_file_env(hub, dest, sha))
    assert (status, lines) == (0, [f"@@weights cached 1 {400 * 1024}"])


def test_a_cut_file_download_resumes_where_it_stopped(
        hub: LocalHub, gguf: tuple[Path, str], tmp_path: Path, need_program) -> None:
    need_program("curl")
    _, sha = gguf
    dest = tmp_path / "tiny.gguf"
    hub.fault(cut_after=150_000)
    status, lines = _fetch_file(_file_env(hub, dest, sha))
    assert status == 5
    assert lines[-2:] == ["@@weights progress 150000 409600", "@@weights error download "
                          "stopped (curl exit 18: curl: (18) transfer closed with 259600 bytes "
                          "remaining to read)"]
    hub.fault()
    status, lines = _fetch_file(_file_env(hub, dest, sha))
    assert status == 0 and lines[0].endswith(" 150000"), lines
    ranges = [r.range for r in hub.requests if r.method == "GET"]
    assert ranges[-1] == "bytes=150000-"
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha


def test_a_corrupt_file_is_refused_and_an_operator_s_file_is_never_overwritten(
        hub: LocalHub, gguf: tuple[Path, str], tmp_path: Path, need_program) -> None:
    need_program("curl")
    _, sha = gguf
    dest = tmp_path / "tiny.gguf"
    hub.fault(corrupt_at=10)
    status, lines = _fetch_file(_file_env(hub, dest, sha))
    assert status == 4 and "@@weights corrupt tiny.gguf sha256" in lines
    assert not dest.exists() and not Path(f"{dest}.partial").exists()
    dest.write_bytes(b"the operator's own file")
    hub.fault()
    status, lines = _fetch_file(_file_env(hub, dest, sha))
    assert status == 4 and "it is not overwritten" in lines[-1]
    assert dest.read_bytes() == b"the operator's own file"


def test_progress_shows_bytes_rate_and_eta() -> None:
    now = [100.0]
    state = weights.StagingState(clock=lambda: now[0])
    assert state.feed("@@weights plan 42 36755000000 1000000000") == \
        "fetching 42 file(s), 34.2 GiB, 953.7 MiB already here"
    now[0] = 110.0
    assert state.feed("@@weights progress 5294967296 36755000000") == \
        "4.9 GiB of 34.2 GiB (14%), 409.6 MiB/s, ETA 73 s"
    assert state.feed("noise from the container") is None


def test_a_staging_that_ends_without_a_status_fails_and_says_what_is_cached() -> None:
    spec = _snapshot_spec("a" * 40)
    lines = ["@@weights plan 2 2048 0", "@@weights progress 1024 2048"]
    with pytest.raises(RemoteError) as caught:
        weights.follow(lines, spec, lambda _line: None, node="n1")
    assert str(caught.value) == (
        f"n1: staging {REPO}@{'a' * 40} failed: the staging command ended without a status. "
        "The old engine still serves; 1.0 KiB of 2.0 KiB is cached under /srv/hf and the "
        "next deploy resumes from there")


def test_weights_that_do_not_fit_the_disk_are_refused_before_any_byte(
        hub: LocalHub, model: Path, gguf: tuple[Path, str], small_disk: Path,
        need_program) -> None:
    need_program("curl")
    commit = hub.add_repo(REPO, model)
    status, lines = _fetch_snapshot(hub, small_disk / "hf", commit)
    assert status == 7
    assert "the files still to fetch take" in lines[-1]
    assert "servefleet models NODE --prune" in lines[-1]
    _, sha = gguf
    status, lines = _fetch_file(_file_env(hub, small_disk / "tiny.gguf", sha))
    assert status == 7 and "the file still to fetch takes 409600 bytes" in lines[-1]
    assert not [r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]

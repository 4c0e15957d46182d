"""The drift collector and its control side, without the simulated fleet.

The collector runs here for real (``python3 -S -`` with the program on stdin, exactly the
command a node gets) against a release folder written the way a deploy writes it; the
engine's version is asked from a real HTTP server on localhost. The fleet scenarios (one
SSH connection per node, each drift kind injected) are in ``test_drift_collect_fleet.py``.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from servefleet.adapters.drift_collect import (
    CollectOptions,
    DeploymentQuery,
    build_request,
    collect_fleet,
    collect_node,
    collector_command,
    collector_input,
    collector_module,
    collector_source,
    observation_from_answer,
    read_engine_version,
)
from servefleet.adapters.drift_collect import collector_script as script
from servefleet.adapters.runtime import CommandResult
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.models import Node
from servefleet.core.observed import ObservedContainer, observed_node
from servefleet.core.project import load_nodes, load_project
from servefleet.core.render import RenderedRelease, hashed_env_text, render_release
from servefleet.core.secrets import secret_digest
from servefleet.sim.testbed import FleetHandle
from tests.reference_project import REPO_ROOT

SECRET = "hf_not_a_real_token_5678"


@pytest.fixture(scope="module")
def release() -> RenderedRelease:
    project = load_project(REPO_ROOT, "reference")
    deployment = next(d for d in project.deployments() if d.key == "dgx-spark-1/main")
    return render_release(project, deployment, {"HF_TOKEN": SECRET})


def write_release(base: Path, release: RenderedRelease) -> Path:
    """A deployment folder as a deploy leaves it: releases/<id>/, manifest, current."""
    folder = base / release.deployment / "releases" / release.release_id
    folder.mkdir(parents=True)
    for path, content in release.files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(content)
    manifest = {"release_id": release.release_id,
                "files": {p: {"sha256": h} for p, h in release.file_hashes.items()}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (base / release.deployment / "current").symlink_to(f"releases/{release.release_id}")
    return folder


def run_collector(request: dict[str, object], *, probe: bool = False,
                  python: str = sys.executable,
                  env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(collector_command(python), input=collector_input(request, probe=probe),
                          capture_output=True, timeout=120, check=False,
                          env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stderr.decode()
    answer = json.loads(done.stdout)
    assert isinstance(answer, dict)
    return answer


def test_collector_reads_the_release_like_the_renderer_hashes_it(
        tmp_path: Path, release: RenderedRelease) -> None:
    write_release(tmp_path, release)
    queries = [DeploymentQuery(name="main")]
    request = build_request(str(tmp_path), queries,
                            CollectOptions(docker=("servefleet-test-no-such-docker",)))
    answer = run_collector(request)
    main = answer["deployments"]["main"]  # type: ignore[index]
    assert main["current"] == release.release_id
    assert main["files"] == release.file_hashes
    assert main["secret_digests"] == {"HF_TOKEN": secret_digest(SECRET)}
    assert main["manifest"]["release_id"] == release.release_id
    assert "command not found" in answer["docker_error"]  # type: ignore[operator]
    assert SECRET.encode() not in json.dumps(answer).encode()

    observation = observation_from_answer("dgx-spark-1", json.dumps(answer), queries)
    state = observation.deployments["main"]
    assert state.file_hashes == release.file_hashes and state.engine_container is None
    assert state.docker_error is not None


def test_an_edited_file_and_a_missing_deployment(tmp_path: Path,
                                                 release: RenderedRelease) -> None:
    folder = write_release(tmp_path, release)
    with (folder / "compose.yaml").open("ab") as handle:
        handle.write(b"# edited by hand\n")
    request = build_request(str(tmp_path), [DeploymentQuery("main"), DeploymentQuery("other")],
                            CollectOptions(docker=("servefleet-test-no-such-docker",)))
    answer = run_collector(request)
    files = answer["deployments"]["main"]["files"]  # type: ignore[index]
    assert files["compose.yaml"] != release.file_hashes["compose.yaml"]
    assert files[".env"] == release.file_hashes[".env"]
    assert answer["deployments"]["other"]["present"] is False  # type: ignore[index]


def test_the_probe_runs_in_the_same_command(tmp_path: Path) -> None:
    request = build_request(str(tmp_path), [], CollectOptions(docker=("true",)))
    answer = run_collector(request, probe=True)
    gpu = answer["gpu"]
    assert isinstance(gpu, dict) and gpu["source"] in ("nvml", "nvidia-smi", "none")
    assert gpu["host"]["arch"]


def test_the_system_python_runs_the_collector(tmp_path: Path, release: RenderedRelease) -> None:
    # Nodes run their distribution's python3, not this environment's.
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no /usr/bin/python3 here")
    write_release(tmp_path, release)
    request = build_request(str(tmp_path), [DeploymentQuery("main")],
                            CollectOptions(docker=("servefleet-test-no-such-docker",)))
    answer = run_collector(request, python=python)
    assert answer["deployments"]["main"]["files"] == release.file_hashes  # type: ignore[index]


def test_the_collector_is_compiled_once_per_node(tmp_path: Path,
                                                release: RenderedRelease) -> None:
    write_release(tmp_path / "base", release)
    request = build_request(str(tmp_path / "base"), [DeploymentQuery("main")],
                            CollectOptions(docker=("servefleet-test-no-such-docker",)))
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    first = run_collector(request, env=env)
    module = cache / "servefleet" / f"{collector_module()}.py"
    assert module.read_text() == collector_source()
    compiled = (cache / "servefleet" / "__pycache__").glob(f"{collector_module()}.*.pyc")
    assert len(list(compiled)) == 1  # bytecode kept, despite PYTHONDONTWRITEBYTECODE
    assert run_collector(request, env=env) == first

    # A cached copy that differs (edited, or left by another version) is replaced.
    module.write_text(collector_source().replace("SCHEMA_VERSION = 1", "SCHEMA_VERSION = 9"))
    stale = cache / "servefleet" / "drift_collector_0123456789abcdef.py"
    stale.write_text("raise SystemExit(3)\n")
    assert run_collector(request, env=env)["schema"] == 1
    assert module.read_text() == collector_source() and not stale.exists()

    # Where nothing can be cached, the source is compiled in place.
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    assert run_collector(request, env={"XDG_CACHE_HOME": str(blocked)}) == first


@pytest.mark.parametrize("content", [
    b"# Secret environment\nHF_TOKEN='hf_abc'\nEMPTY=\n",
    b"",
    b"A='it''s'\nB=plain\n",
])
def test_collector_hashes_env_files_like_the_renderer(content: bytes) -> None:
    # One hasher: the source sent to the node carries servefleet.core.envdigest itself, and
    # runs without servefleet importable (python3 -S, as on a node).
    assert script.hashed_env_text is hashed_env_text
    program = (collector_source() + "\nimport sys\n"
               "sys.stdout.buffer.write(hashed_env_text(sys.stdin.buffer.read()))\n")
    done = subprocess.run([sys.executable, "-S", "-I", "-c", program], input=content,
                          capture_output=True, check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout == hashed_env_text(content)
    assert b"hf_abc" not in done.stdout


def test_collector_hashes_container_env_on_the_node() -> None:
    hashed = script.hashed_env_list(["HF_TOKEN=hf_abc", "MODE=fast", "EMPTY="], {"MODE"})
    assert hashed["HF_TOKEN"] == {"sha256": secret_digest("hf_abc")}
    assert hashed["MODE"] == {"sha256": secret_digest("fast"), "value": "fast"}
    assert script.env_digests(b"HF_TOKEN='hf_abc'\n") == {"HF_TOKEN": secret_digest("hf_abc")}


def test_fast_json_codec_matches_the_json_module() -> None:
    sample = [{"Id": "abc", "Config": {"Env": ["A=é", 'B="q"'], "Labels": None,
                                       "Cmd": ["--x", "1.5"]},
               "RestartCount": 3, "State": {"Running": True, "ExitCode": 0}, "F": 2.5}]
    text = json.dumps(sample, indent=2)
    assert script.json_loads(text) == sample
    assert json.loads(script.json_dumps(sample)) == sample
    assert script.json_dumps({"b": 1, "a": [None]}) == json.dumps({"b": 1, "a": [None]},
                                                                  sort_keys=True)
    with pytest.raises(ValueError):
        script.json_loads('{"a": 1} trailing')
    with pytest.raises(ValueError):
        script.json_loads("Error: no such container")


def test_resolve_ref_by_tag_digest_and_id() -> None:
    images = [
        {"Id": "sha256:" + "1" * 64, "RepoTags": ["vllm/vllm-openai:v0.21.0"],
         "RepoDigests": ["vllm/vllm-openai@sha256:" + "a" * 64]},
        {"Id": "sha256:" + "2" * 64, "RepoTags": ["servefleet-sim/vllm-standin:latest"],
         "RepoDigests": []},
    ]
    assert script.resolve_ref("vllm/vllm-openai:v0.21.0", images) == "sha256:" + "1" * 64
    assert script.resolve_ref("docker.io/vllm/vllm-openai:v0.21.0@sha256:" + "a" * 64,
                              images) == "sha256:" + "1" * 64
    assert script.resolve_ref("servefleet-sim/vllm-standin", images) == "sha256:" + "2" * 64
    assert script.resolve_ref("sha256:" + "2" * 64, images) == "sha256:" + "2" * 64
    assert script.resolve_ref("other:1", images) is None


def test_boot_log_is_parsed_on_the_control_side() -> None:
    log = (b"INFO 11-22 03:15:00 [kv_cache_utils.py:1] GPU KV cache size: 360,448 tokens\n"
           b"INFO:     Application startup complete.\n")
    deployment = {
        "present": True, "current": "abc", "files": {},
        "container": {"id": "c1", "name": "main-engine-1", "status": "running"},
        "boot_log": {"gz": base64.b64encode(zlib.compress(log)).decode(), "error": None},
    }
    answer: dict[str, Any] = {"schema": 1, "docker_error": None, "gpu": None,
                              "gpu_error": None, "errors": [],
                              "deployments": {"main": deployment}}
    observation = observation_from_answer("n", json.dumps(answer), [DeploymentQuery("main")])
    boot = observation.deployments["main"].boot
    assert boot is not None and boot.kv_cache_tokens == 360_448 and boot.outcome == "ready"


# One engine container as ``docker inspect`` prints it (the fields both readers read).
INSPECTED: dict[str, Any] = {
    "Id": "4f" * 32, "Name": "/servefleet-main-engine-1", "Image": "sha256:" + "1" * 64,
    "RestartCount": 2, "Created": "2026-11-21T09:59:58.1Z",
    "State": {"Status": "running", "ExitCode": 0, "OOMKilled": False,
              "StartedAt": "2026-11-21T10:00:00.123456789Z",
              "Health": {"Status": "healthy"}},
    "Config": {"Image": "vllm/vllm-openai:v0.21.0", "Cmd": ["--model", "m", "--port", "8000"],
               "Env": ["HF_TOKEN=hf_abc", "MODE=fast"],
               "Labels": {"com.docker.compose.project": "servefleet-main",
                          "com.docker.compose.service": "engine",
                          "com.docker.compose.project.working_dir":
                              "/srv/sf/main/releases/aaaaaaaaaaaa",
                          "io.servefleet.release": "aaaaaaaaaaaa"}},
}


def test_one_answer_gives_the_rollout_and_drift_the_same_container() -> None:
    """One reader of a node: the rollout's view (plan, health, watch) and drift's view of
    the same answer hold the same container, with the same values."""
    facts = script.container_facts(INSPECTED, {"MODE"})
    # A left-over of the same project, exited: the collector chooses the running one.
    left_over = script.container_facts(
        {**INSPECTED, "Id": "5e" * 32, "Name": "/servefleet-main-engine-2",
         "State": {"Status": "exited", "ExitCode": 137}}, {"MODE"})
    deployment = {"present": True, "current": "aaaaaaaaaaaa", "files": {}, "others": 1,
                  "container": facts, "containers": [left_over, facts]}
    answer = {"schema": 1, "docker_error": None, "gpu": None, "gpu_error": None,
              "errors": [], "deployments": {"main": deployment}}
    state = observation_from_answer("n", json.dumps(answer), [DeploymentQuery("main")])
    collected = state.deployments["main"].engine_container
    observed = observed_node(answer, ["main"]).deployments["main"].running_container
    assert isinstance(observed, ObservedContainer) and isinstance(collected, ObservedContainer)
    assert state.deployments["main"].other_containers == 1
    assert observed == collected
    assert observed.name == "servefleet-main-engine-1" and observed.running
    assert observed.image_ref == "vllm/vllm-openai:v0.21.0" and observed.restart_count == 2
    assert observed.release_id == "aaaaaaaaaaaa" and observed.service == "engine"
    assert collected.id == INSPECTED["Id"] and collected.image_id == INSPECTED["Image"]
    assert collected.command == ("--model", "m", "--port", "8000")
    assert collected.env["MODE"].value == "fast"
    assert collected.env["HF_TOKEN"].value is None
    assert collected.env["HF_TOKEN"].sha256 == secret_digest("hf_abc")


def test_collector_output_that_is_not_an_answer() -> None:
    with pytest.raises(ValueError, match="no JSON"):
        observation_from_answer("n", "Traceback (most recent call last):", [])


@pytest.fixture()
def engine_http() -> Iterator[str]:
    """A real HTTP server answering like vLLM (/version) and llama-server (/props)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = {"/version": b'{"version": "0.21.0+cu130"}',
                    "/props": b'{"build_info": "b8680-1a2b3c4", "total_slots": 1}'}.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(body or b"{}")

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield str(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_engine_version_over_http(engine_http: str) -> None:
    port = int(engine_http)
    assert read_engine_version("127.0.0.1", port, "vllm") == ("0.21.0+cu130", None)
    assert read_engine_version("127.0.0.1", port, "llama.cpp") == ("b8680-1a2b3c4", None)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    closed = server.server_address[1]
    server.server_close()
    version, error = read_engine_version("127.0.0.1", closed, "vllm", timeout=2)
    assert version is None and error is not None and "/version" in error


# --------------------------------------------------------------------------- on the fleet


class CountingTransport(SshTransport):
    """The real transport, counting connections and commands per node."""

    connects: ClassVar[dict[str, int]] = {}
    commands: ClassVar[dict[str, int]] = {}

    def _connect_once(self) -> None:
        CountingTransport.connects[self.node.name] = \
            CountingTransport.connects.get(self.node.name, 0) + 1
        super()._connect_once()

    def run(self, argv: Sequence[str], **kwargs: Any) -> CommandResult:
        CountingTransport.commands[self.node.name] = \
            CountingTransport.commands.get(self.node.name, 0) + 1
        return super().run(argv, **kwargs)


@pytest.fixture(scope="module")
def fleet_nodes(sim_fleet: FleetHandle) -> dict[str, Node]:
    nodes, _, problems = load_nodes(sim_fleet.project_dir)
    assert not problems, problems
    return {name: nodes[name] for name in sim_fleet.nodes}


@pytest.mark.fleet
def test_one_connection_and_one_command_per_node(fleet_nodes: dict[str, Node]) -> None:
    CountingTransport.connects.clear()
    CountingTransport.commands.clear()
    targets = [(node, [DeploymentQuery("never-deployed")]) for node in fleet_nodes.values()]
    observed = collect_fleet(targets, CollectOptions(timeout=60),
                             transport_factory=CountingTransport)
    assert CountingTransport.connects == dict.fromkeys(fleet_nodes, 1)
    assert CountingTransport.commands == dict.fromkeys(fleet_nodes, 1)
    for name, observation in observed.items():
        assert observation.unreachable is None, observation.unreachable
        assert observation.deployments["never-deployed"].present is False
        # The stand-in nvidia-smi answered the probe in the same round trip.
        assert observation.gpu is not None and observation.gpu.source == "nvidia-smi", name
        assert observation.gpu.driver_version == "580.142"
        assert observation.deployments["never-deployed"].docker_error is None


@pytest.mark.fleet
def test_an_unreachable_node_is_reported_and_the_others_are_read(
        fleet_nodes: dict[str, Node]) -> None:
    good = list(fleet_nodes.values())
    # Nothing listens on this port of a node's address: refused at once.
    dead = good[0].model_copy(update={
        "name": "sim-dead", "ssh": good[0].ssh.model_copy(update={"port": 2})})
    targets = [(dead, [DeploymentQuery("main")]), *((n, [DeploymentQuery("main")])
                                                     for n in good)]
    started = time.monotonic()
    observed = collect_fleet(targets, CollectOptions(timeout=20, probe=False))
    assert time.monotonic() - started < 20
    assert list(observed) == ["sim-dead", *fleet_nodes]
    assert observed["sim-dead"].unreachable is not None
    assert "cannot reach" in observed["sim-dead"].unreachable
    assert all(observed[n].unreachable is None for n in fleet_nodes)


@pytest.mark.fleet
def test_a_hung_docker_is_cut_off_and_the_rest_reported(fleet_nodes: dict[str, Node],
                                                       tmp_path: Path) -> None:
    node = next(iter(fleet_nodes.values()))
    # A docker CLI that never answers (as when dockerd hangs).
    options = CollectOptions(timeout=6, probe=False, docker=("sh", "-c", "exec sleep 600"))
    started = time.monotonic()
    observation = collect_node(node, [DeploymentQuery("never-deployed")], options)
    assert time.monotonic() - started < 6
    assert observation.unreachable is None
    assert any("did not answer within" in e for e in observation.errors), observation.errors
    assert observation.deployments["never-deployed"].present is False  # read before


def test_the_health_checks_baselines_are_read_and_compared(tmp_path: Path,
                                                          release: RenderedRelease) -> None:
    from datetime import UTC, datetime

    from servefleet.adapters.drift_collect import check
    from servefleet.core.baselines import (
        BASELINE_FILE,
        BaselineBook,
        parse_book,
        record,
        record_image,
    )
    from servefleet.core.bootlog import parse_text
    from servefleet.core.drift import DriftKind

    project = load_project(REPO_ROOT, "reference")
    deployment = next(d for d in project.deployments() if d.key == "dgx-spark-1/main")
    profile = project.profiles[release.profile]
    image_id = "sha256:" + "1" * 64
    # The book as the rollout's gate leaves it after a healthy boot of the release.
    facts = parse_text("(EngineCore pid=1) INFO 11-21 10:00:02 [kv_cache_utils.py:1] GPU KV "
                       "cache size: 360,448 tokens\n")
    when = datetime(2026, 11, 21, tzinfo=UTC)
    book = record(BaselineBook(), profile, release.profile_identity, facts, now=when,
                  release_id=release.release_id, deployment="main")
    assert book is not None
    book = record_image(book, "main", release.release_id, image_id, now=when)
    assert book is not None
    write_release(tmp_path, release)
    (tmp_path / BASELINE_FILE).write_text(book.to_text())
    queries = [DeploymentQuery(name="main")]
    request = build_request(str(tmp_path), queries,
                            CollectOptions(docker=("servefleet-test-no-such-docker",)))
    answer = run_collector(request)
    observation = observation_from_answer("dgx-spark-1", json.dumps(answer), queries)
    assert parse_book(json.dumps(observation.baselines[BASELINE_FILE])) == (book, None)
    assert (tmp_path / BASELINE_FILE).read_text() == book.to_text()  # read, never written

    planned = check._plan(project, deployment, {"HF_TOKEN": SECRET})
    state = observation.deployments["main"]
    want = check._desired(project, planned, state, book, {"HF_TOKEN": SECRET})
    assert want is not None and want.kv_baseline == book.baselines[release.profile]
    assert want.image.image_id == image_id
    # A baseline of another version of the profile, or an image recorded for another
    # release, is not this deployment's.
    other = book.model_copy(update={"baselines": {release.profile: book.baselines[
        release.profile].model_copy(update={"profile_identity": "another"})}})
    assert check._desired(project, planned, state, other, None).kv_baseline is None  # type: ignore[union-attr]
    moved = record_image(book, "main", "another-release", image_id, now=when)
    assert moved is not None
    assert check._desired(project, planned, state, moved, None).image.image_id is None  # type: ignore[union-attr]

    # A file that is not a book: reported, and nothing is compared with it.
    broken = observation.model_copy(update={"baselines": {BASELINE_FILE: {"baselines": 1}}})
    items = check._node_items(project, "dgx-spark-1", [planned], broken, {"HF_TOKEN": SECRET},
                              CollectOptions(probe=False))
    [error] = [i for i in items if i.subject == BASELINE_FILE]
    assert error.kind is DriftKind.ERROR and "is unreadable" in error.message

"""Weight staging on the simulated fleet, with the real engines, the real fetchers and a
local hub on the test host (each node reaches it at its host address).

The hub serves the tiny twins under the shipped profiles' names: llama.cpp's tiny GGUF as
``unsloth/Qwen3.6-35B-A3B-GGUF/Qwen3.6-35B-A3B-Q4_K_M.gguf`` and vLLM's tiny Qwen3-MoE as
``Qwen/Qwen3.6-35B-A3B-FP8``, so the engines load exactly what was staged, with the hub
offline. The tests share one deployment (``wt`` on port 8003); each first brings the nodes
to the releases and staged files it starts from (:func:`rtx_history`, :func:`forget_staged`),
which is a no-op in file order, so each passes alone and in any order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servefleet.adapters.drift_collect.check import check_fleet as check_drift
from servefleet.adapters.rollout import Abort, NodeResult, ProgressEvent, deploy, plan_fleet
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.adapters.weights.models import staged_models
from servefleet.cli.main import build_cli
from servefleet.core.drift.items import DriftKind
from servefleet.core.models import Deployment, Profile
from servefleet.core.project import Project
from servefleet.sim.engines.ensure import ENGINE_NAMES, ensure_engines
from servefleet.sim.hub import LocalHub
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import http_get, wiped_project

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

DEP = "wt"
PORT = 8003
SECRETS = {"HF_TOKEN": "hf_weights-test-secret"}
RTX = "sim-5090"
SPARK = "sim-spark-1"
SPARK2 = "sim-spark-2"
GGUF_REPO = "unsloth/Qwen3.6-35B-A3B-GGUF"
GGUF_FILE = "Qwen3.6-35B-A3B-Q4_K_M.gguf"
V2 = "Qwen3.6-35B-A3B-Q4_K_M-v2.gguf"
V3 = "Qwen3.6-35B-A3B-Q4_K_M-v3.gguf"
GGUF_PROFILES = {GGUF_FILE: "q4-staged", V2: "q4-v2", V3: "q4-v3"}
"""The GGUF files the llama.cpp tests stage, and the profile that pins each."""
VLLM_REPO = "Qwen/Qwen3.6-35B-A3B-FP8"
NONCE_PREFIX = "servefleet-weights-"
"""The comment of a one-copy key (servefleet.adapters.weights.peers)."""


@dataclasses.dataclass
class Bed:
    """The hub, its repositories' pins and the project whose nodes stage from it."""

    hub: LocalHub
    project: Project
    gguf: Path
    gguf_sha: str
    vllm_commit: str
    tiny_vllm: Path
    scratch: Path


def forget_staged(project: Project, names: tuple[str, ...] = (RTX, SPARK, SPARK2),
                  files: str = "Qwen3.6-35B-A3B-Q4_K_M*", *, snapshot: bool = True) -> None:
    """Remove what these tests stage from the nodes' folders (the GGUF files matching
    ``files``, and the vLLM snapshot unless ``snapshot`` is false), so the next deploy
    fetches."""
    for name in names:
        node = project.nodes[name]
        if node.models_dir is not None:
            models = Path(node.models_dir)
            for path in [*models.glob(files), *models.glob(f".servefleet/{files}")]:
                path.unlink()
            shutil.rmtree(models / ".rsync-partial", ignore_errors=True)
            _remove_if_empty(models / ".servefleet")
        if not snapshot:
            continue
        hf = Path(node.hf_cache)
        shutil.rmtree(hf / "hub" / "models--Qwen--Qwen3.6-35B-A3B-FP8", ignore_errors=True)
        for record in hf.glob("servefleet/verified/models--Qwen--Qwen3.6-35B-A3B-FP8@*"):
            record.unlink()
        _remove_if_empty(hf / "servefleet" / "verified")
        _remove_if_empty(hf / "servefleet")


def _remove_if_empty(folder: Path) -> None:
    """The nodes' folders are left as the tests found them (other tests read them)."""
    with contextlib.suppress(OSError):
        folder.rmdir()


@pytest.fixture(scope="module")
def bed(real_engines: FleetHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    installs = ensure_engines(ENGINE_NAMES, lambda _line: None)
    [gguf] = installs["llama.cpp"].models.values()
    [tiny_vllm] = installs["vllm"].models.values()
    repo = tmp_path_factory.mktemp("gguf-repo")
    for name in GGUF_PROFILES:
        (repo / name).symlink_to(gguf)
    with LocalHub(host="0.0.0.0", token=SECRETS["HF_TOKEN"]) as hub:
        hub.add_repo(GGUF_REPO, repo)
        commit = hub.add_repo(VLLM_REPO, Path(tiny_vllm))
        for project in wiped_project(real_engines, DEP, [RTX, SPARK, SPARK2]):
            nodes = {name: node.model_copy(update={
                "hf_endpoint": f"http://{real_engines.nodes[name].host_address}:{hub.port}"})
                for name, node in project.nodes.items() if name in real_engines.nodes}
            forget_staged(project)
            yield Bed(hub, dataclasses.replace(project, nodes={**project.nodes, **nodes}),
                      Path(gguf), hashlib.sha256(Path(gguf).read_bytes()).hexdigest(), commit,
                      Path(tiny_vllm), tmp_path_factory.mktemp("scratch"))
            forget_staged(project)


def placed(bed: Bed, node: str, profile: Profile) -> Project:
    """The project placing ``profile`` as :data:`DEP` on ``node``."""
    stack = bed.project.stack.model_copy(update={"deployments": [
        Deployment(node=node, name=DEP, profile=profile.name, port=PORT)]})
    return dataclasses.replace(bed.project, stack=stack,
                               profiles={**bed.project.profiles, profile.name: profile})


def gguf_profile(bed: Bed, name: str, file: str = GGUF_FILE) -> Profile:
    data = bed.project.profiles["qwen36-q4-llamacpp"].model_dump()
    data["name"] = name
    data["model"]["source"] = {"repo": GGUF_REPO, "file": file, "sha256": bed.gguf_sha}
    data["llamacpp"]["gguf"] = f"/models/{file}"
    data["secret_env"] = ["HF_TOKEN"]  # the test hub serves only with the token
    return Profile.model_validate(data)


class Watcher:
    """Asks the old engine for /health every 0.1 s from a thread, and records the deploy's
    phases as they start, to show the engine served until the stop."""

    def __init__(self, bed: Bed, node: str) -> None:
        self.node = bed.project.nodes[node]
        self.phases: list[tuple[float, str, str]] = []
        self.answers: list[tuple[float, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._done.wait(0.1):
            try:
                status, _ = http_get(self.node, PORT, "/health", timeout=2)
            except OSError:
                status = 0  # refused or timed out: the engine did not answer
            self.answers.append((time.monotonic(), status))

    def progress(self, event: ProgressEvent) -> None:
        self.phases.append((time.monotonic(), event.phase, event.message))

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def started(self, phase: str) -> float:
        return next(t for t, p, _ in self.phases if p == phase)

    def failed_between(self, start: float, end: float) -> list[int]:
        return [s for t, s in self.answers if start <= t <= end and s != 200]

    def messages(self, phase: str) -> list[str]:
        return [m for _, p, m in self.phases if p == phase and m]

    def served_while_staging(self) -> list[int]:
        """Every answer of the old engine from the start of the staging to the stop."""
        start, stop = self.started("weights"), self.started("stop")
        return [s for t, s in self.answers if start <= t <= stop]

    def staged_at(self) -> float:
        """When the staging said its weights were verified."""
        return next(t for t, p, m in self.phases if p == "weights" and m.endswith(": verified"))


class HubDown:
    """The deploy's progress, which takes the hub away (every request answered 503, and
    logged) as the old engine stops, once the weights are staged: the boot must not ask it
    anything. ``since`` is when it went down."""

    def __init__(self, hub: LocalHub, then: Callable[[ProgressEvent], None]) -> None:
        self.hub, self.then = hub, then
        self.since: float | None = None

    def __call__(self, event: ProgressEvent) -> None:
        self.then(event)
        if event.phase == "stop" and self.since is None:
            self.since = time.monotonic()
            self.hub.refusing = True

    def __enter__(self) -> HubDown:
        return self

    def __exit__(self, *exc: object) -> None:
        self.hub.refusing = False

    def asked_after_staging(self) -> list[str]:
        """What the hub was asked after it went down (nothing, for an offline boot)."""
        assert self.since is not None, "the deploy never reached the stop"
        return [f"{r.method} {r.path} -> {r.status}" for r in self.hub.requests_since(self.since)]


def rtx_history(bed: Bed, *files: str) -> None:
    """sim-5090 serving the release that stages the last of ``files``, the others staged
    beside it: what the tests before leave there in file order (then nothing is deployed).
    Run alone or in another order, the releases are deployed one after the other."""
    node = bed.project.nodes[RTX]
    with SshTransport(node) as transport:
        report = staged_models(transport)
    by_file = {item.pin.split()[0]: item for item in report.items}
    last = by_file.get(files[-1])
    if (last is not None and any(u.endswith("*") for u in last.used_by)
            and all(f in by_file for f in files[:-1])
            and http_get(node, PORT, "/health", timeout=5)[0] == 200):
        return
    for file in files:
        result = one(deploy(placed(bed, RTX, gguf_profile(bed, GGUF_PROFILES[file], file)),
                            secrets=SECRETS))
        assert result.status == "deployed", result.failure and result.failure.message


def one(results: list[NodeResult]) -> Any:
    [result] = results
    [deployed] = result.deployments
    return deployed


def container_env(bed: Bed, node: str) -> dict[str, str]:
    with SshTransport(bed.project.nodes[node]) as transport:
        done = transport.run(["sh", "-c", "docker inspect --format '{{json .Config.Env}}' "
                              "$(docker ps -q --filter label=com.docker.compose.project="
                              f"servefleet-{DEP})"])
    return dict(item.split("=", 1) for item in json.loads(done.text()))


def boot_log(bed: Bed, node: str) -> str:
    with SshTransport(bed.project.nodes[node]) as transport:
        done = transport.run(["sh", "-c", "docker logs $(docker ps -q --filter "
                              f"label=com.docker.compose.project=servefleet-{DEP}) 2>&1"])
    return done.text()


# -- llama.cpp: a GGUF file, fetched by curl ---------------------------------------------------
def test_a_gguf_is_staged_while_the_old_engine_serves_then_loaded_offline(bed: Bed) -> None:
    plain = bed.project.profiles["qwen36-q4-llamacpp"]
    assert one(deploy(placed(bed, RTX, plain), secrets=SECRETS)).status == "deployed"
    forget_staged(bed.project, (RTX,), GGUF_FILE, snapshot=False)
    staged = gguf_profile(bed, GGUF_PROFILES[GGUF_FILE])
    # Slow enough that the staging takes seconds: the old engine must answer throughout.
    with bed.hub.faulted(bytes_per_second=max(bed.gguf.stat().st_size // 3, 1)), \
            Watcher(bed, RTX) as watch, HubDown(bed.hub, watch.progress) as down:
        result = one(deploy(placed(bed, RTX, staged), secrets=SECRETS, progress=down))
        assert result.status == "deployed", result.failure and result.failure.message
        # The boot and the gate ran with the hub down; it was asked nothing after staging.
        assert down.asked_after_staging() == []
    phases = [p for _, p, _ in watch.phases]
    assert phases.index("weights") < phases.index("stop")
    staging = watch.started("stop") - watch.started("weights")
    assert staging >= 2.0, staging
    assert watch.staged_at() < watch.started("stop")
    served = watch.served_while_staging()
    assert len(served) >= 10 and set(served) == {200}, served
    shown = watch.messages("weights")
    assert shown[0].startswith("fetching 1 file(s)")
    assert any(" of " in m and "/s" in m for m in shown), shown
    assert shown[-1].endswith(": verified")
    # The engine runs offline and loads the staged file itself (no tiny-twin rewrite).
    assert container_env(bed, RTX)["HF_HUB_OFFLINE"] == "1"
    assert f"-m /models/{GGUF_FILE} kept: servefleet staged it" in boot_log(bed, RTX)
    node = bed.project.nodes[RTX]
    assert node.models_dir is not None
    assert (Path(node.models_dir) / GGUF_FILE).read_bytes() == bed.gguf.read_bytes()


def test_a_corrupt_download_is_refused_and_the_old_engine_keeps_serving(bed: Bed) -> None:
    rtx_history(bed, GGUF_FILE)
    forget_staged(bed.project, (RTX,), f"{V2}*", snapshot=False)
    other = gguf_profile(bed, GGUF_PROFILES[V2], V2)
    with bed.hub.faulted(corrupt_at=4096), Watcher(bed, RTX) as watch:
        result = one(deploy(placed(bed, RTX, other), secrets=SECRETS, progress=watch.progress))
    assert result.status == "failed"
    assert "corrupt download refused" in str(result.failure)
    assert "The old engine still serves" in str(result.failure)
    assert "stop" not in [p for _, p, _ in watch.phases]
    assert watch.failed_between(0, time.monotonic()) == []
    node = bed.project.nodes[RTX]
    assert node.models_dir is not None
    assert not (Path(node.models_dir) / V2).exists()


def test_an_interrupted_download_leaves_the_old_engine_and_the_next_deploy_resumes(
        bed: Bed) -> None:
    rtx_history(bed, GGUF_FILE)
    forget_staged(bed.project, (RTX,), f"{V2}*", snapshot=False)
    other = gguf_profile(bed, GGUF_PROFILES[V2], V2)
    cut = bed.gguf.stat().st_size // 2
    with bed.hub.faulted(cut_after=cut):
        result = one(deploy(placed(bed, RTX, other), secrets=SECRETS))
    assert result.status == "failed"
    assert result.failure is not None
    assert result.failure.message.startswith(
        f"sim-5090: staging {GGUF_REPO}/Qwen3.6-35B-A3B-Q4_K_M-v2.gguf@main sha256:"
        f"{bed.gguf_sha} failed: download stopped (curl exit 18: ")
    assert result.failure.message.endswith(
        f"The old engine still serves; {cut / (1 << 20):.1f} MiB of "
        f"{2 * cut / (1 << 20):.1f} MiB is cached under {bed.project.nodes[RTX].models_dir} "
        "and the next deploy resumes from there")
    assert http_get(bed.project.nodes[RTX], PORT, "/health", timeout=5)[0] == 200
    result = one(deploy(placed(bed, RTX, other), secrets=SECRETS))
    assert result.status == "deployed", result.failure and result.failure.message
    ranges = [r.range for r in bed.hub.requests if r.method == "GET" and
              r.path.endswith("-v2.gguf")]
    assert ranges[-1] == f"bytes={cut}-"
    assert all(r.authorization for r in bed.hub.requests if r.path.endswith(".gguf"))


def test_a_signal_during_staging_stops_the_fetch_and_leaves_the_old_engine_serving(
        bed: Bed) -> None:
    rtx_history(bed, V2)
    forget_staged(bed.project, (RTX,), f"{V3}*", snapshot=False)
    v3 = gguf_profile(bed, GGUF_PROFILES[V3], V3)
    abort = Abort()

    def progress(event: ProgressEvent) -> None:
        if event.phase == "weights" and event.message.startswith("fetching"):
            abort.trip("SIGINT")

    with bed.hub.faulted(bytes_per_second=max(bed.gguf.stat().st_size // 20, 1)):
        result = one(deploy(placed(bed, RTX, v3), secrets=SECRETS, progress=progress,
                            abort=abort))
    # Nothing was stopped: the deployment failed, interrupted, with the old engine serving.
    assert result.status == "failed", result.failure
    assert result.failure is not None and result.failure.failure_class == "interrupted"
    assert result.failure.message == (
        "sim-5090: interrupted by SIGINT while staging the weights: the old engine still "
        "serves, and the next deploy resumes the fetch")
    assert http_get(bed.project.nodes[RTX], PORT, "/health", timeout=5)[0] == 200
    with SshTransport(bed.project.nodes[RTX]) as transport:
        left = transport.run(["docker", "ps", "-aq", "--filter",
                              f"name=servefleetweights-{DEP}"]).text().strip()
    assert left == "", "the staging container was removed"
    # The next deploy fetches the rest and switches.
    assert one(deploy(placed(bed, RTX, v3), secrets=SECRETS)).status == "deployed"


def test_plan_says_where_the_weights_come_from(bed: Bed) -> None:
    rtx_history(bed, GGUF_FILE, V3)
    first = gguf_profile(bed, GGUF_PROFILES[GGUF_FILE])  # staged on this node before
    [item], _ = plan_fleet(placed(bed, RTX, first), [RTX], secrets=SECRETS)
    assert item.action == "update"
    assert f"  weights: stage {GGUF_REPO}/{GGUF_FILE}@main sha256:{bed.gguf_sha} (was " \
        f"{GGUF_REPO}/Qwen3.6-35B-A3B-Q4_K_M-v3.gguf@main sha256:{bed.gguf_sha}), already " \
        "on the node, verified, before the stop" in item.summary_lines()


def test_models_lists_what_is_staged_and_who_uses_it(bed: Bed) -> None:
    rtx_history(bed, GGUF_FILE, V2, V3)
    shown = CliRunner(env={"COLUMNS": "120"}).invoke(
        build_cli(), ["--project", str(bed.project.root), "--stack", "sim", "models", RTX])
    assert shown.exit_code == 0, shown.output
    for name in (GGUF_FILE, V3):
        assert f"file  {name} sha256:{bed.gguf_sha[:12]}…" in shown.output
    with SshTransport(bed.project.nodes[RTX]) as transport:
        report = staged_models(transport)
    by_pin = {item.pin.split()[0]: item for item in report.items}
    assert set(by_pin) >= {GGUF_FILE, V2, V3}
    assert any(u.endswith("*") for u in by_pin[V3].used_by)
    for earlier in (GGUF_FILE, V2):  # releases still on the node: a rollback needs them
        assert by_pin[earlier].used_by
        assert not any(u.endswith("*") for u in by_pin[earlier].used_by)
    assert by_pin[GGUF_FILE].size == bed.gguf.stat().st_size


def test_models_prune_removes_what_no_release_on_the_node_uses(bed: Bed) -> None:
    rtx_history(bed, GGUF_FILE, V2, V3)
    node = bed.project.nodes[RTX]
    assert node.models_dir is not None
    models = Path(node.models_dir)
    with SshTransport(node) as transport:
        # Every release but the current one goes: their weights are needed no more.
        transport.run(["sh", "-c", 'cd "$1/releases" && for r in *; do '
                       '[ "$r" = "$(basename "$(readlink ../current)")" ] || rm -rf "$r"; '
                       'done', "sh", f"{node.base_dir}/{DEP}"])
        report = staged_models(transport, prune=True)
    pruned = {i.pin.split()[0] for i in report.items if i.pruned}
    assert pruned == {GGUF_FILE, V2}
    assert not (models / GGUF_FILE).exists()
    assert (models / V3).is_file()
    assert http_get(node, PORT, "/health", timeout=5)[0] == 200


def test_drift_reports_staged_weights_gone_from_the_node(bed: Bed) -> None:
    rtx_history(bed, V3)
    current = gguf_profile(bed, GGUF_PROFILES[V3], V3)
    project = placed(bed, RTX, current)
    report = check_drift(project, [RTX], secrets=SECRETS)
    assert not [i for i in report.items if i.kind == DriftKind.WEIGHTS], report.items
    node = bed.project.nodes[RTX]
    assert node.models_dir is not None
    staged = Path(node.models_dir) / V3
    kept = staged.with_name("moved-away.gguf")
    staged.rename(kept)
    try:
        report = check_drift(project, [RTX], secrets=SECRETS)
    finally:
        kept.rename(staged)
    [item] = [i for i in report.items if i.kind == DriftKind.WEIGHTS]
    assert item.message.startswith(f"sim-5090/wt: the node holds no {GGUF_REPO}/"
                                   "Qwen3.6-35B-A3B-Q4_K_M-v3.gguf@main sha256:")
    assert item.message.endswith("the engine cannot boot again with the hub offline; deploy "
                                 "again to stage it")


# -- vLLM: a snapshot, fetched by huggingface_hub in the engine's image --------------------------
def snapshot_profile(bed: Bed) -> Profile:
    data = bed.project.profiles["qwen36-fp8"].model_dump()
    data["name"] = "fp8-staged"
    data["model"]["source"] = {"revision": bed.vllm_commit}
    return Profile.model_validate(data)


def online_capable(bed: Bed, profile: Profile, node: str) -> Profile:
    """``profile`` whose engine knows the hub's address (``HF_ENDPOINT``): were it not
    offline, its boot would ask the test hub, whose log would show it."""
    endpoint = bed.project.nodes[node].hf_endpoint
    assert endpoint is not None
    return profile.model_copy(update={"env": {**profile.env, "HF_ENDPOINT": endpoint}})


def test_a_snapshot_is_staged_while_the_old_vllm_serves_and_vllm_boots_from_it_offline(
        bed: Bed) -> None:
    node = bed.project.nodes[SPARK]
    forget_staged(bed.project, (SPARK,))  # staged by a test run before this one, maybe
    # The old engine: the real vLLM, on the tiny twin (no staged weights).
    old = one(deploy(placed(bed, SPARK, bed.project.profiles["qwen36-fp8"]), secrets=SECRETS))
    assert old.status == "deployed", old.failure and old.failure.message
    assert http_get(node, PORT, "/health", timeout=10)[0] == 200
    staged = online_capable(bed, snapshot_profile(bed), SPARK)
    data = staged.model_dump()
    snapshot = (Path(node.hf_cache) / "hub" / "models--Qwen--Qwen3.6-35B-A3B-FP8" /
                "snapshots" / bed.vllm_commit)
    size = sum(f.stat().st_size for f in bed.tiny_vllm.iterdir() if f.is_file())
    # Slow enough that the staging takes seconds: the old engine must answer throughout.
    with bed.hub.faulted(bytes_per_second=max(size // 3, 1)), Watcher(bed, SPARK) as watch, \
            HubDown(bed.hub, watch.progress) as down:
        result = one(deploy(placed(bed, SPARK, staged), secrets=SECRETS, progress=down))
        assert result.status == "deployed", result.failure and result.failure.message
        status, body = http_get(node, PORT, "/v1/models", timeout=30)
        assert status == 200 and b"qwen36" in body
        # Booted, gated and serving with the hub down: asked nothing after the staging.
        assert down.asked_after_staging() == []
    phases = [p for _, p, _ in watch.phases]
    assert phases.index("weights") < phases.index("stop")
    assert watch.staged_at() < watch.started("stop")
    staging = watch.started("stop") - watch.started("weights")
    assert staging >= 2.0, staging
    # Every probe of the old vLLM from the staging's start to the stop: all answered.
    served = watch.served_while_staging()
    assert len(served) >= 10 and set(served) == {200}, served
    shown = watch.messages("weights")
    assert shown[0].startswith("fetching "), shown
    assert shown[-1].endswith(": verified")
    assert (snapshot / "config.json").read_bytes() == (bed.tiny_vllm / "config.json").read_bytes()
    log = boot_log(bed, SPARK)
    assert f"model {VLLM_REPO} kept: servefleet staged it" in log
    assert container_env(bed, SPARK)["HF_HUB_OFFLINE"] == "1"
    # A moved revision in git is another release: the plan changes, nothing moves by itself.
    moved = bed.scratch / "moved-revision"
    shutil.copytree(bed.tiny_vllm, moved, dirs_exist_ok=True)
    (moved / "generation_config.json").write_text('{"temperature": 0.5}\n')
    new_commit = bed.hub.add_repo(VLLM_REPO, moved)
    data["model"]["source"] = {"revision": new_commit}
    repinned = placed(bed, SPARK, Profile.model_validate(data))
    report = check_drift(repinned, [SPARK], secrets=SECRETS)
    assert [i.kind for i in report.items if i.kind == DriftKind.RELEASE] == [DriftKind.RELEASE]


def the_first_spark_holds_the_snapshot(bed: Bed, fleet: FleetHandle) -> None:
    """The first Spark holds the snapshot verified (staged by the test above, or now), and
    the second has neither the deployment nor the snapshot: a test that copies from the
    first runs alone as well as after the others."""
    spark = bed.project.nodes[SPARK]
    record = (Path(spark.hf_cache) / "servefleet" / "verified" /
              f"models--Qwen--Qwen3.6-35B-A3B-FP8@{bed.vllm_commit}.json")
    if not record.is_file():
        first = one(deploy(placed(bed, SPARK, snapshot_profile(bed)), secrets=SECRETS))
        assert first.status == "deployed", first.failure and first.failure.message
    assert record.is_file()
    fleet.remove_deployment(bed.project, DEP, [SPARK2])
    forget_staged(bed.project, (SPARK2,))


def test_the_second_spark_copies_the_snapshot_from_the_first_over_the_fast_link(
        bed: Bed, real_engines: FleetHandle) -> None:
    the_first_spark_holds_the_snapshot(bed, real_engines)
    staged = snapshot_profile(bed)
    [item], errors = plan_fleet(placed(bed, SPARK2, staged), [SPARK2], secrets=SECRETS)
    assert not errors
    assert item.weights == f"{VLLM_REPO}@{bed.vllm_commit}"
    assert item.weights_source is not None and item.weights_source.startswith(
        f"copied from {SPARK} over the fast link (")
    assert f"GiB free in {bed.project.nodes[SPARK2].hf_cache})" in item.weights_source
    before = len(bed.hub.requests)
    with Watcher(bed, SPARK2) as watch:
        result = one(deploy(placed(bed, SPARK2, staged), secrets=SECRETS,
                            progress=watch.progress))
    assert result.status == "deployed", result.failure and result.failure.message
    shown = watch.messages("weights")
    assert shown[0].startswith("copying "), shown
    assert f"from {SPARK} over the fast link" in shown[0]
    assert shown[1].startswith(f"copied from {SPARK} in ")
    assert shown[-1].endswith("already staged and verified")
    # Not one byte of the weights came from the hub.
    fetched = [r for r in bed.hub.requests[before:] if "/resolve/" in r.path]
    assert fetched == []
    node = bed.project.nodes[SPARK2]
    snapshot = (Path(node.hf_cache) / "hub" / "models--Qwen--Qwen3.6-35B-A3B-FP8" /
                "snapshots" / bed.vllm_commit)
    assert (snapshot / "config.json").read_bytes() == (bed.tiny_vllm / "config.json").read_bytes()
    assert f"model {VLLM_REPO} kept: servefleet staged it" in boot_log(bed, SPARK2)
    # The one-copy key is gone from the neighbour.
    keys = Path(bed.project.nodes[SPARK].ssh.authorized_keys or "/nonexistent")
    assert NONCE_PREFIX not in keys.read_text()


def test_a_failed_copy_from_the_neighbour_falls_back_to_the_hub(
        bed: Bed, real_engines: FleetHandle) -> None:
    the_first_spark_holds_the_snapshot(bed, real_engines)
    staged = snapshot_profile(bed)
    spark = bed.project.nodes[SPARK]
    # The neighbour's inventory names a keys file its sshd does not read: the one-copy key
    # is written there, so the copy's ssh is refused and the copy fails.
    assert spark.ssh.authorized_keys is not None
    read_by_sshd = Path(spark.ssh.authorized_keys)
    unread = read_by_sshd.with_name("authorized_keys.not-read-by-sshd")
    wrong = spark.model_copy(update={"ssh": spark.ssh.model_copy(
        update={"authorized_keys": str(unread)})})
    project = placed(bed, SPARK2, staged)
    project = dataclasses.replace(project, nodes={**project.nodes, SPARK: wrong})
    since = time.monotonic()
    try:
        with Watcher(bed, SPARK2) as watch:
            result = one(deploy(project, secrets=SECRETS, progress=watch.progress))
        written = unread.read_text() if unread.exists() else None
    finally:
        unread.unlink(missing_ok=True)
    assert result.status == "deployed", result.failure and result.failure.message
    shown = watch.messages("weights")
    assert shown[0].startswith("copying ") and f"from {SPARK} over the fast link" in shown[0]
    assert shown[1].startswith(f"copy from a neighbour failed ({SPARK2}: "), shown
    assert shown[1].endswith("; fetching from the hub instead"), shown
    assert not any(m.startswith("copied from") for m in shown), shown
    assert shown[2].startswith("fetching "), shown
    assert shown[-1].endswith(": verified"), shown
    # The weights came from the hub: every file of the snapshot was fetched.
    fetched = {r.path.rsplit("/", 1)[-1] for r in bed.hub.requests_since(since)
               if r.method == "GET" and f"/resolve/{bed.vllm_commit}/" in r.path
               and r.status == 200}
    assert fetched >= {"config.json", "model.safetensors"}, fetched
    # The key was written (to the file the inventory names) and removed after the failure.
    assert written is not None and NONCE_PREFIX not in written
    assert NONCE_PREFIX not in read_by_sshd.read_text()
    assert f"model {VLLM_REPO} kept: servefleet staged it" in boot_log(bed, SPARK2)


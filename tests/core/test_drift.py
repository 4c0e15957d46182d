"""Drift comparison from plain data: each kind found from a node's facts, with its values.

The desired side is rendered from the shipped reference stack; the "clean" observation is
what a node reports right after a correct deploy of it (built here from the same release),
and each test changes one fact the way the drift would.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import pytest

from servefleet.adapters.drift_collect import collector_script
from servefleet.core.baselines import Baseline
from servefleet.core.drift import (
    DesiredNode,
    DriftKind,
    NodeObservation,
    build_report,
    compare,
    desired_deployment,
    engine_version_matches,
)
from servefleet.core.gpu import ExpectedGpu, ExpectedGpuFacts, parse_probe_json
from servefleet.core.observed import (
    BootSummary,
    ComposeService,
    ObservedContainer,
    ObservedDeployment,
    ObservedEnvValue,
    observed_deployment,
)
from servefleet.core.project import load_project
from servefleet.core.render import RenderedRelease, render_release
from servefleet.core.secrets import secret_digest
from tests.conftest import require_program
from tests.reference_project import REPO_ROOT

PROBE = REPO_ROOT / "tests" / "adapters" / "data" / "h200-probe-nvml.json"
SECRET = "hf_not_a_real_token_1234"
IMAGE_ID = "sha256:" + "1" * 64
OTHER_IMAGE_ID = "sha256:" + "2" * 64
H200 = ExpectedGpuFacts(
    gpus=(ExpectedGpu(name="NVIDIA H200", count=1, memory_gib=140,
                      compute_capability="9.0"),),
    driver_version="580.159", cuda_version="13.0", arch="x86_64",
)


@pytest.fixture(scope="module")
def release() -> RenderedRelease:
    project = load_project(REPO_ROOT, "reference")
    deployment = next(d for d in project.deployments() if d.key == "dgx-spark-2/main")
    return render_release(project, deployment, {"HF_TOKEN": SECRET})


def _baseline(release: RenderedRelease, pool: float = 323_000,
              unit: str = "tokens") -> Baseline:
    """A baseline the health checks recorded of the release's profile."""
    return Baseline(profile=release.profile, profile_identity=release.profile_identity,
                    engine=release.engine, engine_version=release.engine_version,
                    image=release.base_image, kv_pool=pool, unit=unit,
                    recorded_at="2026-11-21T10:00:00Z", release_id=release.release_id,
                    deployment=release.deployment)


_SERVICES: dict[str, ComposeService] = {}


def _service(release: RenderedRelease) -> ComposeService:
    """The engine service as the real Compose merges the release: what the node reader
    asks ``docker compose config`` for on the node."""
    if release.release_id not in _SERVICES:
        compose = require_program("docker-compose")
        with tempfile.TemporaryDirectory() as folder:
            for name, content in release.files.items():
                path = Path(folder) / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
            raw = collector_script.compose_service(
                [compose], folder, "servefleet-main", list(release.compose_files), "engine.env")
        service = observed_deployment("main", {"compose_service": raw}, None).compose_service
        assert service is not None, raw
        _SERVICES[release.release_id] = service
    return _SERVICES[release.release_id]


def _desired(release: RenderedRelease, **changes: object) -> DesiredNode:
    want = desired_deployment(
        node=release.node, deployment=release.deployment, profile=release.profile,
        profile_identity=release.profile_identity, release_id=release.release_id,
        files=release.files, file_hashes=release.file_hashes,
        service=_service(release), secret_names=release.secret_names,
        secrets={"HF_TOKEN": SECRET}, engine=release.engine,
        engine_version=release.engine_version, kv_tolerance=0.05,
        cudagraph_mode="PIECEWISE", kv_baseline=_baseline(release), image_id=IMAGE_ID,
    )
    return DesiredNode(node=release.node, gpu=H200,
                       deployments=(want.model_copy(update=changes),))


def _env(release: RenderedRelease) -> dict[str, ObservedEnvValue]:
    service = _service(release)
    env = {k: ObservedEnvValue(sha256=secret_digest(v), value=v)
           for k, v in service.environment.items()}
    env["HF_TOKEN"] = ObservedEnvValue(sha256=secret_digest(SECRET))
    env["PATH"] = ObservedEnvValue(sha256=secret_digest("/usr/bin:/bin"))  # from the image
    return env


def _clean(release: RenderedRelease) -> NodeObservation:
    service = _service(release)
    container = ObservedContainer(
        id="c" * 64, name="main-engine-1", status="running", restart_count=0,
        command=service.command, env=_env(release),
        labels={**service.labels, "com.docker.compose.project": "main",
                "org.opencontainers.image.version": "24.04"},
        image_ref=service.image, image_id=IMAGE_ID,
        repo_digests=(f"vllm/vllm-openai@{service.image.split('@')[1]}",),  # type: ignore[union-attr]
        ref_image_id=IMAGE_ID,
        image_env={"PATH": secret_digest("/usr/bin:/bin")},
        image_labels={"org.opencontainers.image.version": "24.04"},
        patch_marker_sha256=None, patch_marker_checked=True,
    )
    state = ObservedDeployment(
        name="main", present=True, current_release=release.release_id,
        manifest={"release_id": release.release_id,
                  "files": {p: {"sha256": h} for p, h in release.file_hashes.items()}},
        file_hashes=dict(release.file_hashes),
        release_secret_digests={"HF_TOKEN": secret_digest(SECRET)},
        containers=(container,), engine_container_id=container.id,
        # Its engine passed the gate (the same release, the same start).
        gated_release=release.release_id, gated_started_at=container.started_at,
        boot=BootSummary(outcome="ready", kv_cache_tokens=323_456, cudagraph_mode="PIECEWISE"),
        engine_version="0.21.0", compose_service=_service(release),
    )
    return NodeObservation(node=release.node, gpu=parse_probe_json(PROBE.read_text()),
                           deployments={"main": state})


def _with(observation: NodeObservation, **changes: object) -> NodeObservation:
    state = observation.deployments["main"].model_copy(update=changes)
    return observation.model_copy(update={"deployments": {"main": state}})


def _with_container(observation: NodeObservation, **changes: object) -> NodeObservation:
    container = observation.deployments["main"].engine_container
    assert container is not None
    return _with(observation, containers=(container.model_copy(update=changes),))


def test_a_node_that_matches_has_no_items(release: RenderedRelease) -> None:
    items = compare(_desired(release), _clean(release))
    assert items == []
    assert build_report({"dgx-spark-2": items}).exit_code == 0


def test_release_differs(release: RenderedRelease) -> None:
    observed = _with(_clean(release), current_release="0123456789ab")
    items = compare(_desired(release), observed)
    kinds = [i.kind for i in items]
    assert DriftKind.RELEASE in kinds
    item = next(i for i in items if i.kind is DriftKind.RELEASE)
    assert (item.expected, item.observed) == (release.release_id, "0123456789ab")


def test_hand_edited_compose_file(release: RenderedRelease) -> None:
    edited = hashlib.sha256(release.files["compose.yaml"] + b"# edited\n").hexdigest()
    observed = _with(_clean(release), file_hashes={**release.file_hashes,
                                                   "compose.yaml": edited})
    [item] = compare(_desired(release), observed)
    assert item.kind is DriftKind.FILE_HASH
    assert item.subject == "compose.yaml"
    assert (item.expected, item.observed) == (release.file_hashes["compose.yaml"], edited)


def test_file_hash_against_the_manifest_when_the_release_is_another(
        release: RenderedRelease) -> None:
    hashes = {**release.file_hashes, ".env": "0" * 64}
    observed = _with(_clean(release), current_release="0123456789ab", file_hashes=hashes)
    items = compare(_desired(release), observed)
    assert {i.kind for i in items} == {DriftKind.RELEASE, DriftKind.FILE_HASH}
    [item] = [i for i in items if i.kind is DriftKind.FILE_HASH]
    assert (item.subject, item.observed) == (".env", "0" * 64)


def test_container_missing(release: RenderedRelease) -> None:
    [item] = compare(_desired(release), _with(_clean(release), containers=(),
                                                        engine_container_id=None))
    assert item.kind is DriftKind.CONTAINER_MISSING


def test_container_stopped(release: RenderedRelease) -> None:
    observed = _with_container(_clean(release), status="exited", exit_code=137)
    [item] = compare(_desired(release), observed)
    assert item.kind is DriftKind.CONTAINER_STOPPED
    assert item.observed == "exited (exit 137)"


def test_container_restarting_and_restart_count(release: RenderedRelease) -> None:
    looping = _with_container(_clean(release), status="restarting", restart_count=4)
    [item] = compare(_desired(release), looping)
    assert item.kind is DriftKind.CONTAINER_RESTARTING
    assert item.observed == "restarting (4 restarts)"
    restarted = _with_container(_clean(release), restart_count=2)
    [item] = compare(_desired(release), restarted)
    assert (item.kind, item.expected, item.observed) == (DriftKind.CONTAINER_RESTARTING, 0, 2)


def test_command_differs(release: RenderedRelease) -> None:
    container = _clean(release).deployments["main"].engine_container
    assert container is not None and container.command is not None
    argv = [a if a != "32" else "64" for a in container.command]
    [item] = compare(_desired(release), _with_container(_clean(release), command=tuple(argv)))
    assert item.kind is DriftKind.COMMAND
    assert item.observed == argv
    assert "added 64" in item.message and "missing 32" in item.message


def test_env_changed_added_and_secret(release: RenderedRelease) -> None:
    env = dict(_env(release))
    name = next(iter(_service(release).environment))
    env[name] = ObservedEnvValue(sha256=secret_digest("other"), value="other")
    env["HF_TOKEN"] = ObservedEnvValue(sha256=secret_digest("hf_rotated_by_hand"))
    env["DEBUG_BY_HAND"] = ObservedEnvValue(sha256=secret_digest("1"))
    items = compare(_desired(release), _with_container(_clean(release), env=env))
    assert [i.kind for i in items] == [DriftKind.ENV] * 3
    by_subject = {i.subject: i for i in items}
    assert by_subject[name].observed == "other"
    assert by_subject["HF_TOKEN"].expected == "(secret)"
    assert by_subject["DEBUG_BY_HAND"].expected is None
    text = json.dumps([i.model_dump(mode="json") for i in items])
    assert SECRET not in text and "hf_rotated_by_hand" not in text


def test_secret_compared_with_the_release_env_file_when_git_has_no_value(
        release: RenderedRelease) -> None:
    desired = _desired(release, secret_env={"HF_TOKEN": None})
    env = {**_env(release), "HF_TOKEN": ObservedEnvValue(sha256=secret_digest("x" * 8))}
    [item] = compare(desired, _with_container(_clean(release), env=env))
    assert (item.kind, item.subject) == (DriftKind.ENV, "HF_TOKEN")
    assert "engine.env" in item.message


def test_labels_changed_and_added(release: RenderedRelease) -> None:
    container = _clean(release).deployments["main"].engine_container
    assert container is not None
    labels = {**container.labels, "io.servefleet.profile": "by-hand", "owner": "bob"}
    items = compare(_desired(release), _with_container(_clean(release), labels=labels))
    assert [i.kind for i in items] == [DriftKind.LABELS, DriftKind.LABELS]
    by_subject = {i.subject: i for i in items}
    assert by_subject["io.servefleet.profile"].observed == "by-hand"
    assert (by_subject["owner"].expected, by_subject["owner"].observed) == (None, "bob")


def test_image_id_differs_from_the_recorded_one(release: RenderedRelease) -> None:
    observed = _with_container(_clean(release), image_id=OTHER_IMAGE_ID,
                               ref_image_id=OTHER_IMAGE_ID)
    [item] = compare(_desired(release), observed)
    assert (item.kind, item.expected, item.observed) == (DriftKind.IMAGE_DIGEST, IMAGE_ID,
                                                         OTHER_IMAGE_ID)


def test_repo_digest_differs_from_the_pin(release: RenderedRelease) -> None:
    desired = _desired(release)
    desired = desired.model_copy(update={"deployments": (desired.deployments[0].model_copy(
        update={"image": desired.deployments[0].image.model_copy(update={"image_id": None})}),)})
    moved = ("vllm/vllm-openai@sha256:" + "9" * 64,)
    [item] = compare(desired, _with_container(_clean(release), repo_digests=moved))
    assert item.kind is DriftKind.IMAGE_DIGEST and item.subject == "repo_digest"
    assert item.observed == list(moved)


def test_tag_moved_under_the_running_container(release: RenderedRelease) -> None:
    [item] = compare(_desired(release),
                     _with_container(_clean(release), ref_image_id=OTHER_IMAGE_ID))
    assert (item.kind, item.subject) == (DriftKind.IMAGE_DIGEST, "image_ref")
    assert (item.expected, item.observed) == (IMAGE_ID, OTHER_IMAGE_ID)


def test_patch_marker_missing_present_or_different(release: RenderedRelease) -> None:
    marker = "a" * 64
    [item] = compare(_desired(release, patch_marker_sha256=marker), _clean(release))
    assert (item.kind, item.expected, item.observed) == (DriftKind.PATCH_SET, marker, None)
    [item] = compare(_desired(release),
                     _with_container(_clean(release), patch_marker_sha256="b" * 64))
    assert (item.kind, item.expected, item.observed) == (DriftKind.PATCH_SET, None, "b" * 64)
    # A stopped container cannot be looked into: no patch-set item then.
    unchecked = _with_container(_clean(release), patch_marker_checked=False)
    assert compare(_desired(release, patch_marker_sha256=marker), unchecked) == []


def test_driver_cuda_and_gpu_from_the_probe(release: RenderedRelease) -> None:
    desired = _desired(release).model_copy(update={"gpu": H200.model_copy(update={
        "driver_version": "570.86", "cuda_version": "12.8",
        "gpus": (ExpectedGpu(name="NVIDIA H200", count=2, memory_gib=140,
                             compute_capability="9.0"),)})})
    items = compare(desired, _clean(release))
    by_kind = {i.kind: i for i in items}
    assert (by_kind[DriftKind.DRIVER].expected, by_kind[DriftKind.DRIVER].observed) == \
        ("570.86", "580.159.04")
    assert (by_kind[DriftKind.CUDA].expected, by_kind[DriftKind.CUDA].observed) == \
        ("12.8", "13.0")
    assert (by_kind[DriftKind.GPU].expected, by_kind[DriftKind.GPU].observed) == ("2", "1")
    assert all(i.deployment is None for i in items)


def test_engine_version(release: RenderedRelease) -> None:
    [item] = compare(_desired(release), _with(_clean(release), engine_version="0.22.1"))
    assert (item.kind, item.expected, item.observed) == (DriftKind.ENGINE_VERSION, "0.21.0",
                                                         "0.22.1")
    assert engine_version_matches("0.19.1rc1.dev328", "0.19.1rc1.dev328+g18013df6a")
    assert engine_version_matches("b8680", "b8680-1a2b3c4")
    assert not engine_version_matches("b8680", "b8681-1a2b3c4")
    assert not engine_version_matches("0.21.0", "0.21.01")


def test_kv_pool_beyond_tolerance(release: RenderedRelease) -> None:
    boot = BootSummary(outcome="ready", kv_cache_tokens=174_000, cudagraph_mode="PIECEWISE")
    [item] = compare(_desired(release), _with(_clean(release), boot=boot))
    assert (item.kind, item.expected, item.observed) == (DriftKind.KV_POOL, 323_000, 174_000)
    assert item.message.endswith(
        "the latest boot's KV pool is 174,000 tokens, the baseline (.servefleet-baselines.json, "
        "recorded 2026-11-21T10:00:00Z) is 323,000 (-46.1%, tolerance ±5%)")
    within = boot.model_copy(update={"kv_cache_tokens": 330_000})  # +2.2 %
    assert compare(_desired(release), _with(_clean(release), boot=within)) == []
    # No baseline (none recorded yet, or one of another version of the profile): no check.
    assert compare(_desired(release, kv_baseline=None), _with(_clean(release), boot=boot)) == []


def test_kv_pool_in_mib_for_llamacpp(release: RenderedRelease) -> None:
    baseline = _baseline(release, pool=544.0, unit="MiB")
    shrunk = BootSummary(outcome="ready", kv_cache_mib=272.0, cudagraph_mode="PIECEWISE")
    [item] = compare(_desired(release, kv_baseline=baseline), _with(_clean(release), boot=shrunk))
    assert (item.kind, item.expected, item.observed) == (DriftKind.KV_POOL, 544.0, 272.0)
    assert "272.0 MiB" in item.message
    same = shrunk.model_copy(update={"kv_cache_mib": 540.0})
    assert compare(_desired(release, kv_baseline=baseline), _with(_clean(release), boot=same)) == []


def test_cudagraph_mode(release: RenderedRelease) -> None:
    boot = BootSummary(outcome="ready", kv_cache_tokens=323_000,
                       cudagraph_mode="FULL_AND_PIECEWISE")
    [item] = compare(_desired(release), _with(_clean(release), boot=boot))
    assert (item.kind, item.expected, item.observed) == (DriftKind.CUDAGRAPH_MODE, "PIECEWISE",
                                                         "FULL_AND_PIECEWISE")


def test_unreachable_is_the_only_item_and_an_error(release: RenderedRelease) -> None:
    observed = NodeObservation(node=release.node, unreachable="connection refused")
    [item] = compare(_desired(release), observed)
    assert item.kind is DriftKind.UNREACHABLE
    report = build_report({"a": [item], "b": []})
    assert (report.exit_code, report.nodes["b"].status) == (1, "ok")


def test_drift_exits_2_and_error_wins(release: RenderedRelease) -> None:
    drifted = compare(_desired(release), _with(_clean(release), engine_version="0.22.1"))
    assert build_report({"a": drifted}).exit_code == 2
    assert build_report({"a": drifted}, errors=["bad stack file"]).exit_code == 1
    data = json.loads(build_report({"a": drifted}).to_json())
    assert data["status"] == "drift"
    assert data["nodes"]["a"]["items"][0]["kind"] == "engine-version"


def test_a_failed_compose_config_is_said_and_its_checks_skipped(
        release: RenderedRelease) -> None:
    env = dict(_env(release))
    env["DEBUG_BY_HAND"] = ObservedEnvValue(sha256=secret_digest("1"))
    container = _clean(release).deployments["main"].engine_container
    assert container is not None
    observed = _with(_with_container(_clean(release), env=env,
                                     labels={**container.labels, "owner": "bob"}),
                     compose_service=None, compose_error="yaml: line 3: did not find key")
    unknown = _desired(release, service_known=False, command=None, env={}, labels={})
    items = compare(unknown, observed)
    assert [(i.kind, i.subject) for i in items] == [(DriftKind.ERROR, "compose")], items
    [item] = items
    assert (item.kind, item.subject) == (DriftKind.ERROR, "compose")
    assert "did not find key" in item.message and "not compared" in item.message


def test_an_engine_without_a_matching_gate_mark_is_ungated(release: RenderedRelease) -> None:
    started = "2026-11-24T10:00:03.123456789Z"
    clean = _with_container(_clean(release), started_at=started)
    gated = _with(clean, gated_started_at=started)
    assert compare(_desired(release), gated) == []
    # The folder is gone, so no gate mark was read: not judged.
    gone = _with(clean, present=False, gated_release=None, gated_started_at=None)
    assert DriftKind.UNGATED_ENGINE not in {i.kind for i in compare(_desired(release), gone)}
    for (mark, mark_started), why in (((None, None), "no passed health gate"),
                                      (("0123456789ab", started), "0123456789ab"),
                                      ((release.release_id, "2026-11-24T09:00:00Z"),
                                       "started again")):
        [item] = compare(_desired(release), _with(clean, gated_release=mark,
                                                  gated_started_at=mark_started))
        assert item.kind is DriftKind.UNGATED_ENGINE
        assert why in item.message and "run servefleet deploy" in item.message


def test_staged_weights_gone_from_the_cache_name_the_revisions_it_holds(
        release: RenderedRelease) -> None:
    pin = "Qwen/Qwen3.6-35B-A3B-FP8@" + "a" * 40
    clean = _clean(release)
    manifest = {**(clean.deployments["main"].manifest or {}), "weights": {"pin": pin}}
    held = _with(clean, manifest=manifest,
                 weights={"present": True, "verified": True, "revisions": ["a" * 40]})
    assert compare(_desired(release), held) == []
    moved = _with(clean, manifest=manifest,
                  weights={"present": False, "verified": False, "revisions": ["b" * 40]})
    [item] = [i for i in compare(_desired(release), moved) if i.kind is DriftKind.WEIGHTS]
    assert (item.expected, item.observed) == (pin, "b" * 40)
    assert item.message == (
        f"dgx-spark-2/main: the node holds no {pin} (the cache holds bbbbbbbbbbbb): the "
        "engine cannot boot again with the hub offline; deploy again to stage it")
    unverified = _with(clean, manifest=manifest,
                       weights={"present": True, "verified": False, "revisions": ["a" * 40]})
    [item] = [i for i in compare(_desired(release), unverified)
              if i.kind is DriftKind.WEIGHTS]
    assert item.observed == "unverified"

"""The plan's engine-terms line for a changed vLLM deployment, from the pinned config, and
calibrated on the node's own KV baselines when it has some."""

from __future__ import annotations

import dataclasses
import json

import pytest

from servefleet.core.baselines import Baseline, BaselineBook
from servefleet.core.kvplan.preview import (
    calibration_from_book,
    engine_preview,
    plan_item_preview,
)
from servefleet.core.models.inventory import SimSettings
from servefleet.core.plan import PlanItem
from servefleet.core.project import Project, load_project, profile_identity
from tests.reference_project import REPO_ROOT


@pytest.fixture(scope="module")
def shipped() -> Project:
    return load_project(REPO_ROOT, "reference")


def preview(project: Project, old: str | None, new: str, node: str) -> str | None:
    return engine_preview(project.root / "profiles",
                          project.profiles[old] if old else None, project.profiles[new],
                          project.nodes[node])


def test_mtp_on_says_pool_graphs_and_concurrency(shipped: Project) -> None:
    assert preview(shipped, "qwen36-fp8", "qwen36-fp8-mtp", "dgx-spark-1") == (
        "MTP on: KV pool ≈ 1.08M tokens (−20%; blocks −14%), CUDA graphs FULL_AND_PIECEWISE → "
        "PIECEWISE (FlashInfer off SM100), concurrency at 131,072 ≈ 8.2× (modelled cold)")


def test_mtp_off_and_a_new_deployment(shipped: Project) -> None:
    assert preview(shipped, "qwen36-fp8-mtp", "qwen36-fp8", "dgx-spark-1") == (
        "MTP off: KV pool ≈ 1.35M tokens (+25%; blocks +16%), CUDA graphs PIECEWISE → "
        "FULL_AND_PIECEWISE, concurrency at 131,072 ≈ 10.3× (modelled cold)")
    assert preview(shipped, None, "qwen36-fp8", "dgx-spark-1") == (
        "new deployment: KV pool ≈ 1.35M tokens, CUDA graphs FULL_AND_PIECEWISE, "
        "concurrency at 131,072 ≈ 10.3× (modelled cold)")


def test_profiles_without_a_pinned_config_and_llamacpp(shipped: Project) -> None:
    assert preview(shipped, None, "qwen36-w8a16", "dgx-spark-1") == (
        "new deployment: KV pool not predicted (the profile pins no model config: "
        "model.config)")
    assert preview(shipped, None, "qwen36-q4-llamacpp", "rtx5090") is None


# -- calibration on the node's own baselines ------------------------------------------------
def baseline(project: Project, name: str, tokens: int, *, release: str = "20261120-fp8",
             identity: str | None = None, at: str = "2026-11-20T10:00:00Z") -> Baseline:
    profile = project.profiles[name]
    return Baseline(profile=name, profile_identity=identity or profile_identity(profile),
                    engine="vllm", engine_version=profile.engine_version,
                    image=profile.image.pinned, kv_pool=tokens, unit="tokens",
                    recorded_at=at, release_id=release, deployment="nomtp")


def book(*baselines: Baseline) -> BaselineBook:
    return BaselineBook(baselines={b.profile: b for b in baselines})


def test_a_measured_boot_calibrates_the_preview_and_is_named(shipped: Project) -> None:
    node = shipped.nodes["dgx-spark-1"]
    fp8, mtp = shipped.profiles["qwen36-fp8"], shipped.profiles["qwen36-fp8-mtp"]
    measured = book(baseline(shipped, "qwen36-fp8", 1_500_000))
    calibration = calibration_from_book(measured, shipped.profiles, mtp, node)
    assert calibration is not None and calibration.kv_cache_tokens == 1_500_000
    line = engine_preview(shipped.root / "profiles", fp8, mtp, node, calibration)
    assert line is not None and line.startswith("MTP on: KV pool ≈ ")
    assert line.endswith("(calibrated on dgx-spark-1 release 20261120-fp8)")
    # Calibrated on its own boot, a profile predicts the pool it measured (to a block).
    own = calibration_from_book(measured, shipped.profiles, fp8, node)
    same = engine_preview(shipped.root / "profiles", None, fp8, node, own)
    assert same is not None and same.startswith("new deployment: KV pool ≈ 1.50M tokens")


def test_the_profiles_own_baseline_wins_then_the_newest(shipped: Project) -> None:
    node = shipped.nodes["dgx-spark-1"]
    mtp = shipped.profiles["qwen36-fp8-mtp"]
    measured = book(baseline(shipped, "qwen36-fp8", 1_500_000, at="2026-11-21T00:00:00Z"),
                    baseline(shipped, "qwen36-fp8-mtp", 1_200_000, release="20261101-mtp",
                             at="2026-11-01T00:00:00Z"))
    found = calibration_from_book(measured, shipped.profiles, mtp, node)
    assert found is not None and found.source == "dgx-spark-1 release 20261101-mtp"


def test_no_calibration_from_a_changed_profile_or_a_simulated_node(shipped: Project) -> None:
    node = shipped.nodes["dgx-spark-1"]
    mtp = shipped.profiles["qwen36-fp8-mtp"]
    stale = book(baseline(shipped, "qwen36-fp8", 1_500_000, identity="0" * 64))
    assert calibration_from_book(stale, shipped.profiles, mtp, node) is None
    fresh = book(baseline(shipped, "qwen36-fp8", 1_500_000))
    simulated = node.model_copy(update={"sim": SimSettings(control_dir="/tmp/sim-control")})
    assert calibration_from_book(fresh, shipped.profiles, mtp, simulated) is None
    assert calibration_from_book(None, shipped.profiles, mtp, node) is None


def test_plan_item_preview_reads_the_observed_baselines(shipped: Project) -> None:
    item = PlanItem(node="dgx-spark-1", deployment="main", action="update",
                    release_id="new", current_release="old", profile="qwen36-fp8-mtp",
                    previous_profile="qwen36-fp8")
    assert plan_item_preview(shipped, item) == preview(
        shipped, "qwen36-fp8", "qwen36-fp8-mtp", "dgx-spark-1")
    data = json.loads(book(baseline(shipped, "qwen36-fp8", 1_500_000)).to_text())
    calibrated = plan_item_preview(shipped, dataclasses.replace(item, node_baselines=data))
    assert calibrated is not None
    assert calibrated.endswith("(calibrated on dgx-spark-1 release 20261120-fp8)")
    unchanged = dataclasses.replace(item, action="unchanged")
    assert plan_item_preview(shipped, unchanged) is None

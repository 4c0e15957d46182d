"""The plan's engine-terms line for a changed vLLM deployment, from the pinned config."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.kvplan.preview import engine_preview
from servefleet.core.project import Project, load_project

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def shipped() -> Project:
    return load_project(REPO_ROOT, "reference")


def preview(project: Project, old: str | None, new: str, node: str) -> str | None:
    return engine_preview(project.root / "profiles",
                          project.profiles[old] if old else None, project.profiles[new],
                          project.nodes[node])


def test_mtp_on_says_pool_graphs_and_concurrency(shipped: Project) -> None:
    assert preview(shipped, "qwen36-fp8", "qwen36-fp8-mtp", "dgx-spark-1") == (
        "MTP on: KV pool ≈ 1.34M tokens (−20%), CUDA graphs FULL_AND_PIECEWISE → PIECEWISE "
        "(FlashInfer off SM100), concurrency at 131,072 ≈ 10.2× (estimated)")


def test_mtp_off_and_a_new_deployment(shipped: Project) -> None:
    assert preview(shipped, "qwen36-fp8-mtp", "qwen36-fp8", "dgx-spark-1") == (
        "MTP off: KV pool ≈ 1.68M tokens (+25%), CUDA graphs PIECEWISE → FULL_AND_PIECEWISE, "
        "concurrency at 131,072 ≈ 12.8× (estimated)")
    assert preview(shipped, None, "qwen36-fp8", "dgx-spark-1") == (
        "new deployment: KV pool ≈ 1.68M tokens, CUDA graphs FULL_AND_PIECEWISE, "
        "concurrency at 131,072 ≈ 12.8× (estimated)")


def test_profiles_without_a_pinned_config_and_llamacpp(shipped: Project) -> None:
    assert preview(shipped, None, "qwen36-w8a16", "dgx-spark-1") == (
        "new deployment: KV pool not predicted (the profile pins no model config: "
        "model.config)")
    assert preview(shipped, None, "qwen36-q4-llamacpp", "rtx5090") is None

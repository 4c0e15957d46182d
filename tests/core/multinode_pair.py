"""A throw-away project with two DGX Sparks and one engine across them (TP=2), built from
the shipped nodes, profiles and templates; tests change one thing and load it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from servefleet.core.project import Project, load_project
from tests.reference_project import REPO_ROOT

FAST_LINKS = {
    "dgx-spark-1": {"interface": "enp1s0f1np1", "address": "192.168.177.11",
                    "ib_hcas": ["rocep1s0f1", "roceP2p1s0f1"]},
    "dgx-spark-2": {"interface": "enp1s0f1np1", "address": "192.168.177.12",
                    "ib_hcas": ["rocep1s0f1", "roceP2p1s0f1"]},
}
PROFILE = {"extends": "qwen36-fp8", "description": "Qwen3.6 FP8 across two Sparks",
           "vllm": {"tensor_parallel_size": 2}}


def build(root: Path, *, entry: dict[str, Any] | None = None,
          node_changes: dict[str, dict[str, Any]] | None = None,
          profile: dict[str, Any] | None = None, extra_config: dict[str, Any] | None = None,
          ) -> Path:
    """Write the project under ``root``; ``entry`` replaces the multiNode entry ``big``."""
    for folder in ("nodes", "profiles", "templates", "healthchecks"):
        if (REPO_ROOT / folder).exists():
            shutil.copytree(REPO_ROOT / folder, root / folder, dirs_exist_ok=True)
    for name, link in FAST_LINKS.items():
        path = root / "nodes" / f"{name}.yaml"
        data = yaml.safe_load(path.read_text())
        data["fast_link"] = dict(link)
        data.update((node_changes or {}).get(name, {}))
        path.write_text(yaml.safe_dump(data))
    (root / "profiles" / "qwen36-fp8-tp2.yaml").write_text(
        yaml.safe_dump(profile if profile is not None else PROFILE))
    config: dict[str, Any] = {
        "servefleet:multiNode": {"big": entry if entry is not None else {
            "profile": "qwen36-fp8-tp2", "nodes": ["dgx-spark-1", "dgx-spark-2"]}},
        **(extra_config or {}),
    }
    (root / "Pulumi.pair.yaml").write_text(yaml.safe_dump({"config": config}))
    return root


def load(root: Path, **changes: Any) -> Project:
    """Build and load the project (stack ``pair``)."""
    return load_project(build(root, **changes), "pair")

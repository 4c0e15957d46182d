"""How long the KV planner takes over a whole stack: 30 profiles of 14 models on the reference
fleet's three nodes, planned cold, against loading the same project alone.

    .venv/bin/python bench/bench_plan_stack.py [--profiles 30] [--runs 5]

Builds a copy of the repository's project in a temporary folder: the 14 models of the real
H200 boots (their ``config.json`` files from ``tests/core/kvplan/data/real-logs``, pinned by
sha256 under ``profiles/models/``), one profile per model and setting (utilization,
sequences, KV dtype) until there are ``--profiles`` of them, placed round-robin on
``dgx-spark-1``, ``dgx-spark-2`` and ``rtx5090``. Then, ``--runs`` times each, it measures

- the baseline: ``load_project`` (YAML, the models' validation, ``extends``);
- planning: a cold prediction of every placed deployment (read and hash the pinned config,
  lay out the pool, model the reserve) — what ``plan`` adds to a node read;
- validation: every rule (``servefleet validate``), the planner's among them;

taking turns within each round, and prints each one's median and its ratio to the
baseline. Exit status 0 unless a
prediction failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from servefleet.core.kvplan.boots import BOOTS  # noqa: E402
from servefleet.core.kvplan.modelconfig import facts_for_profile  # noqa: E402
from servefleet.core.kvplan.predict import predict  # noqa: E402
from servefleet.core.project import Project, load_project  # noqa: E402
from servefleet.core.rules import validate  # noqa: E402

CONFIGS = ROOT / "tests" / "core" / "kvplan" / "data" / "real-logs" / "vllm-0.26.0-h200"
NODES = ("dgx-spark-1", "dgx-spark-2", "rtx5090")
SETTINGS = ({"gpu_memory_utilization": 0.8}, {"gpu_memory_utilization": 0.6, "max_num_seqs": 64},
            {"gpu_memory_utilization": 0.7, "kv_cache_dtype": "fp8"})
"""The settings each model is planned with, one profile each, in turn."""
STACK = "planbench"


def models() -> list[tuple[str, float]]:
    """(model, weights GiB) of every distinct model the H200 boots served."""
    seen: dict[str, float] = {}
    for boot in BOOTS:
        seen.setdefault(boot.model or boot.name, boot.weights_gib)
    return sorted(seen.items())


def build(folder: Path, count: int) -> None:
    """The project copy of the module docstring, with ``count`` profiles."""
    for name in ("nodes", "profiles", "templates", "healthchecks"):
        shutil.copytree(ROOT / name, folder / name)
    shutil.copy(ROOT / "Pulumi.yaml", folder / "Pulumi.yaml")
    placed: dict[str, dict[str, object]] = {node: {} for node in NODES}
    catalogue = models()
    for i in range(count):
        model, weights = catalogue[i % len(catalogue)]
        settings = SETTINGS[(i // len(catalogue)) % len(SETTINGS)]
        data = (CONFIGS / f"{model}.config.json").read_bytes()
        (folder / "profiles" / "models" / f"{model}.config.json").write_bytes(data)
        name = f"pb-{i:02d}-{model}"[:63].rstrip("-.")
        profile = {
            "description": f"{model} for the planning bench", "engine": "vllm",
            "engine_version": "0.26.0",
            "image": {"ref": "vllm/vllm-openai:v0.26.0", "digest": "sha256:" + "ab" * 32},
            "model": {"id": f"example/{model}", "served_name": model,
                      # A GB10 holds any of them; the RTX 5090 only the small ones.
                      "weights_gib": weights,
                      "config": {"file": f"models/{model}.config.json",
                                 "sha256": hashlib.sha256(data).hexdigest()}},
            "vllm": {"max_model_len": 8192, **settings}}
        (folder / "profiles" / f"{name}.yaml").write_text(yaml.safe_dump(profile))
        node = NODES[i % len(NODES)]
        placed[node][f"d{i:02d}"] = {"profile": name, "port": 9000 + i}
    (folder / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(
        {"config": {"servefleet:profiles": placed}}))


def plan_all(project: Project) -> int:
    """Predict every placed deployment's pool, cold; how many."""
    planned = 0
    for dep in project.stack.deployments:
        profile = project.profiles[dep.profile]
        facts = facts_for_profile(project.root / "profiles", profile)
        assert facts is not None, dep.profile
        predict(facts, profile, project.nodes[dep.node])
        planned += 1
    return planned


def timed(runs: int, works: dict[str, Callable[[], object]]) -> dict[str, float]:
    """The median wall time of each of ``works`` over ``runs`` rounds (after one warm-up),
    the works taking turns within a round so that the machine's load falls on each alike."""
    samples: dict[str, list[float]] = {name: [] for name in works}
    for work in works.values():
        work()
    for _ in range(runs):
        for name, work in works.items():
            started = time.perf_counter()
            work()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as tmp:
        folder = Path(tmp)
        build(folder, args.profiles)
        project = load_project(folder, STACK)
        planned = plan_all(project)
        medians = timed(args.runs, {
            "load": lambda: load_project(folder, STACK),
            "plan": lambda: plan_all(project),
            "validate": lambda: validate(project)})
    base, plan, check = medians["load"], medians["plan"], medians["validate"]
    figures = {"profiles": args.profiles, "models": len(models()), "planned": planned,
               "load_s": base, "plan_s": plan, "validate_s": check,
               "load_and_plan_s": base + plan}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{args.profiles} profiles of {len(models())} models on {len(NODES)} nodes, "
          f"median of {args.runs} runs:")
    print(f"  load the project (baseline)       {base * 1000:8.1f} ms")
    print(f"  plan every deployment, cold       {plan * 1000:8.1f} ms  "
          f"({plan / base:.2f}x the baseline; {plan / planned * 1000:.2f} ms a plan)")
    print(f"  validate (every rule)             {check * 1000:8.1f} ms  "
          f"({check / base:.2f}x the baseline)")
    print(f"  load and plan: {(base + plan) * 1000:.1f} ms for {planned} deployments")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

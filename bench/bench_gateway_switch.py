"""Requests through the gateway while ``pulumi up`` switches both Sparks to MTP (needs
root and the simulated fleet; the engines are the real vLLM CPU build).

A copy of this project with the ``sim-gateway`` stack (HAProxy on sim-5090, both
Spark-shaped nodes serving ``qwen36`` without MTP, rolled one node at a time) in a
temporary folder with its own Pulumi state:

1. ``pulumi up``: the gateway, then both engines, each gated;
2. a bounded load (``--workers`` clients, small chat requests one after another) through
   the gateway, alone for ``--baseline-seconds``: the baseline, measured in this run;
3. ``pulumi config set`` of both Sparks to ``qwen36-fp8-mtp`` and ``pulumi up`` with the
   load still running: each node is drained in the gateway, switched, gated, re-admitted;
4. (unless ``--no-failed-gate``) sim-spark-1 switched to a release whose engine refuses to
   start (4M tokens of context in the CPU build's 1 GiB KV cache): the rollout fails and
   restores, ``pulumi up`` exits non-zero, and the load keeps running.

Prints the failed requests of each phase (aim: 0) and the latency added during the
switch: p50 and p99 of the switch window against the baseline's, and their ratio. The
stack is destroyed at the end unless ``--keep``.

    python bench/bench_gateway_switch.py [--workers 2] [--baseline-seconds 30] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pulumi import UP, Stack, pulumi_bin  # noqa: E402

from servefleet.core.project import load_project  # noqa: E402
from servefleet.sim import fleet  # noqa: E402
from servefleet.sim.gateway_load import GatewayLoad, summary  # noqa: E402
from servefleet.sim.spec import fleet_specs  # noqa: E402

STACK = "sim-gateway"
PROJECT_FILES = ("Pulumi.yaml", f"Pulumi.{STACK}.yaml", "__main__.py")
PROJECT_DIRS = ("nodes", "profiles", "templates", "healthchecks", "scenarios", "schemas")
SPARKS = ("sim-spark-1", "sim-spark-2")
FAILING_PROFILE = """\
# A release whose engine refuses to start: 4M tokens of context (YaRN x16) need 2 GiB of
# FP8 KV; the CPU build has 1 GiB.
extends: qwen36-fp8-mtp
description: fails its gate on purpose (bench_gateway_switch)
vllm:
  max_model_len: 4194304
  hf_overrides:
    text_config:
      rope_parameters: {rope_type: yarn, factor: 16.0, original_max_position_embeddings: 262144}
env:
  VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"
"""


def project_copy(root: Path, bin_dir: Path) -> Stack:
    stack = Stack(root, "gateway-project", bin_dir)
    stack.dir.mkdir()
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, stack.dir / name)
    for name in PROJECT_DIRS:
        shutil.copytree(REPO / name, stack.dir / name)
    (stack.dir / "profiles" / "bench-fails-gate.yaml").write_text(FAILING_PROFILE)
    stack.pulumi("stack", "init", STACK)
    stack.pulumi("config", "set", "--secret", "servefleet:hfToken", "hf_bench_placeholder")
    return stack


def show(name: str, seen: dict[str, object], seconds: float) -> None:
    print(f"  {name:<22} {seen['requests']:>5} requests, {seen['failed']} failed, "
          f"p50 {seen['p50_ms']:>7.1f} ms, p99 {seen['p99_ms']:>7.1f} ms  ({seconds:.0f} s)"
          + (f"  failures: {seen['failures']}" if seen["failed"] else ""), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="clients of the load")
    parser.add_argument("--baseline-seconds", type=float, default=30)
    parser.add_argument("--no-failed-gate", action="store_true",
                        help="skip the rollout that fails its gate")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--no-sim-up", action="store_true",
                        help="use the fleet as it runs (its inventory in nodes/sim)")
    args = parser.parse_args()
    if not args.no_sim_up:
        print("bench_gateway_switch: starting the simulated fleet …", flush=True)
        fleet.up(fleet_specs(3), project_dir=REPO)
    bin_dir = pulumi_bin()
    root = Path(tempfile.mkdtemp(prefix="servefleet-bench-gateway-"))
    stack = None
    try:
        stack = project_copy(root, bin_dir)
        took = stack.pulumi(*UP, attempts=2)
        print(f"first pulumi up (gateway and both engines, gated): {took:.0f} s", flush=True)
        project = load_project(stack.dir, STACK)
        gateway = project.stack.gateway
        assert gateway.node is not None
        url = f"http://{project.nodes[gateway.node].address}:{gateway.port}/v1/chat/completions"
        load = GatewayLoad(url, {"model": "qwen36", "max_tokens": 4, "temperature": 0,
                                 "messages": [{"role": "user", "content": "hello"}]},
                           workers=args.workers).start()
        t0 = time.monotonic()
        time.sleep(args.baseline_seconds)
        t1 = time.monotonic()
        for node in SPARKS:
            stack.pulumi("config", "set", f"servefleet:profiles.{node}", "qwen36-fp8-mtp")
        stack.pulumi(*UP)
        t2 = time.monotonic()
        phases = [("baseline", t0, t1), ("switch both to MTP", t1, t2)]
        if not args.no_failed_gate:
            stack.pulumi("config", "set", f"servefleet:profiles.{SPARKS[0]}",
                         "bench-fails-gate")
            try:
                stack.pulumi(*UP)
                print("bench_gateway_switch: the failing release passed its gate?", flush=True)
            except SystemExit as refused:  # Stack.pulumi exits on failure: expected here
                last = str(refused).strip().splitlines()
                print(f"failed gate, as intended: {last[-1][:200] if last else ''}",
                      flush=True)
            t3 = time.monotonic()
            phases.append(("failed gate + restore", t2, t3))
        time.sleep(3)
        load.stop()
        print(f"load through the gateway ({args.workers} clients, chat, 4 tokens each):")
        results = {name: summary(load.between(a, b)) for name, a, b in phases}
        for name, a, b in phases:
            show(name, results[name], b - a)
        base, switch = results["baseline"], results["switch both to MTP"]
        added = float(switch["p99_ms"]) - float(base["p99_ms"])
        ratio = float(switch["p99_ms"]) / max(float(base["p99_ms"]), 1e-9)
        print(f"  added p99 during the switch: {added:+.1f} ms ({ratio:.2f}x the baseline's "
              f"p99); p50 {float(switch['p50_ms']) / max(float(base['p50_ms']), 1e-9):.2f}x")
        failed = sum(int(r["failed"]) for r in results.values())
        print(f"  failed requests in all: {failed} (aim: 0)")
        return 0 if failed == 0 else 1
    finally:
        if stack is not None and not args.keep:
            stack.pulumi("destroy", "--yes", "--skip-preview", "--non-interactive")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

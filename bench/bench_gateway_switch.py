"""Requests through the gateway while ``pulumi up`` switches both Sparks to MTP, beside the
same kind of switch with the drain left out (needs root and the simulated fleet; the
engines are the real vLLM CPU build).

A copy of this project with the ``sim-gateway`` stack (HAProxy on sim-5090, both
Spark-shaped nodes serving ``qwen36`` without MTP, rolled one node at a time) in a
temporary folder with its own Pulumi state:

1. ``pulumi up``: the gateway, then both engines, each gated;
2. a bounded load (``--workers`` clients, small chat requests one after another) through
   the gateway, alone for ``--baseline-seconds``: the baseline, measured in this run;
3. **drained**: ``pulumi config set`` of both Sparks to ``qwen36-fp8-mtp`` and ``pulumi up``
   with the load still running: each node is drained in the gateway, switched, gated,
   re-admitted;
4. **retries only**: both Sparks switched back to ``qwen36-fp8`` by the same rollout with
   the gateway left alone (no drain, no re-admission): only HAProxy's health checks and its
   ``retry-on … redispatch`` keep requests away from the stopped engine. What the drain buys
   is the difference between 3 and 4 (the direction differs: MTP on, then off; each stops
   and boots both engines once);
5. (unless ``--no-failed-gate``) sim-spark-1 switched by ``pulumi up`` to a release whose
   engine refuses to start (4M tokens of context in the CPU build's 1 GiB KV cache): the
   rollout fails and restores, ``pulumi up`` exits non-zero, and the load keeps running.

Every request is counted in exactly one class with the engine that answered
(:mod:`servefleet.sim.gateway_load`); each leg is cut into phases at every drain and
re-admission, and every request lies in one phase (the 3 s after the last leg included).
Prints per phase: requests, failures by class, the engines that answered, p50/p99; for the
drained leg, the requests sent to an engine between its drain and its re-admission (aim
and check: 0). Exits non-zero when a leg did not happen as meant: a drained leg with a
failure or a request to a drained engine, a failing release that passed its gate, or a
phase with no request. The stack is destroyed at the end unless ``--keep``.

    python bench/bench_gateway_switch.py [--workers 2] [--baseline-seconds 30] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pulumi import UP, Stack, pulumi_bin  # noqa: E402

from servefleet.adapters.gateway.follow import GatewayEvent  # noqa: E402
from servefleet.adapters.gateway.runtime_api import api_through  # noqa: E402
from servefleet.adapters.rollout import deploy  # noqa: E402
from servefleet.adapters.runtime.ssh.transport import SshTransport  # noqa: E402
from servefleet.core.project import Project, load_project  # noqa: E402
from servefleet.sim import fleet  # noqa: E402
from servefleet.sim.gateway_load import (  # noqa: E402
    GatewayLoad,
    drain_windows,
    phase_table,
    phases,
    summary,
)
from servefleet.sim.spec import fleet_specs  # noqa: E402

STACK = "sim-gateway"
PROJECT_FILES = ("Pulumi.yaml", f"Pulumi.{STACK}.yaml", "__main__.py")
PROJECT_DIRS = ("nodes", "profiles", "templates", "healthchecks", "scenarios", "schemas")
SPARKS = ("sim-spark-1", "sim-spark-2")
SECRETS = {"HF_TOKEN": "hf_bench_placeholder"}
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
    stack.pulumi("config", "set", "--secret", "servefleet:hfToken", SECRETS["HF_TOKEN"])
    return stack


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="clients of the load")
    parser.add_argument("--baseline-seconds", type=float, default=30)
    parser.add_argument("--no-failed-gate", action="store_true",
                        help="skip the rollout that fails its gate")
    parser.add_argument("--no-retries-only", action="store_true",
                        help="skip the switch without the drain")
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
        return measure(stack, args)
    finally:
        if stack is not None and not args.keep:
            stack.pulumi("destroy", "--yes", "--skip-preview", "--non-interactive")
        shutil.rmtree(root, ignore_errors=True)


def measure(stack: Stack, args: argparse.Namespace) -> int:
    """Steps 2–5 of the module docstring under one load; the exit code."""
    project = load_project(stack.dir, STACK)
    gateway = project.stack.gateway
    assert gateway.node is not None
    url = f"http://{project.nodes[gateway.node].address}:{gateway.port}/v1/chat/completions"
    watcher = RotationWatch(project)
    watcher.start()
    t0 = time.monotonic()  # before the first request: every request lies in a leg
    load = GatewayLoad(url, {"model": "qwen36", "max_tokens": 4, "temperature": 0,
                             "messages": [{"role": "user", "content": "hello"}]},
                       workers=args.workers).start()
    legs: list[tuple[str, float, float]] = []
    problems: list[str] = []
    time.sleep(args.baseline_seconds)
    legs.append(("baseline", t0, time.monotonic()))
    t1 = time.monotonic()
    for node in SPARKS:
        stack.pulumi("config", "set", f"servefleet:profiles.{node}", "qwen36-fp8-mtp")
    stack.pulumi(*UP)
    legs.append(("drained: both to MTP (pulumi up)", t1, time.monotonic()))
    if not args.no_retries_only:
        t2 = time.monotonic()
        for node in SPARKS:
            stack.pulumi("config", "set", f"servefleet:profiles.{node}", "qwen36-fp8")
        results = deploy(load_project(stack.dir, STACK), list(SPARKS), "rolling", SECRETS)
        if not all(r.ok for r in results):
            problems.append(f"the retries-only switch failed: {[r.to_json() for r in results]}")
        legs.append(("retries only: both off MTP", t2, time.monotonic()))
    if not args.no_failed_gate:
        t3 = time.monotonic()
        stack.pulumi("config", "set", f"servefleet:profiles.{SPARKS[0]}", "bench-fails-gate")
        try:
            stack.pulumi(*UP)
            problems.append("the failing release passed its gate")
        except SystemExit as refused:  # Stack.pulumi exits on failure: expected here
            last = str(refused).strip().splitlines()
            print(f"failed gate, as intended: {last[-1][:200] if last else ''}", flush=True)
        legs.append(("failed gate + restore (pulumi up)", t3, time.monotonic()))
    time.sleep(3)
    load.stop()
    end = time.monotonic()  # after the last request: every request lies in a leg
    name, a, _ = legs[-1]
    legs[-1] = (name, a, end)  # the last 3 s belong to the last leg
    events = watcher.stop()
    problems += report(load, events, legs, args.workers)
    for problem in problems:
        print(f"bench_gateway_switch: {problem}", flush=True)
    return 1 if problems else 0


def report(load: GatewayLoad, events: list[GatewayEvent], legs: list[tuple[str, float, float]],
           workers: int) -> list[str]:
    """Print each leg, its phases and its drain windows; what did not happen as meant."""
    problems = []
    print(f"load through the gateway ({workers} clients, chat, 4 tokens each):")
    counted = 0
    results = {}
    for name, a, b in legs:
        seen = summary(load.between(a, b))
        results[name] = seen
        counted += seen["requests"]
        failed = ", ".join(f"{k} {n}" for k, n in seen["by_class"].items() if n) or "none"
        print(f"  {name:<36} {seen['requests']:>5} requests, failed {seen['failed']} "
              f"({failed}), p50 {seen['p50_ms']:>7.1f} ms, p99 {seen['p99_ms']:>7.1f} ms "
              f"({b - a:.0f} s)", flush=True)
        leg_events = [e for e in events if a <= e.at < b]
        for line in phase_table(load, phases(leg_events, a, b)):
            print(f"      {line}")
        if not seen["requests"]:
            problems.append(f"{name}: no request in the leg")
        if name.startswith("drained"):
            if seen["failed"]:
                problems.append(f"{name}: {seen['failed']} failed: {seen['failures']}")
            windows = drain_windows(leg_events)
            if {w.server.split(".")[0] for w in windows} != set(SPARKS) and windows:
                problems.append(f"{name}: drained {[w.server for w in windows]}")
            if not windows:
                problems.append(f"{name}: the gateway never drained an engine")
            for w in windows:
                inside = load.within(w.start, w.end)
                leaked = len(w.leaked(inside))
                print(f"      {w.server} drained from route {w.backend} "
                      f"{w.end - w.start:.1f} s: {len(inside)} requests answered in it, "
                      f"{leaked} through that route by {w.server} (aim: 0)")
                if leaked or not inside:
                    problems.append(f"{name}: {w.server}: {leaked} of {len(inside)} requests "
                                    "reached it while drained")
    if counted != len(load.outcomes):
        problems.append(f"{len(load.outcomes) - counted} requests in no leg")
    base = results["baseline"]
    switch = results["drained: both to MTP (pulumi up)"]
    ratio = float(switch["p99_ms"]) / max(float(base["p99_ms"]), 1e-9)
    print(f"  p99 during the drained switch: {ratio:.2f}x the baseline's; p50 "
          f"{float(switch['p50_ms']) / max(float(base['p50_ms']), 1e-9):.2f}x")
    retries = results.get("retries only: both off MTP")
    if retries is not None:
        print(f"  failed: drained switch {switch['failed']} of {switch['requests']}, "
              f"retries only {retries['failed']} of {retries['requests']}")
    return problems


class RotationWatch:
    """The gateway's drains and re-admissions as this process sees them: HAProxy's runtime
    API polled every 50 ms through one SSH connection to the gateway's node (the rollouts
    run in ``pulumi``'s provider process, whose own timeline this process cannot read)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.events: list[GatewayEvent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[GatewayEvent]:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise RuntimeError(f"watching the gateway failed: {self.error}")
        return list(self.events)

    def _run(self) -> None:
        gateway = self.project.stack.gateway
        assert gateway.node is not None
        try:
            with SshTransport(self.project.nodes[gateway.node]) as transport:
                api = api_through(transport, gateway.admin_port)
                admin: dict[tuple[str, str], str] = {}
                asked_before = time.monotonic()
                while not self._stop.is_set():
                    asked = time.monotonic()
                    states = api.servers()
                    answered = time.monotonic()
                    for state in states:
                        key = (state.backend, state.server)
                        if key in admin and admin[key] != state.admin:
                            # Conservative edges: drained by the time this answer came
                            # back; still drained when the previous question was asked.
                            if state.admin == "drain":
                                self.events.append(GatewayEvent("drained", *key, answered))
                            elif admin[key] == "drain":
                                self.events.append(GatewayEvent("admitting", *key,
                                                                asked_before))
                        admin[key] = state.admin
                    asked_before = asked
                    time.sleep(0.05)
        except BaseException as error:  # said at stop
            self.error = error


if __name__ == "__main__":
    sys.exit(main())

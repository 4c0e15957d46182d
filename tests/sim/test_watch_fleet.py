"""``servefleet watch`` on the simulated fleet (not run outside the fleet job).

- the real vLLM's EngineCore frozen with SIGSTOP while its API still answers: wedged within
  the configured window, and recovered by a gated restart;
- an idle engine and a long prompt never trigger;
- a crash-looping stand-in engine: restarted at most K times, then the last-known-good
  release, then stopped;
- with one node's sshd killed, the other nodes are still watched.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from servefleet.adapters.rollout import deploy
from servefleet.adapters.watch.fleet import FleetWatcher, WatchEvent, watched
from servefleet.core.models import Deployment
from servefleet.core.models.watch import RecoveryPolicy, WatchConfig
from servefleet.core.project import Project, load_project
from servefleet.sim import node_faults
from servefleet.sim.testbed import FleetHandle

pytestmark = [pytest.mark.fleet]

DEP = "wt"
PORT = 8002
SPARK = "sim-spark-1"
SECRETS = {"HF_TOKEN": "hf_watch-test-secret"}
FAST = WatchConfig(interval_seconds=2, wedge_intervals=3, canary_timeout_seconds=5,
                   canary_failures=2,
                   recovery=RecoveryPolicy(max_restarts=2, backoff_seconds=0,
                                           window_seconds=600, uma_free_wait_seconds=60))


def placed(project: Project, profiles: dict[str, str]) -> Project:
    deployments = [Deployment(node=node, name=DEP, profile=profile, port=PORT)
                   for node, profile in profiles.items()]
    return dataclasses.replace(project, stack=project.stack.model_copy(
        update={"deployments": deployments}))


def watcher(stack: Project, actions: list[WatchEvent], config: WatchConfig = FAST,
            nodes: list[str] | None = None) -> FleetWatcher:
    return FleetWatcher(stack, watched(stack, nodes), config, secrets=SECRETS,
                        on_action=actions.append)


def ticks_until(w: FleetWatcher, test: Callable[[list[WatchEvent]], bool],
                limit: int) -> list[list[WatchEvent]]:
    seen = []
    for _ in range(limit):
        events = w.tick()
        seen.append(events)
        if test(events):
            return seen
        time.sleep(w.config.interval_seconds)
    raise AssertionError(f"not reached in {limit} ticks: {[e.to_json() for e in seen[-1]]}")


def audit(fleet: FleetHandle, stack: Project, node: str) -> str:
    return fleet.ssh(node, f"cat {stack.nodes[node].base_dir}/{DEP}/audit.log",
                     check=False).stdout


def wipe(fleet: FleetHandle, project: Project) -> None:
    fleet.remove_deployment(project, DEP, check=False)


def fp8_on_the_spark(fleet: FleetHandle) -> tuple[Project, Project]:
    """The sim project, wiped, and the stack deployed from it with ``qwen36-fp8`` on the
    Spark."""
    project = load_project(fleet.project_dir, "sim")
    wipe(fleet, project)
    stack = placed(project, {SPARK: "qwen36-fp8"})
    [result] = deploy(stack, nodes=[SPARK], secrets=SECRETS)
    assert result.ok, result.to_json()
    return project, stack


def test_sigstopped_engine_core_is_wedged_and_restarted(real_engines: FleetHandle) -> None:
    project, stack = fp8_on_the_spark(real_engines)
    actions: list[WatchEvent] = []
    w = watcher(stack, actions)
    try:
        ticks_until(w, lambda ev: ev[0].state in ("idle", "healthy"), 5)
        # The API process keeps answering /health; only the engine core stops.
        real_engines.ssh(SPARK, "pkill -STOP -f '[E]ngineCore'")
        started = time.monotonic()
        ticks_until(w, lambda ev: ev[0].state == "wedged", FAST.canary_failures + 3)
        # Detected within the canary window (plus one read's slack).
        assert time.monotonic() - started < (FAST.canary_failures + 2) * (
            FAST.interval_seconds + FAST.canary_timeout_seconds + 10)
        w.wait_for_recoveries()
        assert any(a.kind == "action" and a.action == "restart" for a in actions), actions
        ticks_until(w, lambda ev: ev[0].state in ("idle", "healthy"), 10)
        assert "watch-restart" in audit(real_engines, stack, SPARK)
    finally:
        real_engines.ssh(SPARK, "pkill -CONT -f '[E]ngineCore'", check=False)
        w.close()
        wipe(real_engines, project)


def test_idle_and_a_long_prompt_never_trigger(real_engines: FleetHandle) -> None:
    project, stack = fp8_on_the_spark(real_engines)
    node = stack.nodes[SPARK]
    actions: list[WatchEvent] = []
    w = watcher(stack, actions)

    def long_prompt() -> None:
        body = json.dumps({"model": "qwen36", "max_tokens": 64, "temperature": 0,
                           "prompt": "one two three " * 3000}).encode()
        request = urllib.request.Request(f"http://{node.address}:{PORT}/v1/completions",
                                         data=body,
                                         headers={"Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=600) as answer:
            answer.read()

    try:
        states = [e.state for _ in range(2 * FAST.wedge_intervals) for e in w.tick()]
        thread = threading.Thread(target=long_prompt, daemon=True)
        thread.start()
        while thread.is_alive():
            states += [e.state for e in w.tick()]
            time.sleep(FAST.interval_seconds)
        states += [e.state for e in w.tick()]
        assert "wedged" not in states and not actions, (states, actions)
    finally:
        w.close()
        wipe(real_engines, project)


def test_crash_loop_is_restarted_k_times_then_last_good_then_stopped(
        sim_fleet: FleetHandle) -> None:
    project, stack = fp8_on_the_spark(sim_fleet)
    fault = Path(stack.nodes[SPARK].sim.control_dir) / "fault"  # type: ignore[union-attr]
    fault.write_text("crash_after_boot=1\n")
    actions: list[WatchEvent] = []
    w = watcher(stack, actions)
    try:
        sim_fleet.ssh(SPARK, "docker restart $(docker ps -aq --filter "
                      f"label=com.docker.compose.project=servefleet-{DEP}) >/dev/null")
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and not any(
                a.kind == "action" and a.action == "stop_and_alert" for a in actions):
            w.tick()
            w.wait_for_recoveries()
            time.sleep(FAST.interval_seconds)
        done = [a.action for a in actions if a.kind == "action"]
        assert done.count("restart") <= FAST.recovery.max_restarts, done
        assert "restore_last_good" in done and done[-1] == "stop_and_alert", done
        log = audit(sim_fleet, stack, SPARK)
        assert "watch-restore-last-good" in log and "stopped" in log
    finally:
        fault.unlink(missing_ok=True)
        w.close()
        wipe(sim_fleet, project)


def test_killed_sshd_leaves_the_other_nodes_watched(sim_fleet: FleetHandle) -> None:
    project = load_project(sim_fleet.project_dir, "sim")
    wipe(sim_fleet, project)
    nodes = list(sim_fleet.nodes)
    stack = placed(project, {name: project.stack.for_node(name)[0].profile
                             for name in nodes if project.stack.for_node(name)})
    for res in deploy(stack, secrets=SECRETS):
        assert res.ok, res.to_json()
    victim = nodes[0]
    w = watcher(stack, [], FAST.model_copy(update={"canary": False}))
    try:
        w.tick()
        node_faults.stop_sshd(sim_fleet.config.layout, victim)
        started = time.monotonic()
        events = w.tick()
        assert time.monotonic() - started < 60
        by_node = {e.node: e.state for e in events}
        assert by_node[victim] == "unknown"
        assert all(state != "unknown" for node, state in by_node.items() if node != victim)
    finally:
        node_faults.start_sshd(sim_fleet.config.layout, victim)
        w.close()
        wipe(sim_fleet, project)

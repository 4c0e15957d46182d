"""The fault suite: many trials of every fault a rollout can meet, on the simulated fleet
(real sshd, real dockerd, real Compose), judged by what the node serves afterwards.

    sudo .venv/bin/python bench/fault_suite.py --trials 20 [--faults NAME,…] [--nodes NAME,…]
                                               [--json FILE]

Smallest run: ``--trials 1 --faults sigint@upload --nodes fault-spark-1`` (one node started,
one trial).

Each trial deploys a new release (the node's profile with one environment value changed,
so the engine must restart) to deployment ``ft`` while a fault strikes at one phase:

- ``sigint@P``, ``sigterm@P``, ``sighup@P``: the controller process gets the signal (its
  own handlers, as from Ctrl-C, systemd or a closed terminal) when phase P starts;
- ``sigkill@P``: the controller dies at P (nothing runs on its way out);
- ``ssh-cut@P``: every SSH connection of the node is reset 0–0.5 s into P (the
  per-connection sshd processes are killed: a dropped link mid-command);
- ``sshd-down@boot``: the node's sshd dies at boot and comes back 3 s later;
- ``disk-full@switch``: the deployment's file system is full (no inode, no block) at the
  switch; space comes back after the rollout ends;
- ``engine-crash@boot``, ``engine-hang@boot``: the new engine dies at boot (KV OOM) or
  never finishes loading (the stand-in engine's fault file; lifted for the restore).

Judged after the rollout (and, when the controller died or lost the node for good, after
the next ``deploy``, which must repair what it finds): **restored and healthy** = one engine
runs, it is the release ``current`` names, the ``gated`` record names it, ``/health``
answers 200 and no lock is left; **ungated left serving** = an engine runs whose release
the gated record does not name (must be 0); **releases lost** = the release that served
before the trial is gone or changed on disk (must be 0). Trials run on every node of the
fleet at once (each its own controller processes). The engines are the stand-in (boots take
seconds); the real engines' boots are covered by the fleet tests.

The suite starts a fleet of its own (``fault-spark-1``, ``fault-spark-2``: GB10 nodes with
vLLM; ``fault-5090``: llama.cpp; ``--nodes`` starts only those named) under
``/var/lib/servefleet-sim-faults``, in a temporary project folder of its own (a copy of the
profiles and templates, its stack file ``Pulumi.fault-suite.yaml`` and the fleet's
inventory, removed at the end), so the test fleet and its inventory in ``nodes/sim`` are
left alone.

Not part of ``scripts/test``: it takes tens of minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from servefleet.adapters import remote  # noqa: E402
from servefleet.adapters.rollout import ProgressEvent, deploy, plan_fleet  # noqa: E402
from servefleet.core.models import Deployment  # noqa: E402
from servefleet.core.project import Project, load_project  # noqa: E402
from servefleet.sim import fleet, node_faults, testbed  # noqa: E402
from servefleet.sim.spec import GB10, HOST_ARCH, RTX_5090, NodeSpec  # noqa: E402

DEP = "ft"
PORT = 8002
SECRETS = {"HF_TOKEN": "hf_fault-suite-secret-value"}
TRIAL_ENV = "SERVEFLEET_FAULT_TRIAL"
BOOT_DEADLINE = 30
"""Seconds a boot may take in the suite: the stand-in boots in a few, a hang ends here."""
PHASES = ("upload", "pull", "stop", "up", "boot", "switch")
STACK = "fault-suite"
STATE_DIR = Path("/var/lib/servefleet-sim-faults")
SPECS = [
    NodeSpec(name="fault-spark-1", index=41, arch=HOST_ARCH, gpu=GB10, host_memory_gib=128),
    NodeSpec(name="fault-spark-2", index=42, arch=HOST_ARCH, gpu=GB10, host_memory_gib=128),
    NodeSpec(name="fault-5090", index=43, arch=HOST_ARCH, gpu=RTX_5090, host_memory_gib=64),
]
PROFILES = {"fault-spark-1": "qwen36-fp8", "fault-spark-2": "qwen36-fp8",
            "fault-5090": "qwen36-q4-llamacpp"}
PROJECT_DIRS = ("profiles", "templates", "healthchecks")
"""What the suite's own project folder copies from this one."""


@dataclasses.dataclass(frozen=True)
class Fault:
    """One kind of fault at one phase."""

    name: str
    kind: str
    phase: str

    @property
    def kills_controller(self) -> bool:
        return self.kind == "sigkill"


def all_faults() -> dict[str, Fault]:
    faults = [Fault(f"sigint@{p}", "sigint", p) for p in PHASES]
    faults += [Fault(f"sigterm@{p}", "sigterm", p) for p in ("stop", "boot", "switch")]
    faults += [Fault("sighup@boot", "sighup", "boot")]
    faults += [Fault(f"sigkill@{p}", "sigkill", p) for p in ("stop", "up", "boot", "switch")]
    faults += [Fault(f"ssh-cut@{p}", "ssh-cut", p) for p in PHASES]
    faults += [Fault("sshd-down@boot", "sshd-down", "boot"),
               Fault("disk-full@switch", "disk-full", "switch"),
               Fault("engine-crash@boot", "engine-crash", "boot"),
               Fault("engine-hang@boot", "engine-hang", "boot")]
    return {f.name: f for f in faults}


# -- the project a trial deploys -------------------------------------------------------------
def trial_project(project_dir: Path, node: str, trial: int) -> Project:
    """The sim stack with deployment ``ft`` on ``node`` only: the node's own profile with
    ``SERVEFLEET_FAULT_TRIAL=<trial>`` (a new release each trial) and a short boot deadline."""
    project = load_project(project_dir, STACK)
    profile = project.profiles[PROFILES[node]]
    health = profile.health.model_copy(update={"boot_deadline_seconds": BOOT_DEADLINE})
    changed = profile.model_copy(update={"env": {**profile.env, TRIAL_ENV: str(trial)},
                                         "health": health})
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=node, name=DEP, profile=profile.name, port=PORT)]})
    return dataclasses.replace(project, stack=stack,
                               profiles={**project.profiles, profile.name: changed})


# -- one controller run (a child process) ----------------------------------------------------
def controller(project_dir: str, node: str, trial: int, fault_name: str | None,
               out: str, seed: int) -> None:
    """Deploy trial ``trial`` to ``node`` while ``fault_name`` strikes; write the results
    as JSON to ``out``. Runs in a process of its own: signals and SIGKILL hit only it."""
    rng = random.Random(seed)
    config = fleet.FleetConfig(state_dir=STATE_DIR)
    layout = config.layout
    fault = all_faults()[fault_name] if fault_name else None
    project = trial_project(Path(project_dir), node, trial)
    node_model = project.nodes[node]
    control = Path(node_model.sim.control_dir) if node_model.sim else None
    disk = Path(node_model.base_dir) / DEP
    fired = threading.Event()

    def strike(event: ProgressEvent) -> None:
        if fault is None:
            return
        if event.phase == "restore" and control is not None:
            (control / "fault").unlink(missing_ok=True)  # the node itself is fine
        if fired.is_set() or event.phase != fault.phase or event.deployment != DEP:
            return
        fired.set()
        if fault.kind in ("sigint", "sigterm", "sighup", "sigkill"):
            os.kill(os.getpid(), getattr(signal, fault.kind.upper()))
        elif fault.kind == "ssh-cut":
            threading.Timer(rng.uniform(0.0, 0.5), node_faults.cut_ssh_sessions,
                            (layout, node)).start()
        elif fault.kind == "sshd-down":
            node_faults.stop_sshd(layout, node)
            threading.Timer(3.0, node_faults.start_sshd, (layout, node)).start()
        elif fault.kind == "disk-full":
            node_faults.fill_disk(disk)

    results = deploy(project, [node], secrets=SECRETS, progress=strike)
    Path(out).write_text(json.dumps([r.to_json() for r in results]))


def run_controller(project_dir: Path, node: str, trial: int, fault: Fault | None,
                   seed: int) -> tuple[int | None, list[dict[str, Any]] | None, float]:
    """Run :func:`controller` in a fresh process: (exit code, results or None, seconds)."""
    ctx = multiprocessing.get_context("spawn")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = handle.name
    started = time.monotonic()
    process = ctx.Process(target=controller, args=(str(project_dir), node, trial,
                                                   fault.name if fault else None, out, seed))
    process.start()
    process.join(timeout=600)
    if process.is_alive():
        process.kill()
        process.join()
    elapsed = time.monotonic() - started
    text = Path(out).read_text() if Path(out).exists() else ""
    Path(out).unlink(missing_ok=True)
    return process.exitcode, (json.loads(text) if text else None), elapsed


# -- what the node serves --------------------------------------------------------------------
@dataclasses.dataclass
class NodeView:
    running: list[str]
    current: str | None
    gated: str | None
    health: int | None
    locked: bool

    @property
    def healthy(self) -> bool:
        return (len(self.running) == 1 and self.running[0] == self.current == self.gated
                and self.health == 200 and not self.locked)

    @property
    def ungated(self) -> bool:
        return any(r != self.gated for r in self.running)


def view(handle: testbed.FleetHandle, project: Project, node: str) -> NodeView:
    base = Path(project.nodes[node].base_dir)
    folder = base / DEP
    link = folder / "current"
    current = os.readlink(link).rpartition("/")[2] if link.is_symlink() else None
    gated = None
    with contextlib.suppress(OSError):
        for word in (folder / remote.GATED).read_text().split():
            if word.startswith("release="):
                gated = word.partition("=")[2]
    ps = handle.ssh(node, "docker ps --filter label=com.docker.compose.project="
                    f"{remote.compose_project(DEP)} --format "
                    "'{{.Label \"io.servefleet.release\"}}'", check=False)
    running = ps.stdout.split()
    health = None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{project.nodes[node].address}:{PORT}/health",
                         timeout=5) as answer:
            health = answer.status
    except urllib.error.HTTPError as error:
        health = error.code
    except OSError:
        health = None
    return NodeView(running, current, gated, health, (base / remote.LOCK_DIR).exists())


def tree_digest(folder: Path) -> str | None:
    """sha256 over every file's path and bytes under ``folder``; None when it is gone."""
    if not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


# -- trials ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Trial:
    fault: str
    node: str
    healthy: bool
    ungated: bool
    lost: bool
    repaired: bool
    seconds: float
    detail: str


def settle(project_dir: Path, handle: testbed.FleetHandle, node: str, trial: int,
           log: Callable[[str], None]) -> bool:
    """Bring ``node`` to a healthy, gated release of trial ``trial`` (no fault)."""
    for _ in range(3):
        code, results, _ = run_controller(project_dir, node, trial, None, trial)
        project = trial_project(project_dir, node, trial)
        seen = view(handle, project, node)
        if seen.healthy:
            return True
        log(f"{node}: not healthy after a plain deploy (exit {code}): {seen}; "
            f"{json.dumps(results)[:600] if results else 'no result'}")
    return False


def one_trial(project_dir: Path, handle: testbed.FleetHandle, node: str, fault: Fault,
              trial: int, log: Callable[[str], None]) -> Trial:
    project = trial_project(project_dir, node, trial)
    node_model = project.nodes[node]
    before = view(handle, project, node)
    old = before.current
    old_digest = tree_digest(Path(node_model.base_dir) / DEP / "releases" / str(old))
    control = Path(node_model.sim.control_dir) if node_model.sim else None
    if control is not None and fault.kind in ("engine-crash", "engine-hang"):
        control.mkdir(parents=True, exist_ok=True)
        (control / "fault").write_text("kv_oom\n" if fault.kind == "engine-crash"
                                       else "hang_loading\n")
    try:
        code, results, seconds = run_controller(project_dir, node, trial, fault, trial)
    finally:
        if control is not None:
            (control / "fault").unlink(missing_ok=True)
        node_faults.free_disk(Path(node_model.base_dir) / DEP)
        node_faults.start_sshd(handle.config.layout, node)
    status, why = "?", ""
    if results:
        deps = results[0].get("deployments") or []
        status = deps[0]["status"] if deps else results[0].get("status", "?")
        if deps and status not in ("deployed", "rolled_back"):
            failure, restore = deps[0].get("failure") or {}, deps[0].get("restore") or {}
            why = f" [{failure.get('phase')}: {str(failure.get('message'))[:160]}" + (
                f"; restore: {str(restore.get('message'))[:160]}]" if restore else "]")
        elif not deps and results[0].get("error"):
            why = f" [{str(results[0]['error'])[:200]}]"
    after = view(handle, project, node)
    repaired = False
    detail = f"exit {code}, {status}{why}, serving {after.running or '-'}"
    if not after.healthy:
        # The controller died or lost the node: what it left must be visible to the next
        # plan, and the next deploy must repair it.
        items, errors = plan_fleet(project, [node], SECRETS)
        visible = bool(errors) or any(i.changes or i.recovery for i in items)
        detail += f"; left {'visible to plan' if visible else 'INVISIBLE to plan'}"
        run_controller(project_dir, node, trial, None, trial)
        after = view(handle, project, node)
        repaired = True
        if not visible:
            after.running = after.running or ["(invisible)"]
    lost = old is not None and tree_digest(
        Path(node_model.base_dir) / DEP / "releases" / old) != old_digest
    if fault.kills_controller or fault.kind == "sshd-down":
        ok = after.healthy
    else:
        ok = after.healthy and not repaired
    trial_result = Trial(fault.name, node, ok, after.ungated, lost, repaired, seconds, detail)
    log(f"{fault.name:18} {node:12} trial {trial:3}: "
        f"{'ok' if ok else 'NOT RESTORED'}{' UNGATED' if after.ungated else ''}"
        f"{' LOST' if lost else ''} ({seconds:.1f} s; {detail})")
    return trial_result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per fault")
    parser.add_argument("--faults", default="", help="comma-separated names (default: all)")
    parser.add_argument("--nodes", default="",
                        help="comma-separated nodes to start and try (default: all of "
                             f"{', '.join(s.name for s in SPECS)})")
    parser.add_argument("--json", type=Path, default=None, help="write every trial here")
    args = parser.parse_args(argv)
    faults = all_faults()
    unknown = [n for n in args.faults.split(",") if n and n not in faults]
    if unknown:
        parser.error(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(faults)}")
    chosen = [faults[n] for n in args.faults.split(",") if n] or list(faults.values())
    wanted = [n for n in args.nodes.split(",") if n]
    if set(wanted) - set(PROFILES):
        parser.error(f"--nodes: choose among {', '.join(PROFILES)}")
    specs = [s for s in SPECS if s.name in wanted] if wanted else SPECS
    work = Path(tempfile.mkdtemp(prefix="servefleet-fault-suite-"))
    project_dir = suite_project(work / "project", [s.name for s in specs])
    config = fleet.FleetConfig(state_dir=STATE_DIR)
    handle = testbed.acquire(project_dir, config, specs, say=print)
    nodes = [s.name for s in specs]
    lock = threading.Lock()
    trials: list[Trial] = []

    def log(line: str) -> None:
        with lock:
            print(line, flush=True)

    def worker(index: int, node: str) -> None:
        disk = Path(load_project(project_dir, STACK).nodes[node].base_dir) / DEP
        handle.run_standin(node)
        wipe(handle, node, disk)
        node_faults.mount_small_disk(disk)
        try:
            number = index * 100_000
            if not settle(project_dir, handle, node, number, log):
                log(f"{node}: gave up: no healthy start")
                return
            for fault in chosen:
                for _trial in range(index, args.trials, len(nodes)):
                    number += 1
                    result = one_trial(project_dir, handle, node, fault, number, log)
                    with lock:
                        trials.append(result)
                    if not view(handle, trial_project(project_dir, node, number),
                                node).healthy and not settle(project_dir, handle, node,
                                                             number, log):
                        log(f"{node}: gave up after trial {number}: cannot get healthy")
                        return
        except Exception as error:
            log(f"{node}: trials stopped by {type(error).__name__}: {error}")
        finally:
            wipe(handle, node, disk)
            node_faults.unmount_small_disk(disk)
            handle.run_standin(node, ())

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i, n)) for i, n in enumerate(nodes)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        testbed.release(handle, say=print)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{len(trials)} trials on {len(nodes)} nodes in {time.monotonic() - started:.0f} s"
          " (stand-in engines)\n")
    print(table(trials, chosen))
    if args.json is not None:
        args.json.write_text(json.dumps([dataclasses.asdict(t) for t in trials], indent=1))
    bad = [t for t in trials if not t.healthy or t.ungated or t.lost]
    return 1 if bad else 0


def suite_project(folder: Path, nodes: list[str]) -> Path:
    """The suite's own project folder: this project's profiles and templates, and a stack
    file with one deployment per node (the fleet writes its inventory in ``nodes/sim``)."""
    (folder / "nodes").mkdir(parents=True)
    for name in PROJECT_DIRS:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, folder / name)
    (folder / f"Pulumi.{STACK}.yaml").write_text(
        "# The fault suite's own stack (bench/fault_suite.py).\nconfig:\n"
        "  servefleet:profiles:\n" + "".join(f"    {node}: {PROFILES[node]}\n"
                                            for node in nodes))
    return folder


def wipe(handle: testbed.FleetHandle, node: str, disk: Path) -> None:
    handle.ssh(node, "ids=$(docker ps -aq --filter label=com.docker.compose.project="
               f"{remote.compose_project(DEP)}); [ -z \"$ids\" ] || docker rm -f $ids "
               ">/dev/null", check=False)
    if disk.is_dir():
        for entry in disk.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    lock = disk.parent / remote.LOCK_DIR
    if lock.exists():
        shutil.rmtree(lock, ignore_errors=True)


def table(trials: list[Trial], faults: list[Fault]) -> str:
    rows = ["| fault | trials | restored and healthy | ungated left serving | releases lost "
            "| needed the next deploy | median s |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for fault in faults:
        mine = [t for t in trials if t.fault == fault.name]
        if not mine:
            continue
        ok = sum(t.healthy for t in mine)
        rows.append(f"| `{fault.name}` | {len(mine)} | {ok} ({100 * ok / len(mine):.0f}%) | "
                    f"{sum(t.ungated for t in mine)} | {sum(t.lost for t in mine)} | "
                    f"{sum(t.repaired for t in mine)} | "
                    f"{statistics.median(t.seconds for t in mine):.1f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""What servefleet adds to a no-op ``pulumi up`` (needs root and the simulated fleet).

Two Pulumi projects, each in a temporary folder with a state folder of its own (local file
backend), timed in the same run with the same CLI and flags (``pulumi up --yes
--skip-preview``):

- **sim stack**: a copy of this project with the ``sim`` stack, brought up once for real
  (three nodes deployed and health-gated), then ``pulumi up`` again with nothing to do: the
  program loads the inventory and profiles and renders every release, the dynamic-provider
  host starts, and each ``NodeDeployment``'s ``diff`` finds no change (no SSH at all);
- **empty program** (the baseline): a Python program that declares nothing.

Prints the median of each and the difference (aim: under 2 s). The sim stack is destroyed
at the end (its engines stopped).

    python bench/bench_pulumi.py [--runs 5] [--keep] [--project DIR] [--no-sim-up]

Smallest run: ``--runs 1`` (with ``--no-sim-up`` where a test session's fleet runs already).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from servefleet.sim import fleet  # noqa: E402
from servefleet.sim.spec import fleet_specs  # noqa: E402

PROJECT_FILES = ("Pulumi.yaml", "Pulumi.sim.yaml", "__main__.py")
PROJECT_DIRS = ("nodes", "profiles", "templates", "healthchecks")
EMPTY_PULUMI_YAML = "name: empty\nruntime:\n  name: python\n  options:\n    toolchain: pip\n"
EMPTY_PROGRAM = '"""Declares nothing: the baseline of a Python Pulumi program."""\nimport pulumi\n'
UP = ("up", "--yes", "--skip-preview", "--non-interactive")
RETRY_PAUSE_S = 30


def pulumi_bin() -> Path:
    """The CLI's bin dir from scripts/ensure-pulumi (builds it the first time)."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "ensure-pulumi")],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"bench_pulumi: no Pulumi CLI:\n{proc.stderr}")
    return Path(proc.stdout.strip().splitlines()[-1])


class Stack:
    """One project folder with its own state folder."""

    def __init__(self, root: Path, name: str, bin_dir: Path) -> None:
        self.dir = root / name
        state = root / f"{name}-state"
        state.mkdir(parents=True)
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PULUMI_HOME": str(root / "pulumi-home"),
            "PULUMI_BACKEND_URL": f"file://{state}",
            "PULUMI_CONFIG_PASSPHRASE": "servefleet-bench",
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_PYTHON_CMD": sys.executable,
        }

    def pulumi(self, *args: str, attempts: int = 1) -> float:
        """Run ``pulumi ARGS``; return its wall time in seconds (exit on failure).

        ``attempts`` > 1 retries a failed run after a pause (another rollout may hold a
        node's lock on a fleet shared with other work)."""
        for attempt in range(1, attempts + 1):
            started = time.perf_counter()
            proc = subprocess.run(["pulumi", *args], cwd=self.dir, env=self.env,
                                  capture_output=True, text=True, check=False)
            took = time.perf_counter() - started
            if proc.returncode == 0:
                return took
            if attempt < attempts:
                print(f"bench_pulumi: pulumi {' '.join(args)} failed; retrying in "
                      f"{RETRY_PAUSE_S} s", flush=True)
                time.sleep(RETRY_PAUSE_S)
        sys.exit(f"bench_pulumi: pulumi {' '.join(args)} failed in {self.dir}:\n"
                 f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


def sim_stack(root: Path, bin_dir: Path, source: Path) -> Stack:
    stack = Stack(root, "sim-project", bin_dir)
    stack.dir.mkdir()
    for name in PROJECT_FILES:
        shutil.copy2(source / name, stack.dir / name)
    # A stack used on this machine before carries its own encryption salt: the copy starts
    # a new stack with the bench's passphrase.
    stack_file = stack.dir / "Pulumi.sim.yaml"
    stack_file.write_text("".join(
        line for line in stack_file.read_text().splitlines(keepends=True)
        if not line.startswith(("encryptionsalt:", "secretsprovider:", "encryptedkey:"))))
    for name in PROJECT_DIRS:
        shutil.copytree(source / name, stack.dir / name)
    stack.pulumi("stack", "init", "sim")
    stack.pulumi("config", "set", "--secret", "servefleet:hfToken", "hf_bench_placeholder")
    return stack


def empty_stack(root: Path, bin_dir: Path) -> Stack:
    stack = Stack(root, "empty-project", bin_dir)
    stack.dir.mkdir()
    (stack.dir / "Pulumi.yaml").write_text(EMPTY_PULUMI_YAML)
    (stack.dir / "__main__.py").write_text(EMPTY_PROGRAM)
    stack.pulumi("stack", "init", "bench")
    return stack


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (median)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the sim stack's engines running at the end")
    parser.add_argument("--project", type=Path, default=REPO,
                        help="project folder to copy (default: this repository)")
    parser.add_argument("--no-sim-up", action="store_true",
                        help="use the 3-node fleet as it runs (its inventory in the project's "
                             "nodes/sim, as a test session left it) instead of `sim up`")
    args = parser.parse_args()

    if not args.no_sim_up:
        print("bench_pulumi: starting the simulated fleet …", flush=True)
        fleet.up(fleet_specs(3), project_dir=args.project.resolve())
    missing = [s.name for s in fleet_specs(3)
               if not (args.project / "nodes" / "sim" / f"{s.name}.yaml").is_file()]
    if missing:
        sys.exit(f"bench_pulumi: no inventory for {', '.join(missing)} in "
                 f"{args.project / 'nodes' / 'sim'}: start the fleet or leave out --no-sim-up")
    bin_dir = pulumi_bin()
    root = Path(tempfile.mkdtemp(prefix="servefleet-bench-pulumi-"))
    sim = empty = None
    try:
        sim = sim_stack(root, bin_dir, args.project.resolve())
        empty = empty_stack(root, bin_dir)
        first = sim.pulumi(*UP, attempts=4)
        print(f"first pulumi up of the sim stack (3 nodes deployed): {first:.2f} s",
              flush=True)
        empty.pulumi(*UP)  # the first run of each creates the Stack resource
        sim_times: list[float] = []
        empty_times: list[float] = []
        for _ in range(args.runs):  # interleaved: both see the same machine load
            sim_times.append(sim.pulumi(*UP))
            empty_times.append(empty.pulumi(*UP))
        s, e = statistics.median(sim_times), statistics.median(empty_times)
        print(f"no-op `pulumi up` (--skip-preview), median of {args.runs}:")
        print(f"  sim stack, 3 nodes : {s:6.2f} s  (runs: "
              f"{', '.join(f'{t:.2f}' for t in sim_times)})")
        print(f"  empty program      : {e:6.2f} s  (runs: "
              f"{', '.join(f'{t:.2f}' for t in empty_times)})")
        print(f"  servefleet adds    : {s - e:6.2f} s  ({s / e:.2f}x the empty program; "
              f"aim: under 2 s more)")
    finally:
        if sim is not None and not args.keep:
            sim.pulumi("destroy", "--yes", "--skip-preview", "--non-interactive")
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

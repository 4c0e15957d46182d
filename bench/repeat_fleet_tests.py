"""Run the fleet tests N times in a row on one machine and count the failures per test:
the evidence that the suite passes every time, not just once.

    sudo .venv/bin/python bench/repeat_fleet_tests.py --runs 10 [--log-dir DIR] [-- PYTEST ARGS…]

Each run is ``pytest -m fleet`` (real sshd, dockerd, Compose, the engines) with ``CI=true``,
so a component that cannot start fails instead of skipping. Prints one line per run and a
table of every test that failed at least once, with how often; exit 1 if any run failed.
Not part of ``scripts/test``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FAILED_RE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep each run's whole pytest output here as run-N.log")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = parser.parse_args(argv)
    failures: collections.Counter[str] = collections.Counter()
    failed_runs = 0
    env = {**os.environ, "CI": "true"}
    for run in range(1, args.runs + 1):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "fleet",
                               "-p", "no:cacheprovider", *args.pytest_args],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              check=False)
        if args.log_dir is not None:
            args.log_dir.mkdir(parents=True, exist_ok=True)
            (args.log_dir / f"run-{run}.log").write_text(proc.stdout + proc.stderr)
        names = FAILED_RE.findall(proc.stdout)
        failures.update(names)
        failed_runs += proc.returncode != 0
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
        print(f"run {run}/{args.runs}: exit {proc.returncode} in "
              f"{time.monotonic() - started:.0f} s — {last}", flush=True)
    print(f"\n{args.runs - failed_runs} of {args.runs} runs passed")
    for name, count in failures.most_common():
        print(f"  {count}/{args.runs}  {name}")
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

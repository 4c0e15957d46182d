"""How fast ``servefleet`` starts, against ``python3 -c "import click"`` in the same run.

Times, as separate processes of this machine's ``.venv`` Python, the median of N runs
(default 15) of:

* ``python -c "import click"`` — the floor every click program pays;
* ``servefleet --help`` and ``servefleet validate --help`` — the lazy command group must not
  import paramiko, pydantic or rich to describe the commands;
* ``servefleet logs parse LOG --json`` of a 5 MB vLLM log (the ``steady`` shape of
  ``bench_bootlog.py``: one boot, then request traffic, from real-format lines), against the
  floor plus the median in-process :func:`parse_file` of the same file.

Children run with byte-code caching on (``PYTHONDONTWRITEBYTECODE`` removed, a private
``PYTHONPYCACHEPREFIX``) after one warm-up run each, as an installed servefleet runs: without
cached byte code every start compiles the imported modules again. Each figure is printed as
wall time and as CPU time (user + system of the child): on a shared
machine the wall time also measures the neighbours. Goals: ``--help`` ≤ 3× the floor, ``logs
parse`` ≤ 3× (floor + parse). The ratios use the CPU medians; wall ratios are printed beside.

Exit 1 when a goal is missed, unless ``--report-only``.

Run: ``.venv/bin/python bench/bench_cli_startup.py [--runs 15] [--mb 5] [--report-only]``
(smallest: ``--runs 1 --mb 1 --report-only``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_bootlog import MB, write_log

from servefleet.core.bootlog import parse_file

GOAL = 3.0


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(argv: Sequence[str], runs: int,
                 env: dict[str, str]) -> tuple[float, float]:
    """Median wall and median CPU seconds of ``argv`` (output discarded, must exit 0), after
    one warm-up run that fills the byte-code cache."""
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, env=env)
    walls, cpus = [], []
    for _ in range(runs):
        cpu0, wall0 = _child_cpu(), time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, env=env)
        walls.append(time.perf_counter() - wall0)
        cpus.append(_child_cpu() - cpu0)
    return statistics.median(walls), statistics.median(cpus)


def time_parse(path: Path, runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of an in-process :func:`parse_file`."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        parse_file(path)
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs per command (median kept)")
    parser.add_argument("--mb", type=int, default=5, help="size of the parsed log (MB)")
    parser.add_argument("--report-only", action="store_true",
                        help="print each goal's verdict but exit 0 when one is missed")
    args = parser.parse_args()
    python = sys.executable
    servefleet = [python, "-m", "servefleet.cli.main"]
    script = Path(python).with_name("servefleet")
    if script.exists():  # the console script users run
        servefleet = [str(script)]
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as workdir:
        log = Path(workdir) / f"steady-{args.mb}.log"
        write_log(log, args.mb * MB, dense=False)
        assert parse_file(log).outcome == "ready"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(workdir) / "pycache")
        print(f"python {sys.version.split()[0]}, median of {args.runs} runs, load average "
              f"{os.getloadavg()[0]:.1f}, log {log.stat().st_size / MB:.1f} MB")
        floor = time_command([python, "-c", "import click"], args.runs, env)
        rows = {
            "servefleet --help": (time_command([*servefleet, "--help"], args.runs, env), floor),
            "servefleet validate --help": (
                time_command([*servefleet, "validate", "--help"], args.runs, env), floor),
        }
        parse = time_parse(log, args.runs)
        rows["servefleet logs parse --json"] = (
            time_command([*servefleet, "logs", "parse", str(log), "--json"], args.runs, env),
            (floor[0] + parse[0], floor[1] + parse[1]))
    floor_name = 'python -c "import click"'
    print(f"{floor_name:<30} wall {floor[0] * 1000:7.1f} ms   "
          f"cpu {floor[1] * 1000:7.1f} ms")
    print(f"{'parse_file in process':<30} wall {parse[0] * 1000:7.1f} ms   "
          f"cpu {parse[1] * 1000:7.1f} ms")
    failed = False
    for name, ((wall, cpu), (base_wall, base_cpu)) in rows.items():
        ratio = cpu / base_cpu
        failed |= ratio > GOAL
        print(f"{name:<30} wall {wall * 1000:7.1f} ms   cpu {cpu * 1000:7.1f} ms   "
              f"ratio cpu {ratio:4.2f} (wall {wall / base_wall:4.2f})   "
              f"{'ok' if ratio <= GOAL else 'OVER'} (goal ≤ {GOAL:g}×)")
    sys.exit(1 if failed and not args.report_only else 0)


if __name__ == "__main__":
    main()

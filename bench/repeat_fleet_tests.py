"""Run the fleet tests N times in a row (and the whole suite from fresh clones) on one
machine, count the failures per test, and keep a record: the evidence that the suite passes
every time, not just once.

    sudo .venv/bin/python bench/repeat_fleet_tests.py --runs 10 [--suites 3]
        [--log-dir DIR] [--record FILE] [-- PYTEST ARGS…]

Each fleet run is ``pytest -m fleet`` (real sshd, dockerd, Compose, the engines) with
``CI=true``, so a component that cannot start fails instead of skipping. Each suite is a
``git clone`` of this repository's HEAD into a new folder and ``CI=true scripts/test`` there
(bootstrap included), as CI runs it. Prints one line per run and a table of every test that
failed at least once, with how often; exit 1 if any run failed.

Every run is also appended to the record (``~/.cache/servefleet/repeat-record.jsonl`` by
default) with the code's fingerprint: the hash of every tracked file but the prose
(``*.md``, ``docs/``). Runs on the same code add up across invocations, so the closing lines
say how many fleet passes and fresh-clone suites in a row this code has, whenever they ran.
A working tree with uncommitted code changes is fingerprinted as such and starts no streak.
Not part of ``scripts/test``.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FAILED_RE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)
DEFAULT_RECORD = Path.home() / ".cache" / "servefleet" / "repeat-record.jsonl"


def _git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


def is_prose(path: str) -> bool:
    """Files that change no test's outcome: Markdown and the docs folder."""
    return path.endswith(".md") or path.startswith("docs/")


def code_fingerprint(repo: Path = REPO_ROOT) -> str:
    """The hash of HEAD's tracked files but the prose, or ``dirty:…`` when the working tree
    changes code (such runs count, but on no committed code)."""
    listing = [line for line in _git("ls-tree", "-r", "HEAD", cwd=repo).splitlines()
               if not is_prose(line.split("\t", 1)[1])]
    digest = hashlib.sha256("\n".join(listing).encode()).hexdigest()[:16]
    changed = [line[3:] for line in _git("status", "--porcelain", cwd=repo).splitlines()]
    return f"dirty:{digest}" if any(not is_prose(p) for p in changed) else digest


def selects_fewer(pytest_args: list[str]) -> bool:
    """Whether extra pytest arguments may leave tests out (``-k``, a path, ``-m``…): such
    a run is recorded but counts in no streak. Reporting options do not."""
    return any(not arg.startswith(("--durations", "-v", "-q", "-r", "--tb"))
               for arg in pytest_args)


def streak(records: Iterable[dict[str, object]], fingerprint: str, kinds: set[str]) -> int:
    """Passes in a row, counted back from the newest whole run of ``kinds`` on this code;
    none on a ``dirty:`` fingerprint (every uncommitted change of one HEAD shares it)."""
    if fingerprint.startswith("dirty:"):
        return 0
    count = 0
    for record in reversed([r for r in records
                            if r.get("fingerprint") == fingerprint and r.get("kind") in kinds
                            and not r.get("partial")]):
        if not record.get("passed"):
            break
        count += 1
    return count


def read_record(path: Path) -> list[dict[str, object]]:
    """The record's runs, oldest first (a torn last line is ignored)."""
    if not path.is_file():
        return []
    runs = []
    for line in path.read_text().splitlines():
        try:
            runs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return runs


def append_record(path: Path, entry: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as record:
        record.write(json.dumps(entry) + "\n")


def fleet_run(pytest_args: list[str]) -> subprocess.CompletedProcess[str]:
    """``pytest -m fleet`` in this tree, ``CI=true``."""
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "fleet",
                           "-p", "no:cacheprovider", *pytest_args],
                          cwd=REPO_ROOT, env={**os.environ, "CI": "true"},
                          capture_output=True, text=True, check=False)


def suite_run(pytest_args: list[str]) -> subprocess.CompletedProcess[str]:
    """``CI=true scripts/test`` in a fresh clone of HEAD (removed after a pass)."""
    clone = Path(tempfile.mkdtemp(prefix="servefleet-suite-", dir=REPO_ROOT.parent))
    _git("clone", "-q", str(REPO_ROOT), str(clone))
    done = subprocess.run(["scripts/test", *pytest_args], cwd=clone,
                          env={**os.environ, "CI": "true"}, capture_output=True, text=True,
                          check=False)
    if done.returncode == 0:
        shutil.rmtree(clone, ignore_errors=True)
    else:
        done.stdout += f"\n(clone kept at {clone})\n"
    return done


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="fleet runs in this tree")
    parser.add_argument("--suites", type=int, default=0,
                        help="whole suites, each from a fresh clone of HEAD (after the runs)")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep each run's whole output here as run-N.log / suite-N.log")
    parser.add_argument("--record", type=Path, default=DEFAULT_RECORD,
                        help=f"the runs' record (default {DEFAULT_RECORD})")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = parser.parse_args(argv)
    fingerprint = code_fingerprint()
    commit = _git("rev-parse", "--short", "HEAD").strip()
    print(f"code {fingerprint} (HEAD {commit})", flush=True)
    failures: collections.Counter[str] = collections.Counter()
    failed_runs = 0
    plan = [("fleet", n, args.runs) for n in range(1, args.runs + 1)] + \
        [("suite", n, args.suites) for n in range(1, args.suites + 1)]
    for kind, number, total in plan:
        started = time.monotonic()
        proc = fleet_run(args.pytest_args) if kind == "fleet" else suite_run(args.pytest_args)
        seconds = time.monotonic() - started
        label = "run" if kind == "fleet" else "suite"
        if args.log_dir is not None:
            args.log_dir.mkdir(parents=True, exist_ok=True)
            (args.log_dir / f"{label}-{number}.log").write_text(proc.stdout + proc.stderr)
        names = FAILED_RE.findall(proc.stdout)
        failures.update(names)
        failed_runs += proc.returncode != 0
        append_record(args.record, {
            "kind": kind, "fingerprint": fingerprint, "commit": commit,
            "passed": proc.returncode == 0, "seconds": round(seconds), "failed": names,
            "partial": selects_fewer(args.pytest_args),
            "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")})
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
        print(f"{label} {number}/{total}: exit {proc.returncode} in {seconds:.0f} s — {last}",
              flush=True)
    total = args.runs + args.suites
    print(f"\n{total - failed_runs} of {total} runs passed")
    for name, count in failures.most_common():
        print(f"  {count}/{total}  {name}")
    records = read_record(args.record)
    # A suite runs the fleet tests too: a passing suite is a passing fleet run as well.
    print(f"on this code ({fingerprint}), from the record {args.record}: "
          f"{streak(records, fingerprint, {'fleet', 'suite'})} fleet passes in a row, "
          f"{streak(records, fingerprint, {'suite'})} fresh-clone suites in a row")
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

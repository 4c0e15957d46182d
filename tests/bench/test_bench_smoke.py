"""Every script under ``bench/`` runs at its smallest size, exits 0 and prints its result
lines. No timing is asserted: the figures themselves are the README's, taken by hand.
:func:`test_every_bench_script_has_a_smoke_run` holds the "every": the scripts this module
runs are those of ``bench/`` with a ``main``, read from the folder.

Each script runs as a subprocess of this interpreter, from the repository root, with this
tree first on ``PYTHONPATH`` (so the servefleet it imports is the one under test). Scripts
that start simulated nodes (their own, or the 3-node test fleet) use ``sim_fleet``: they are
``fleet`` tests and run inside this session's turn at the fleet (``fleet_tests_turn``), so
they never run beside another session's fleet tests. A component they need that cannot
start fails them under ``CI=true`` and skips them elsewhere, as in the other tests.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

from servefleet.sim.testbed import FleetHandle
from tests.reference_project import REPO_ROOT

BENCH = REPO_ROOT / "bench"


def unavailable(reason: str) -> NoReturn:
    """A component cannot run here: fail in CI, skip elsewhere (as conftest's rule)."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} (CI=true: every component must start here)", pytrace=False)
    pytest.skip(reason)


def run_bench(script: str, *args: str, timeout: float,
              env: dict[str, str] | None = None) -> str:
    """Run ``bench/<script> ARGS`` to its end; its stdout (the test fails on a non-zero
    exit, with the tail of both streams)."""
    python_path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH"))
                                  if p)
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": python_path, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)
    took = time.monotonic() - started
    print(f"bench/{script} {' '.join(args)}: exit {done.returncode} in {took:.1f} s\n"
          f"{done.stdout}")
    assert done.returncode == 0, (f"bench/{script} exited {done.returncode}:\n"
                                  f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def need_pulumi_cli() -> None:
    """The Pulumi CLI from scripts/ensure-pulumi (built the first time), or
    :func:`unavailable` with the tail of its error."""
    ensure = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "ensure-pulumi")],
                            capture_output=True, text=True, timeout=45 * 60, check=False)
    found = ensure.stdout.strip().splitlines()
    if ensure.returncode != 0 or not found or not (Path(found[-1]) / "pulumi").is_file():
        unavailable("scripts/ensure-pulumi could not provide the Pulumi CLI:\n"
                    + "\n".join(ensure.stderr.strip().splitlines()[-15:]))


def lines_matching(output: str, pattern: str) -> list[str]:
    """The output's lines that match ``pattern`` (a regex searched in each line)."""
    return [line for line in output.splitlines() if re.search(pattern, line)]


def scripts_with_main() -> set[str]:
    """The scripts of ``bench/`` that define a ``main`` at their top level."""
    return {path.name for path in BENCH.glob("*.py")
            if any(isinstance(node, ast.FunctionDef) and node.name == "main"
                   for node in ast.parse(path.read_text()).body)}


def scripts_run_here() -> set[str]:
    """The scripts this module's tests run: the first argument of every ``run_bench``
    call in its tests, read from its source."""
    tree = ast.parse(Path(__file__).read_text())
    runs: set[str] = set()
    for test in tree.body:
        if not (isinstance(test, ast.FunctionDef) and test.name.startswith("test_")):
            continue
        for node in ast.walk(test):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "run_bench"):
                first = node.args[0]
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                    f"{test.name}: run_bench's script must be a literal")
                runs.add(first.value)
    return runs


def test_every_bench_script_has_a_smoke_run() -> None:
    wanted = scripts_with_main()
    assert len(wanted) >= 12, sorted(wanted)  # the folder was read (12 scripts today)
    run_here = scripts_run_here()
    assert run_here == wanted, (f"bench scripts without a smoke run: "
                                f"{sorted(wanted - run_here)}; runs of no script: "
                                f"{sorted(run_here - wanted)}")


# --------------------------------------------------------------------------- no fleet


def test_bench_bootlog(need_program: Callable[[str], str]) -> None:
    need_program("grep")
    out = run_bench("bench_bootlog.py", "--mb", "2", "--runs", "1", timeout=120)
    for shape in ("steady", "dense"):
        assert lines_matching(out, rf"^{shape}\s+\d+\s+\d+ \(\d+\).*outcome="), shape
        assert lines_matching(out, rf"^\s+{shape}\s+1 MB: [\d,]+, 2 MB: [\d,]+$"), shape
    assert "peak traced memory of parse_file" in out


def test_bench_cli_startup() -> None:
    out = run_bench("bench_cli_startup.py", "--runs", "1", "--mb", "1", "--report-only",
                    timeout=120)
    assert lines_matching(out, r'^python -c "import click"\s+wall')
    for command in ("servefleet --help", "servefleet validate --help",
                    "servefleet logs parse --json"):
        assert lines_matching(out, rf"^{re.escape(command)}\s+wall .* ratio cpu \d"), command


def test_bench_kvplan() -> None:
    out = run_bench("bench_kvplan.py", timeout=60)
    assert lines_matching(out, r"^worst cold: ±[\d.]+%; tolerance ±5%$")
    assert lines_matching(out, r"^worst calibrated: ±[\d.]+%")
    assert lines_matching(out, r"^GB10 MTP on vs off, cold: [+−-]")
    cpu_rows = lines_matching(out, r"^\| vllm-cpu-real/")
    assert len(cpu_rows) >= 1
    assert lines_matching(out, r"^worst h200 cold: fitted ±[\d.]+% \(10 boots\), held out "
                               r"±[\d.]+% \(16 boots\)$")
    [counts] = lines_matching(out, r"^compared: \d+ cold, \d+ calibrated, \d+ CPU pools, "
                                   r"26 H200 boots$")
    assert f"{len(cpu_rows)} CPU pools" in counts
    summary = json.loads(run_bench("bench_kvplan.py", "--json", timeout=60))
    # The floor: a report of nothing compared would be within any tolerance.
    assert min(summary["compared"].values()) >= 1, summary
    assert summary["problems"] == [], summary
    assert all(err <= summary["tolerance"] for err in summary["worst"].values()), summary


def test_bench_plan_stack() -> None:
    """A small stack of several models planned and validated; every deployment planned (the
    floor: a report of nothing planned would be fast)."""
    figures = json.loads(run_bench("bench_plan_stack.py", "--profiles", "6", "--runs", "1",
                                   "--json", timeout=120))
    assert figures["planned"] == 6 and figures["models"] >= 6, figures
    assert all(figures[k] > 0 for k in ("load_s", "plan_s", "validate_s")), figures


def test_bench_watch(need_program: Callable[[str], str]) -> None:
    need_program("sshd")
    need_program("ssh-keygen")
    out = run_bench("bench_watch.py", "--rounds", "1", "--nodes", "2", timeout=120)
    for what in ("true", "watch", "ratio"):
        assert lines_matching(out, rf"^\s+2\s+{what}\s+\d"), what


def test_repeat_fleet_tests(tmp_path: Path) -> None:
    """The loop itself, on a stub suite: a real fleet run inside this session would wait for
    this session's own turn at the fleet (``tests/sim`` and the fleet tests run it for
    real). The stub's ``fleet`` test passes; its other test fails unless ``-m fleet``
    leaves it out."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    fleet: stub\n")
    (tmp_path / "test_stub.py").write_text(
        "import pytest\n\n\n@pytest.mark.fleet\ndef test_on_the_fleet():\n    pass\n\n\n"
        "def test_not_on_the_fleet():\n    raise AssertionError('-m fleet was not applied')\n")
    record = tmp_path / "record.jsonl"
    out = run_bench("repeat_fleet_tests.py", "--runs", "1", "--record", str(record), "--",
                    str(tmp_path), timeout=120)
    assert lines_matching(out, r"^run 1/1: exit 0 in \d+ s — 1 passed, 1 deselected")
    assert lines_matching(out, r"^1 of 1 runs passed$")
    # The stub run is recorded, but a run that names its tests counts in no streak.
    (entry,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert entry["kind"] == "fleet" and entry["passed"] and entry["partial"]
    assert lines_matching(out, r"^on this code \((dirty:)?[0-9a-f]{16}\), from the record .*: "
                               r"0 fleet passes in a row, 0 fresh-clone suites in a row$")


# --------------------------------------------------------------------------- the fleet


def clear_faults(fleet: FleetHandle) -> None:
    """Fault markers another test left behind would fail the benchmarks' boots."""
    for name in fleet.nodes:
        (fleet.node_files(name).control_dir / "fault").unlink(missing_ok=True)


@pytest.mark.fleet
def test_bench_drift(sim_fleet: FleetHandle) -> None:
    out = run_bench("bench_drift.py", "--nodes", "3", "--rounds", "1", "--skip-ansible",
                    timeout=180)
    for label in ("floor: connect + true", "servefleet", "paramiko (4 commands)",
                  "paramiko (3, no compose)", "servefleet + GPU probe"):
        assert lines_matching(out, rf"^  {re.escape(label)}\s+median\s+[\d.]+ s"), label
    assert lines_matching(out, r"^  servefleet [\d.]+ s for 3 nodes .* with the GPU probe")
    assert lines_matching(out, r"^  servefleet / paramiko = [\d.]+×")
    assert lines_matching(out, r"^  docker compose config's share: paramiko [\d.]+ s with it")


@pytest.mark.fleet
@pytest.mark.slow
def test_bench_deploy_noop(sim_fleet: FleetHandle) -> None:
    """(a) on this session's fleet as it runs (its stand-in engines boot in seconds)."""
    clear_faults(sim_fleet)
    # The bench removes its `bench` deployment from the nodes at its end.
    out = run_bench("bench_deploy.py", "--skip", "b", "--runs", "1", "--no-sim-up",
                    timeout=300)
    assert lines_matching(out, r"plain paramiko connect \+ 1 command, 3 nodes:\s+[\d.]+ ms")
    assert lines_matching(out, r"servefleet no-op deploy, 3 nodes:\s+[\d.]+ ms \([\d.]+x the "
                               "baseline")


@pytest.mark.fleet
def test_bench_deploy_fanout(sim_fleet: FleetHandle) -> None:
    """(b) on two sshd-only nodes of its own; pyinfra and Ansible (``.[bench]``) left out,
    plain paramiko stays the baseline."""
    out = run_bench("bench_deploy.py", "--skip", "a", "--nodes", "2", "--runs", "1",
                    "--no-ansible", "--no-pyinfra", timeout=180)
    assert lines_matching(out, r"plain paramiko \(baseline\)\s+[\d.]+ s\s+1\.00x paramiko")
    assert lines_matching(out, r"servefleet transport\s+[\d.]+ s\s+[\d.]+x paramiko")
    assert lines_matching(out, r"servefleet / paramiko = [\d.]+ \(aim <= 1\.2\)")


@pytest.mark.fleet
@pytest.mark.slow
def test_bench_sim_up(sim_fleet: FleetHandle) -> None:
    """A 2-node fleet of its own: cold (image build), one warm run, images to one node."""
    out = run_bench("bench_sim_up.py", "--warm-runs", "1", "--nodes", "2", timeout=400)
    for label in ("cold, no image store", "warm, API call (median)",
                  "warm, new process (median)"):
        assert lines_matching(out, rf"^{re.escape(label)}\s+[\d.]+ s\s+aim <= \d+ s"), label
    assert lines_matching(out, r"^images by save \| load \(1 node\)\s+[\d.]+ s\s+\(hard links")
    assert lines_matching(out, r"^warm/cold ratio: [\d.]+$")


@pytest.mark.fleet
@pytest.mark.slow
def test_fault_suite(sim_fleet: FleetHandle) -> None:
    """One trial of one fault on one node of the suite's own fleet."""
    out = run_bench("fault_suite.py", "--trials", "1", "--faults", "sigint@upload", "--nodes",
                    "fault-spark-1", timeout=400)
    assert lines_matching(out, r"^sigint@upload\s+fault-spark-1\s+trial\s+1: ok ")
    assert lines_matching(out, r"^1 trials on 1 nodes in \d+ s")
    assert lines_matching(out, r"^\| `sigint@upload` \| 1 \| 1 \(100%\) \| 0 \| 0 \| 0 \|")


@pytest.mark.fleet
@pytest.mark.pulumi
@pytest.mark.slow
def test_bench_pulumi(sim_fleet: FleetHandle) -> None:
    """The sim stack on this session's fleet as it runs, against an empty program."""
    need_pulumi_cli()
    clear_faults(sim_fleet)
    out = run_bench("bench_pulumi.py", "--runs", "1", "--no-sim-up", timeout=600)
    assert lines_matching(out, r"^first pulumi up of the sim stack \(3 nodes deployed\): "
                               r"[\d.]+ s$")
    assert lines_matching(out, r"^  sim stack, 3 nodes :\s+[\d.]+ s")
    assert lines_matching(out, r"^  empty program      :\s+[\d.]+ s")
    assert lines_matching(out, r"^  servefleet adds    :\s+-?[\d.]+ s\s+\([\d.]+x the empty")


@pytest.mark.fleet
@pytest.mark.slow
def test_bench_weights(sim_fleet: FleetHandle) -> None:
    """Staging on this session's fleet, 4 MiB throttled to 2 MiB/s."""
    clear_faults(sim_fleet)
    out = run_bench("bench_weights.py", "--mib", "4", "--rate", "2", "--no-sim-up",
                    timeout=400)
    assert lines_matching(out, r"^   staging took [\d.]+ s; the old engine answered (\d+) of "
                               r"\1 health checks in that time \(100\.0%\)$")
    assert lines_matching(out, r"^   plain curl over SSH: +[\d.]+ s")
    assert lines_matching(out, r"^   servefleet staging: +[\d.]+ s \([\d.]+x the baseline")
    assert lines_matching(out, r"^   from the neighbour: +[\d.]+ s \([\d.]+x the staging from "
                               r"the hub; hub downloads of the file: 2,")
    assert lines_matching(out, r"weights: copying 4194304 bytes from sim-5090 over the fast "
                               r"link")


@pytest.mark.fleet
@pytest.mark.pulumi
@pytest.mark.slow
@pytest.mark.bench_run
def test_bench_gateway_switch(sim_fleet: FleetHandle) -> None:
    """The sim-gateway stack on this session's fleet as it runs (its stand-in engines boot
    in seconds), the shortest baseline, no failing release: a load through the gateway
    while ``pulumi up`` switches both Sparks to MTP, then the switch back with the drain
    left out. Every leg saw requests; the drained one failed none and sent none to a
    drained engine; the script exits 0 only then (``run_bench`` checks the exit)."""
    need_pulumi_cli()
    clear_faults(sim_fleet)
    out = run_bench("bench_gateway_switch.py", "--workers", "1", "--baseline-seconds", "3",
                    "--no-failed-gate", "--no-sim-up", timeout=900)
    assert lines_matching(out, r"^first pulumi up \(gateway and both engines, gated\): \d+ s$")
    legs = {}
    for name in ("baseline", "drained: both to MTP (pulumi up)", "retries only: both off MTP"):
        [line] = lines_matching(out, rf"^  {re.escape(name)}\s+\d+ requests, failed \d+")
        found_leg = re.search(r"(\d+) requests, failed (\d+)", line)
        assert found_leg is not None
        legs[name] = (int(found_leg[1]), int(found_leg[2]))
    # The floor: a leg without requests would pass for one without failures.
    assert all(requests >= 1 for requests, _ in legs.values()), legs
    assert legs["baseline"][1] == legs["drained: both to MTP (pulumi up)"][1] == 0, legs
    windows = [re.search(r"answered in it, (\d+) through that route by (\S+) \(aim: 0\)$",
                         line)
               for line in lines_matching(out, r"^      sim-spark-\d\.\S+ drained from route "
                                               r"\S+ [\d.]+ s: ")]
    assert windows and all(windows), out
    assert {w[2].split(".")[0] for w in windows if w} == {"sim-spark-1", "sim-spark-2"}, out
    assert all(w and w[1] == "0" for w in windows), out
    assert lines_matching(out, r"^  failed: drained switch 0 of \d+, retries only \d+ of \d+$")


@pytest.mark.fleet
@pytest.mark.slow
@pytest.mark.bench_run
def test_bench_tune(sim_fleet: FleetHandle) -> None:
    """The grid and the search over the smallest lattice (two points), the real vLLM CPU
    build on sim-spark-2: both measured the control before and after and left the node on
    it (the script exits non-zero otherwise); the comparison line is printed."""
    clear_faults(sim_fleet)
    out = run_bench("bench_tune.py", "--seqs", "1,2", "--batched", "4096", "--users", "2",
                    "--prompts", "2", "--no-sim-up", timeout=1200)
    [grid] = lines_matching(out, r"^  grid +\d+ deploys")
    [search] = lines_matching(out, r"^  search +\d+ deploys")
    assert " 1 deploys" in grid and " 1 deploys" in search, (grid, search)
    assert lines_matching(out, r"^  search / grid: [\d.]+% of the best throughput with "
                               r"[\d.]+x the deploys \(1 of 1\)")

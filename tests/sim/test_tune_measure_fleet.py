"""``servefleet tune --measure`` on the simulated fleet with the real vLLM CPU build.

The profile searched serves one request at a time (``max_num_seqs: 1``), so under scenario
C's four users more sequences win by far more than any noise band (the answer is known
beforehand: the test can fail the way the claim can). The lattice is 2 × 2: ``max_num_seqs``
1 or 4, ``max_num_batched_tokens`` 2048 or 2; vLLM refuses to start with fewer batched
tokens than sequences (``max_num_batched_tokens (2) must be greater than or equal to
max_num_seqs (4)``), so that candidate fails its gate for real.

One search, two runs: the first is interrupted by SIGINT once its first candidate is
measured (it must put the profile back, gated, and record what it measured); the second
resumes, spends its last deploy on the failing candidate (one restore, never benched) and
ends on the profile, gated, with the winner's overlay printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from servefleet.adapters.bench import read_records
from servefleet.adapters.bench.session import bench_target
from servefleet.adapters.runtime import connect
from servefleet.core.project import Project, load_project
from servefleet.sim.testbed import FleetHandle
from tests.fleet_helpers import BENCH_SECRETS, bench_project, wiped_project

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NODE = "sim-spark-2"
DEP = "tm"
PORT = 8003
STACK = "tm"
SERIAL = "tm-serial"
SCENARIOS = {"scenarios": [{"name": "C", "input_len": 64, "output_len": 16, "concurrency": 4,
                            "prompts": 8, "warmups": 1, "seeds": [42, 43]}]}
ARGS = ("tune", SERIAL, "--node", NODE, "--measure", "--only", "C",
        "--knobs", "max_num_seqs,max_num_batched_tokens",
        "--values", "max_num_seqs=1,4", "--values", "max_num_batched_tokens=2,2048",
        "--slo", "ttft_p99<=60s", "--max-deploys", "2", "--json")
WINNER = [["max_num_seqs", 4], ["max_num_batched_tokens", 2048]]
FAILING = [["max_num_seqs", 4], ["max_num_batched_tokens", 2]]


@pytest.fixture(scope="module")
def bed(real_engines: FleetHandle, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Project]:
    """A project copy whose stack places the serial profile as ``tm`` on sim-spark-2,
    deployed and gated."""
    from servefleet.adapters.rollout import deploy

    folder = tmp_path_factory.mktemp("tune-measure")
    bench_project(real_engines, folder, STACK, NODE, DEP, SERIAL, PORT, SCENARIOS)
    (folder / "profiles" / f"{SERIAL}.yaml").write_text(yaml.safe_dump({
        "extends": "qwen36-fp8", "description": "one request at a time (tune tests)",
        "vllm": {"max_num_seqs": 1, "max_num_batched_tokens": 2048}}))
    for _ in wiped_project(real_engines, DEP, [NODE]):
        project = load_project(folder, STACK)
        [result] = deploy(project, [NODE], secrets=BENCH_SECRETS)
        assert result.ok, result.to_json()
        yield project


def cli(project: Project, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "servefleet.cli.main", "--project", str(project.root),
         "--stack", STACK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **BENCH_SECRETS})


def serving(project: Project) -> str:
    """The profile the deployment serves, gated (bench_target refuses anything else)."""
    with connect(project.nodes[NODE]) as transport:
        return bench_target(transport, DEP, project).profile


def test_an_interrupted_search_resumes_and_ends_on_the_profile_gated(bed: Project) -> None:
    first = cli(bed, *ARGS)
    assert first.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 600
    for line in first.stderr:
        lines.append(line)
        if line.startswith("candidate seqs=4 batched=2048: ") and "out tok/s" in line:
            first.send_signal(signal.SIGINT)  # the first candidate is measured: stop here
            break
        assert time.monotonic() < deadline, "".join(lines[-20:])
    out, err = first.communicate(timeout=600)
    lines.append(err)
    assert first.returncode == 0, "".join(lines)[-4000:]
    stopped = json.loads(out)
    # Stopped at the next step (a deploy under way when the signal came ends interrupted,
    # restored or never started, and is tried again by the resumed search).
    assert stopped["ended"].startswith("interrupted by SIGINT"), stopped["ended"]
    assert [t["point"] for t in stopped["trials"] if t["status"] != "interrupted"] == [WINNER]
    assert stopped["serving"] == SERIAL and serving(bed) == SERIAL
    assert stopped["control_again"] is not None  # put back, gated, and benched again

    second = cli(bed, *ARGS)
    out, err = second.communicate(timeout=900)
    assert second.returncode == 0, err[-4000:]
    assert "resuming: 1 candidate(s) recorded by an earlier run" in err
    done = json.loads(out)
    by_point = {json.dumps(t["point"]): t for t in done["trials"]}
    assert set(by_point) == {json.dumps(WINNER), json.dumps(FAILING)}, by_point.keys()
    # The failing candidate: deployed, its gate failed on vLLM's own refusal, restored,
    # never benched.
    failed = by_point[json.dumps(FAILING)]
    assert failed["status"] == "failed" and failed["deployed"] and not failed["figures"]
    assert "max_num_batched_tokens" in failed["why"], failed["why"]
    assert done["deploys"] == 2 and done["ended"] == "--max-deploys 2 spent"
    # Four users against one at a time: the winner, outside the noise band.
    winner = done["winner"]
    assert winner is not None and winner["point"] == WINNER, done["reason"]
    assert winner["score"] > done["control"]["score"] * 1.02
    assert winner["boot"].get("kv_cache_tokens"), winner["boot"]
    assert done["overlay"] == {"extends": SERIAL, "description": done["overlay"]["description"],
                               "vllm": {"max_num_seqs": 4, "max_num_batched_tokens": 2048}}
    # The node ends on the profile, gated; every candidate's bench is in its history.
    assert done["serving"] == SERIAL and serving(bed) == SERIAL
    with connect(bed.nodes[NODE]) as transport:
        records, _ = read_records(transport, DEP)
    tuned = {r.profile for r in records if r.role == "tune"}
    assert {SERIAL, f"{SERIAL}-tune-4-2048"} <= tuned, tuned
    assert f"{SERIAL}-tune-4-2" not in tuned
    state = Path(bed.root) / ".servefleet" / "tune"
    assert len(list(state.glob("*.json"))) == 1

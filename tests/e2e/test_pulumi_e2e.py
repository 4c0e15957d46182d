"""``pulumi up`` for real: the Pulumi CLI (scripts/ensure-pulumi), the Python language host and
the dynamic-provider host drive the simulated fleet through the ``sim`` stack.

The scenario is the operator's: bring the stack up (three healthy nodes), switch one node to
MTP with one config line, preview (only that node changes, and the diff names the
speculative-decoding flag), apply (PIECEWISE CUDA graphs, a smaller KV pool), catch a hand
edit on a node with ``pulumi preview --refresh --expect-no-changes``, and destroy (no engine
left running).

The project is copied into a temporary folder with a state folder of its own (local file
backend, passphrase secrets), so the repository's ``Pulumi.sim.yaml`` and ``.pulumi-state``
are never touched. In CI (``CI=true``) a CLI that cannot be obtained fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from servefleet.core.project import load_project
from servefleet.sim.testbed import FleetHandle
from tests.reference_project import REPO_ROOT

pytestmark = [pytest.mark.pulumi, pytest.mark.fleet, pytest.mark.slow,
              pytest.mark.timeout(1800)]

STACK = "sim"
NODES = ("sim-spark-1", "sim-spark-2", "sim-5090")
SWITCHED = "sim-spark-2"
EDITED = "sim-spark-1"
HF_TOKEN = "hf_e2e-pulumi-secret-value-7781"
PROJECT_FILES = ("Pulumi.yaml", f"Pulumi.{STACK}.yaml", "__main__.py")
PROJECT_DIRS = ("nodes", "profiles", "templates", "healthchecks")
# A cold build of the CLI compiles it from the Go module proxy on two cores.
ENSURE_TIMEOUT_S = 45 * 60
COMMAND_TIMEOUT_S = 900


def unavailable(reason: str) -> NoReturn:
    """The Pulumi CLI cannot run here: fail in CI, skip elsewhere (as conftest's rule)."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} (CI=true: every component must start here)", pytrace=False)
    pytest.skip(reason)


@dataclass
class Pulumi:
    """The real CLI on a copy of the project, with its own state folder."""

    cwd: Path
    env: dict[str, str]
    log: list[str] = field(default_factory=list)

    def run(self, *args: str, check: bool = True,
            timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        proc = subprocess.run(["pulumi", *args, "--non-interactive"], cwd=self.cwd,
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        self.log.append(f"$ pulumi {' '.join(args)}  ({time.monotonic() - started:.1f} s, "
                        f"exit {proc.returncode})")
        if check and proc.returncode != 0:
            pytest.fail(f"pulumi {' '.join(args)} exited {proc.returncode}:\n"
                        f"{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}", pytrace=False)
        return proc

    def outputs(self) -> dict[str, Any]:
        """``nodes`` stack output: node → deployment → endpoint, release, KV, graphs, health."""
        nodes = json.loads(self.run("stack", "output", "--json", "--show-secrets").stdout)
        return dict(nodes["nodes"])

    def state_text(self) -> str:
        """The stack's checkpoint as stored by the file backend (secrets encrypted)."""
        return self.run("stack", "export").stdout


@pytest.fixture(scope="module")
def pulumi_bin() -> Path:
    """The bin dir of the Pulumi CLI, language host and dynamic-provider host."""
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "ensure-pulumi")],
                          capture_output=True, text=True, timeout=ENSURE_TIMEOUT_S,
                          check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not (Path(lines[-1]) / "pulumi").is_file():
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        unavailable(f"scripts/ensure-pulumi could not provide the Pulumi CLI:\n{tail}")
    return Path(lines[-1])


@pytest.fixture(scope="module")
def fleet(sim_fleet: FleetHandle) -> FleetHandle:
    """The fleet with the real stand-in engine (its boot log carries the facts checked)."""
    if not sim_fleet.standin_is_real:
        unavailable("the stand-in engine image is not built (servefleet/sim/standin has no "
                    "Dockerfile.vllm): the end-to-end test needs its boot log")
    return sim_fleet


def _copy_project(source: Path, target: Path) -> None:
    target.mkdir(parents=True)
    for name in PROJECT_FILES:
        shutil.copy2(source / name, target / name)
    for stack_file in target.glob("Pulumi.*.yaml"):
        # A stack used on this machine before carries its own encryption salt; the copy
        # starts a new stack with the test's passphrase.
        lines = stack_file.read_text().splitlines(keepends=True)
        stack_file.write_text("".join(
            line for line in lines
            if not line.startswith(("encryptionsalt:", "secretsprovider:", "encryptedkey:"))))
    for name in PROJECT_DIRS:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name)


def new_stack(root: Path, project: Path, pulumi_bin: Path, stack: str) -> Pulumi:
    """The CLI on ``project`` with state and home folders of its own under ``root``, and a
    fresh ``stack`` holding the test's HF token."""
    (root / "state").mkdir()
    (root / "home").mkdir()
    env = {
        **os.environ,
        "PATH": f"{pulumi_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "PULUMI_HOME": str(root / "home"),
        "PULUMI_BACKEND_URL": f"file://{root / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": "servefleet-e2e",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        # Both the language host and the dynamic-provider host start this interpreter: the
        # one running the tests, which has servefleet installed.
        "PULUMI_PYTHON_CMD": sys.executable,
    }
    for inherited in ("PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE_FILE"):
        env.pop(inherited, None)
    cli = Pulumi(project, env)
    cli.run("stack", "init", stack)
    cli.run("config", "set", "--secret", "servefleet:hfToken", HF_TOKEN)
    return cli


@pytest.fixture(scope="module")
def pulumi(tmp_path_factory: pytest.TempPathFactory, pulumi_bin: Path,
           fleet: FleetHandle) -> Iterator[Pulumi]:
    """A fresh ``sim`` stack on a copy of the project; destroyed at the end if still up."""
    for spec in fleet.nodes.values():
        # A fault marker another test left behind would fail these boots.
        (fleet.node_files(spec.name).control_dir / "fault").unlink(missing_ok=True)
    root = tmp_path_factory.mktemp("pulumi-e2e")
    project = root / "project"
    _copy_project(fleet.project_dir, project)
    cli = new_stack(root, project, pulumi_bin, STACK)
    try:
        yield cli
    finally:
        cli.run("destroy", "--yes", "--skip-preview", check=False)
        print("\n".join(cli.log))


def engines_running(fleet: FleetHandle, node: str) -> list[str]:
    """Names of the running containers of the ``main`` deployment on ``node``."""
    out = fleet.ssh(node, "docker ps --format '{{.Names}}' "
                          "--filter label=com.docker.compose.project=servefleet-main").stdout
    return out.split()


@pytest.fixture(scope="module")
def first_up(pulumi: Pulumi) -> dict[str, Any]:
    """``pulumi up`` of the stack as in git: the outputs."""
    pulumi.run("up", "--yes", "--skip-preview")
    return pulumi.outputs()


def test_up_brings_three_healthy_nodes(first_up: dict[str, Any], pulumi: Pulumi,
                                       fleet: FleetHandle) -> None:
    assert sorted(first_up) == sorted(NODES)
    for node in NODES:
        main = first_up[node]["main"]
        assert main["health"] == "healthy", (node, main)
        assert main["releaseId"], node
        assert main["endpoint"] == f"http://{fleet.nodes[node].address}:8000"
        assert engines_running(fleet, node), node
    for node in ("sim-spark-1", "sim-spark-2"):
        assert first_up[node]["main"]["cudagraphMode"] == "FULL_AND_PIECEWISE"
        assert first_up[node]["main"]["kvCacheTokens"] > 0
    # The token is in the state only encrypted.
    state = pulumi.state_text()
    assert HF_TOKEN not in state
    assert '"secrets"' in state
    # Nothing to do right after an up: not even a refresh finds a difference.
    pulumi.run("preview", "--refresh", "--expect-no-changes", "--diff")


@pytest.fixture(scope="module")
def switched(first_up: dict[str, Any], pulumi: Pulumi) -> dict[str, Any]:
    """One config line puts sim-spark-2 on MTP; the preview that follows (JSON and text)."""
    pulumi.run("config", "set", f"servefleet:profiles.{SWITCHED}", "qwen36-fp8-mtp")
    as_json = json.loads(pulumi.run("preview", "--json").stdout)
    as_text = pulumi.run("preview", "--diff").stdout
    return {"json": as_json, "text": as_text}


def test_preview_after_the_switch_shows_only_that_node_with_mtp(
        switched: dict[str, Any], pulumi: Pulumi) -> None:
    steps = {s["urn"].rsplit("::", 1)[-1]: s for s in switched["json"]["steps"]}
    changing = sorted(name for name, step in steps.items() if step["op"] != "same")
    assert changing == [SWITCHED], {n: s["op"] for n, s in steps.items()}
    assert steps[SWITCHED]["op"] == "update"
    new_flags = steps[SWITCHED]["newState"]["inputs"]["deployments"]["main"]["engineFlags"]
    old_flags = steps[SWITCHED]["oldState"]["outputs"]["deployments"]["main"]["engineFlags"]
    assert "--speculative-config" in new_flags
    assert "--speculative-config" not in old_flags
    text = switched["text"]
    assert "+ --speculative-config" in text, text
    assert '"qwen36-fp8" => "qwen36-fp8-mtp"' in text, text
    # The program reads the stack file the way the servefleet CLI does.
    project = load_project(pulumi.cwd, STACK)
    assert {d.node: d.profile for d in project.stack.deployments}[SWITCHED] == "qwen36-fp8-mtp"


@pytest.fixture(scope="module")
def second_up(switched: dict[str, Any], pulumi: Pulumi) -> dict[str, Any]:
    """``pulumi up`` of the switch: the outputs."""
    pulumi.run("up", "--yes", "--skip-preview")
    return pulumi.outputs()


def test_up_of_the_switch_shows_piecewise_and_a_smaller_kv_pool(
        first_up: dict[str, Any], second_up: dict[str, Any]) -> None:
    before, after = first_up[SWITCHED]["main"], second_up[SWITCHED]["main"]
    assert after["health"] == "healthy", after
    assert after["cudagraphMode"] == "PIECEWISE"
    assert after["kvCacheTokens"] < before["kvCacheTokens"]
    assert after["releaseId"] != before["releaseId"]
    for node in NODES:
        if node != SWITCHED:
            assert second_up[node] == first_up[node], node


def test_hand_edit_on_a_node_fails_the_refresh_check(second_up: dict[str, Any],
                                                     pulumi: Pulumi,
                                                     fleet: FleetHandle) -> None:
    pulumi.run("preview", "--refresh", "--expect-no-changes", "--diff")
    base = load_project(pulumi.cwd, STACK).nodes[EDITED].base_dir
    compose = f"{base}/main/current/compose.yaml"
    # A simulated node's files are on this machine too: keep the original to put it back
    # (a release folder is never rewritten by a deploy).
    local = Path(base) / "main" / "current" / "compose.yaml"
    original = local.read_bytes()
    fleet.ssh(EDITED, f"printf '# edited by hand\\n' >> {compose}")
    try:
        drift = pulumi.run("preview", "--refresh", "--expect-no-changes", "--diff",
                           check=False)
    finally:
        local.write_bytes(original)
    assert drift.returncode != 0, drift.stdout
    assert "compose.yaml" in drift.stdout
    assert "no changes were expected" in (drift.stdout + drift.stderr).lower()
    pulumi.run("preview", "--refresh", "--expect-no-changes", "--diff")


def test_destroy_leaves_no_engine_running(second_up: dict[str, Any], pulumi: Pulumi,
                                          fleet: FleetHandle) -> None:
    pulumi.run("destroy", "--yes", "--skip-preview")
    for node in NODES:
        assert engines_running(fleet, node) == [], node
    assert pulumi.run("stack", "output", "--json").stdout.strip() in ("{}", "")

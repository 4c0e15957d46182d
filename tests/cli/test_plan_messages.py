"""``servefleet plan`` says up front which deployments cannot be compared without the
secrets they need (a gated model's ``HF_TOKEN``), names an unreachable node once, and a
fresh checkout's sim stack says in one line how to create its nodes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from servefleet.cli.rollout_common import node_line

Run = Callable[..., Result]
UNREACHABLE = "dgx-spark-1: cannot reach dgx-spark-1.lan:22 (connection refused)"


def _gated(project: Path) -> None:
    """Mark the FP8 model gated (qwen36-fp8-mtp extends it): its HF_TOKEN is then needed; a
    public model's is not, and plan only warns (tests/cli/test_hub_token.py)."""
    path = project / "profiles/qwen36-fp8.yaml"
    path.write_text(path.read_text().replace("\nmodel:\n", "\nmodel:\n  gated: true\n", 1))


def test_plan_without_hf_token_names_the_uncomparable_deployments_first(run: Run,
                                                                        project: Path) -> None:
    _gated(project)
    result = run("plan", env={"HF_TOKEN": ""})
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    assert notes == ["note: HF_TOKEN is not set in the environment: dgx-spark-1/main, "
                     "dgx-spark-1/nomtp, dgx-spark-2/main cannot be compared with what runs "
                     "(their release ids include it) and show as changed; export HF_TOKEN=… "
                     "to compare them"]
    lines = result.output.splitlines()
    first_node_line = next(i for i, line in enumerate(lines) if line.startswith("dgx-spark-1:"))
    assert lines.index(notes[0]) < first_node_line


def test_plan_json_lists_the_uncomparable(run: Run, project: Path) -> None:
    _gated(project)
    data = json.loads(run("plan", "rtx5090", "dgx-spark-2", "--json",
                          env={"HF_TOKEN": ""}).output)
    assert data["missing_secrets"] == ["HF_TOKEN"]
    assert data["uncomparable"][0].startswith("HF_TOKEN is not set in the environment: "
                                              "dgx-spark-2/main cannot be compared")


def test_the_node_is_named_once() -> None:
    assert node_line("dgx-spark-1", UNREACHABLE) == UNREACHABLE
    assert node_line("dgx-spark-1", "lock held") == "dgx-spark-1: lock held"


def test_fresh_checkout_sim_stack_says_how_to_create_its_nodes(
        run_cli: Callable[..., Result], project: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    (project / "Pulumi.sim.yaml").write_text((repo / "Pulumi.sim.yaml").read_text())
    result = run_cli("validate", project=project, stack="sim")
    assert result.exit_code == 1
    assert result.output == (
        "error: Pulumi.sim.yaml: nodes sim-spark-1, sim-spark-2, sim-5090 are simulated and "
        "not created yet: run `sudo servefleet sim up` to start the simulated fleet, or pick "
        "a stack of real nodes with --stack\n")

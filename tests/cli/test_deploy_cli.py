"""``servefleet plan | deploy | rollback | releases | logs NODE`` through click, without the
simulated fleet (the fleet runs are in tests/adapters/test_rollout.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

Run = Callable[..., Result]
"""The real ``servefleet`` bound to this module's project copy and stack."""




def test_deploy_names_missing_secrets_before_touching_anything(run: Run, project: Path) -> None:
    # A gated model's token is needed (a public model's is not: tests/cli/test_hub_token.py).
    path = project / "profiles/qwen36-fp8.yaml"
    path.write_text(path.read_text().replace("\nmodel:\n", "\nmodel:\n  gated: true\n", 1))
    result = run("deploy", "--yes", env={"HF_TOKEN": ""})
    assert result.exit_code == 1
    assert "error: secret HF_TOKEN is not set in the environment: export HF_TOKEN=…" \
        in result.output


def test_deploy_without_yes_needs_a_terminal(run: Run, project: Path) -> None:
    result = run("deploy", "--json", env={"HF_TOKEN": "hf_x_cli_test"})
    assert result.exit_code == 2
    assert "pass --yes" in result.output


def test_plan_reports_nodes_it_cannot_verify(run: Run, project: Path) -> None:
    result = run("plan", "--json", env={"HF_TOKEN": "hf_x_cli_test"})
    assert result.exit_code == 1
    data = json.loads(result.output)
    # Every node refused (no host key pinned): its deployments come from git alone.
    assert {(i["node"], i["deployment"], i["action"], i["compared_with"])
            for i in data["plan"]} == {
        ("dgx-spark-1", "main", "unknown", "git"), ("dgx-spark-1", "nomtp", "unknown", "git"),
        ("dgx-spark-2", "main", "unknown", "git"), ("rtx5090", "main", "unknown", "git")}
    assert {e["error_kind"] for e in data["errors"]} == {"HostKeyMismatch"}
    assert all("no host key is pinned" in e["error"] for e in data["errors"])
    assert data["missing_secrets"] == []


def test_plan_of_an_unknown_node(run: Run, project: Path) -> None:
    result = run("plan", "nowhere")
    assert result.exit_code == 1
    assert "nowhere: not in stack 'reference'" in result.output


def test_logs_group_serves_parse_and_node_logs(run: Run, project: Path, tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    log.write_text("INFO 11-21 10:00:00 [api_server.py:1] vLLM API server version 0.21.0\n"
                   "INFO:     Application startup complete.\n")
    parsed = run("logs", "parse", str(log), "--json")
    assert parsed.exit_code == 0, parsed.output
    assert json.loads(parsed.output)["outcome"] == "ready"
    node = run("logs", "nowhere", "--follow")
    assert node.exit_code == 1
    assert "error: no node 'nowhere' in the inventory" in node.output


def test_releases_and_rollback_of_an_unknown_node(run: Run, project: Path) -> None:
    for args in (["releases", "nowhere"], ["rollback", "nowhere"]):
        result = run(*args)
        assert result.exit_code == 1
        assert "error: no node 'nowhere' in the inventory" in result.output

"""``servefleet plan | deploy | rollback | releases | logs NODE`` through click, without the
simulated fleet (the fleet runs are in tests/adapters/test_rollout.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from servefleet.cli.deploy import COMMANDS, merge_logs_group
from servefleet.cli.logs import logs_group
from servefleet.cli.main import CliContext, _Group

REPO_ROOT = Path(__file__).resolve().parents[2]


@click.group(cls=_Group)
@click.option("--project", "project_dir", type=click.Path(path_type=Path), required=True)
@click.option("--stack", default="reference")
@click.option("--verbose", is_flag=True)
@click.pass_context
def group(ctx: click.Context, project_dir: Path, stack: str, verbose: bool) -> None:
    """A group like servefleet's own, with the commands under test."""
    ctx.obj = CliContext(project_dir=project_dir.resolve(), stack=stack, verbose=verbose)


for _command in COMMANDS:
    group.add_command(_command)
group.add_command(merge_logs_group(logs_group))


def run(project: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(group, ["--project", str(project), *args], env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The shipped project with the reference stack (its nodes have no pinned host key)."""
    root = tmp_path / "project"
    for folder in ("nodes", "profiles", "templates"):
        shutil.copytree(REPO_ROOT / folder, root / folder,
                        ignore=shutil.ignore_patterns("sim", "__pycache__"))
    for name in ("Pulumi.yaml", "Pulumi.reference.yaml"):
        shutil.copy(REPO_ROOT / name, root / name)
    return root


def test_deploy_names_missing_secrets_before_touching_anything(project: Path) -> None:
    result = run(project, "deploy", "--yes", env={"HF_TOKEN": ""})
    assert result.exit_code == 1
    assert "error: secret HF_TOKEN is not set in the environment: export HF_TOKEN=…" \
        in result.output


def test_deploy_without_yes_needs_a_terminal(project: Path) -> None:
    result = run(project, "deploy", "--json", env={"HF_TOKEN": "hf_x_cli_test"})
    assert result.exit_code == 2
    assert "pass --yes" in result.output


def test_plan_reports_nodes_it_cannot_verify(project: Path) -> None:
    result = run(project, "plan", "--json", env={"HF_TOKEN": "hf_x_cli_test"})
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["plan"] == []
    assert {e["error_kind"] for e in data["errors"]} == {"HostKeyMismatch"}
    assert all("no host key is pinned" in e["error"] for e in data["errors"])
    assert data["missing_secrets"] == []


def test_plan_of_an_unknown_node(project: Path) -> None:
    result = run(project, "plan", "nowhere")
    assert result.exit_code == 1
    assert "nowhere: not in stack 'reference'" in result.output


def test_logs_group_serves_parse_and_node_logs(project: Path, tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    log.write_text("INFO 11-21 10:00:00 [api_server.py:1] vLLM API server version 0.21.0\n"
                   "INFO:     Application startup complete.\n")
    parsed = run(project, "logs", "parse", str(log), "--json")
    assert parsed.exit_code == 0, parsed.output
    assert json.loads(parsed.output)["outcome"] == "ready"
    node = run(project, "logs", "nowhere", "--follow")
    assert node.exit_code == 1
    assert "error: no node 'nowhere' in the inventory" in node.output


def test_releases_and_rollback_of_an_unknown_node(project: Path) -> None:
    for args in (["releases", "nowhere"], ["rollback", "nowhere"]):
        result = run(project, *args)
        assert result.exit_code == 1
        assert "error: no node 'nowhere' in the inventory" in result.output

"""``servefleet validate`` through click, on real project folders."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from servefleet.cli.main import CliContext, _Group
from servefleet.cli.validate import validate_command

REPO_ROOT = Path(__file__).resolve().parents[2]


@click.group(cls=_Group)
@click.option("--project", "project_dir", type=click.Path(path_type=Path), required=True)
@click.option("--stack", default="reference")
@click.option("--verbose", is_flag=True)
@click.pass_context
def group(ctx: click.Context, project_dir: Path, stack: str, verbose: bool) -> None:
    """The real group's error handling with the command under test."""
    ctx.obj = CliContext(project_dir=project_dir.resolve(), stack=stack, verbose=verbose)


group.add_command(validate_command)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REPO_ROOT / "nodes", root / "nodes", ignore=shutil.ignore_patterns("sim"))
    shutil.copytree(REPO_ROOT / "profiles", root / "profiles")
    shutil.copy(REPO_ROOT / "Pulumi.reference.yaml", root / "Pulumi.reference.yaml")
    return root


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def invoke(root: Path, *args: str) -> Result:
    return CliRunner().invoke(group, ["--project", str(root), *args])


def break_profile(root: Path) -> None:
    """qwen36-fp8: quantization turboquant (error) in a profile the stack uses."""
    path = root / "profiles" / "qwen36-fp8.yaml"
    path.write_text(path.read_text().replace("  kv_cache_dtype: fp8_e4m3\n",
                                             "  kv_cache_dtype: fp8_e4m3\n"
                                             "  quantization: turboquant\n"))


def test_shipped_project_is_green(project: Path):
    result = invoke(project, "validate")
    assert result.exit_code == 0, result.output
    assert "stack reference: 0 error(s)" in result.output
    assert "nodes/dgx-spark-1.yaml" in result.output  # warnings are shown, grouped by file
    assert "ssh.host_keys" in result.output


def test_errors_exit_1_and_are_grouped(project: Path):
    break_profile(project)
    before = tree(project)
    result = invoke(project, "validate")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    header = lines.index("profiles/qwen36-fp8.yaml")
    assert any(line.strip().startswith("error   vllm.quantization: turboquant is not")
               for line in lines[header:])
    assert "vLLM #41560" in result.output and "[quantization-turboquant]" in result.output
    # qwen36-fp8-mtp inherits the mistake through extends.
    assert "stack reference: 2 error(s)" in result.output
    assert "profiles/qwen36-fp8-mtp.yaml" in lines
    assert tree(project) == before


def test_json(project: Path):
    break_profile(project)
    result = invoke(project, "validate", "--json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["ok"] is False and data["counts"]["error"] == 2
    errors = [f for f in data["findings"] if f["severity"] == "error"]
    assert {e["rule"] for e in errors} == {"quantization-turboquant"}
    assert {e["file"] for e in errors} == {"profiles/qwen36-fp8.yaml",
                                           "profiles/qwen36-fp8-mtp.yaml"}
    assert errors[0]["field"] == "vllm.quantization" and errors[0]["value"] == "turboquant"
    assert {"message", "why", "fix"} <= set(errors[0])


def test_json_green(project: Path):
    result = invoke(project, "validate", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["ok"] is True and data["counts"]["warning"] >= 3


def test_load_errors_one_line_each_and_nothing_written(project: Path):
    (project / "profiles" / "evil.yaml").write_text(
        "extends: qwen36-fp8\nmodel:\n  served_name: '$(reboot)'\nvllm:\n  bogus: 1\n")
    before = tree(project)
    result = invoke(project, "validate")
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert any("profiles/evil.yaml: model.served_name: '$(reboot)'" in e for e in errors)
    assert any("profiles/evil.yaml: vllm.bogus: unknown field" in e for e in errors)
    assert "Traceback" not in result.output
    assert tree(project) == before
    as_json = json.loads(invoke(project, "validate", "--json").output)
    assert as_json["ok"] is False and len(as_json["load_errors"]) == 2

"""``servefleet init``: a config repo that validates as created, an example node that is not
loaded but validates once copied, and a second run that keeps every file (edited or not)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from servefleet.core.resources import shipped_dir
from servefleet.core.schema import SCHEMAS

Run = Callable[..., Result]

TOP_FILES = ("Pulumi.yaml", "__main__.py", "Pulumi.home.yaml", ".gitignore",
             "nodes/example.yaml.sample", "nodes/gb10.yaml.sample", "scenarios/seeds.yaml",
             "schemas/profile.schema.json",
             "schemas/node.schema.json", "schemas/stack.schema.json")


@pytest.fixture(autouse=True)
def _no_stack_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVEFLEET_STACK", raising=False)
    monkeypatch.delenv("SERVEFLEET_PROJECT", raising=False)


def _statuses(output: str) -> dict[str, str]:
    return {m[2]: m[1] for m in re.finditer(r"^  (created|kept \(exists\)) +(\S+)$", output,
                                           re.MULTILINE)}


def _validate_here(run_cli: Run, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Result:
    """The real ``servefleet validate --stack home`` from inside ``folder`` (found as the
    project from the current folder, as an operator runs it)."""
    monkeypatch.chdir(folder / "nodes")
    return run_cli("validate", "--stack", "home")


def test_init_creates_a_repo_that_validates_clean(run_cli: Run, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("init", "fleet")
    assert result.exit_code == 0, result.output
    root = tmp_path / "fleet"
    statuses = _statuses(result.output)
    shipped = sorted(p.relative_to(shipped_dir("profiles")).as_posix()
                     for p in shipped_dir("profiles").rglob("*") if p.is_file())
    assert set(statuses) == {*TOP_FILES, *(f"profiles/{p}" for p in shipped)}
    assert set(statuses.values()) == {"created"}
    assert result.output.startswith(f"servefleet init: {root} (stack home)\n")
    steps = result.output.split("Next steps:\n")[1]
    assert steps.splitlines()[0] == "  1. cd fleet"
    for command in ("servefleet node add NAME ADDRESS", "servefleet keyscan NAME",
                    "servefleet validate --stack home",
                    "servefleet plan --stack home", "pulumi stack init home", "pulumi up"):
        assert command in steps

    # Profiles are byte-for-byte copies, with what they name (models/, patches/).
    for rel in shipped:
        assert (root / "profiles" / rel).read_bytes() == (shipped_dir("profiles") / rel
                                                          ).read_bytes()
    assert "from servefleet.adapters.pulumi_program import run" in (
        root / "__main__.py").read_text()
    # Named after the folder: two config repos on one local backend never share a stack.
    assert "name: fleet\n" in (root / "Pulumi.yaml").read_text()
    # Every schema line points at a schema the init wrote, equal to what servefleet builds.
    for name, build in SCHEMAS.items():
        assert json.loads((root / f"schemas/{name}.schema.json").read_text()) == build()
    for path in [root / "Pulumi.home.yaml", root / "nodes/example.yaml.sample",
                 *(root / "profiles").glob("*.yaml")]:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        assert (path.parent / first.split("=", 1)[1]).resolve().is_file(), path
    stack_text = (root / "Pulumi.home.yaml").read_text()
    assert "pulumi config set --secret servefleet:hfToken" in stack_text
    assert "pulumi config set servefleet:profiles.gpu-box qwen36-q4-llamacpp" in stack_text

    checked = _validate_here(run_cli, root, monkeypatch)
    assert checked.exit_code == 0, checked.output
    assert checked.output.splitlines()[-1].startswith("stack home: 0 error(s), 0 warning(s)")


def test_example_node_placed_validates_with_only_the_unpinned_key_warning(
        run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "fleet"
    assert run_cli("init", str(root)).exit_code == 0
    (root / "nodes/gpu-box.yaml").write_text((root / "nodes/example.yaml.sample").read_text())
    stack = root / "Pulumi.home.yaml"
    stack.write_text(stack.read_text().replace(
        "  servefleet:profiles: {}", "  servefleet:profiles:\n    gpu-box: qwen36-q4-llamacpp"))

    result = _validate_here(run_cli, root, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "stack home: 0 error(s), 1 warning(s)" in result.output
    assert "[ssh-host-key-not-pinned]" in result.output


def test_rerun_keeps_every_file_and_adds_what_is_missing(run_cli: Run, tmp_path: Path) -> None:
    root = tmp_path / "fleet"
    assert run_cli("init", str(root)).exit_code == 0
    edited = root / "profiles/qwen36-fp8.yaml"
    edited.write_text(edited.read_text() + "# mine\n")
    untouched = (root / "Pulumi.home.yaml").read_bytes()
    (root / ".gitignore").unlink()

    result = run_cli("init", str(root))
    assert result.exit_code == 0, result.output
    statuses = _statuses(result.output)
    assert statuses.pop(".gitignore") == "created"
    assert set(statuses.values()) == {"kept (exists)"}
    assert edited.read_text().endswith("# mine\n")
    assert (root / "Pulumi.home.yaml").read_bytes() == untouched
    assert not list(root.rglob(".servefleet-init-*"))  # no temporary file left behind


def test_stack_name_from_init_or_the_global_option(run_cli: Run, tmp_path: Path) -> None:
    result = run_cli("init", str(tmp_path / "a"), "--stack", "lab")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "a/Pulumi.lab.yaml").is_file()
    assert "servefleet validate --stack lab" in result.output
    assert run_cli("--stack", "dc1", "init", str(tmp_path / "b")).exit_code == 0
    assert (tmp_path / "b/Pulumi.dc1.yaml").is_file()


def test_bad_stack_name_is_refused_before_writing_and_a_file_in_the_way_is_named(
        run_cli: Run, tmp_path: Path) -> None:
    result = run_cli("init", str(tmp_path / "fleet"), "--stack", "Home Lab")
    assert result.exit_code == 1
    assert "stack name 'Home Lab' is not valid" in result.output
    assert not (tmp_path / "fleet").exists()

    (tmp_path / "nodes").write_text("a file where a folder goes\n")
    result = run_cli("init", str(tmp_path))
    assert result.exit_code == 1
    assert "cannot create the folder" in result.output

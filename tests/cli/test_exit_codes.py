"""Every command's exit code for one error case is the one ``docs/exit-codes.md`` gives:
1 for an error (2 is drift's and ``watch --once``'s "something differs", and click's usage
error). Real CLI, the shipped project (its nodes pin no host key, so nothing is sent)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from servefleet.cli import commands
from tests.conftest import component_unavailable
from tests.reference_project import REPO_ROOT

DOC = REPO_ROOT / "docs/exit-codes.md"
NO_PROJECT = "<no project>"
"""Run in an empty folder with no project above it."""

ERROR_CASES: dict[str, tuple[str, ...]] = {
    "init": ("init", "{tmp}/new", "--stack", "bad/name"),
    "node": ("node", "add", "rtx5090", "127.0.0.1", "--yes"),
    "validate": ("validate", "--stack", "nope"),
    "show": ("show", "nope"),
    "diff-profiles": ("diff-profiles", "nope", "qwen36-fp8"),
    "render": ("render", "nope", "--out", "{tmp}/out"),
    "plan": ("plan", "dgx-spark-1"),
    "deploy": ("deploy", "nope", "--yes"),
    "rollback": ("rollback", "dgx-spark-1"),
    "unlock": ("unlock", "dgx-spark-1", "abc"),
    "releases": ("releases", "dgx-spark-1"),
    "history": ("history", "dgx-spark-1"),
    "models": ("models", "dgx-spark-1"),
    "bench": ("bench", "nope"),
    "logs": ("logs", "dgx-spark-1"),
    "health": ("health", "dgx-spark-1"),
    "gateway": ("gateway", "status"),
    "drift": ("drift", "--json", "dgx-spark-1"),
    "nightly": (NO_PROJECT, "nightly", "install", "--out", "{tmp}/units"),
    "watch": ("watch", "--once", "rtx5090"),
    "probe": ("probe", "dgx-spark-1"),
    "keyscan": ("keyscan", "nope"),
    "doctor": ("doctor", "dgx-spark-1"),
    "tune": ("tune", "nope", "--node", "dgx-spark-1", "--target-concurrency", "4"),
    "import": ("import", "dgx-spark-1"),
    "schema": (NO_PROJECT, "schema", "--write"),
}
"""Command → an error case. ``sim`` is left out: its commands act on the machine's shared
simulated fleet (its errors are ``ServefleetError``s, exit 1 through the group)."""


def documented() -> dict[str, int]:
    """Command → the exit code of an error, from the table (column "1")."""
    codes: dict[str, int] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([a-z][a-z-]*)", cells[0]):
            codes.setdefault(name, 1 if cells[2] else 0)
    return codes


def test_the_table_lists_every_command() -> None:
    assert set(documented()) == set(commands.ALL)
    assert set(documented()) - set(ERROR_CASES) == {"sim"}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_an_error_exits_with_the_documented_code(run: Callable[..., Result],
                                                 run_cli: Callable[..., Result],
                                                 tmp_path: Path, name: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    args = [a.format(tmp=tmp_path) for a in ERROR_CASES[name]]
    if args[0] == NO_PROJECT:
        monkeypatch.delenv("SERVEFLEET_PROJECT", raising=False)
        empty = tmp_path / "empty"
        empty.mkdir()
        monkeypatch.chdir(empty)
        if any((f / "Pulumi.yaml").exists() for f in [empty, *empty.parents]):
            component_unavailable("a folder above the temporary folder holds a Pulumi "
                                  "project: no folder here is outside every project")
        result = run_cli(*args[1:])
    else:
        result = run(*args, env={"HF_TOKEN": ""})
    assert "Usage:" not in result.output, result.output
    assert result.exit_code == documented()[name] == 1, result.output


def test_drift_and_watch_keep_2_for_something_differs() -> None:
    text = DOC.read_text()
    assert "| 2: a node drifted |" in text
    assert "| 2: a deployment wedged, crash-looping or down |" in text


def test_a_usage_error_is_2_and_says_usage(run: Callable[..., Result]) -> None:
    result = run("drift", "--no-such-option", catch_exceptions=True)
    assert result.exit_code == 2
    assert "Usage:" in result.output

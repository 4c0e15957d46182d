"""``servefleet schema``: prints a schema, or writes every one into the project."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from servefleet.core.schema import SCHEMA_FILES, SCHEMAS

Run = Callable[..., Result]


def test_schema_prints_the_profile_schema(run: Run) -> None:
    result = run("schema", "profile")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == SCHEMAS["profile"]()


def test_schema_write_fills_the_projects_schemas_folder(run: Run, project: Path) -> None:
    result = run("schema", "--write")
    assert result.exit_code == 0, result.output
    for name, rel in SCHEMA_FILES.items():
        assert json.loads((project / rel).read_text()) == SCHEMAS[name]()


def test_schema_needs_a_name_or_write(run: Run) -> None:
    result = run("schema", catch_exceptions=True)
    assert result.exit_code == 2
    assert "give a NAME (profile, node, stack) or --write" in result.output

"""The editors' JSON Schemas: every shipped file validates with an off-the-shelf validator,
a typo is flagged, the copies in schemas/ are current and every shipped file points at its
schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from servefleet.core.schema import MODELINE, SCHEMA_FILES, SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {
    "profile": sorted((ROOT / "profiles").glob("*.yaml")),
    "node": sorted((ROOT / "nodes").glob("*.yaml")),
    "stack": [ROOT / "Pulumi.reference.yaml", ROOT / "Pulumi.sim.yaml"],
}


def _validator(name: str) -> Draft202012Validator:
    schema = SCHEMAS[name]()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _errors(name: str, document: Any) -> list[str]:
    """``path: message`` per error; under a union (``vllm`` may be null), the member's."""
    found = []
    for error in _validator(name).iter_errors(document):
        deepest = min(error.context or [error], key=lambda e: e.validator == "type")
        found.append(f"{'.'.join(map(str, error.absolute_path))}: {deepest.message}")
    return found


@pytest.mark.parametrize("name", list(SHIPPED))
def test_every_shipped_file_validates(name: str) -> None:
    assert SHIPPED[name], name
    for path in SHIPPED[name]:
        assert _errors(name, yaml.safe_load(path.read_text())) == [], path


@pytest.mark.parametrize("name", list(SCHEMA_FILES))
def test_shipped_schema_copies_are_current(name: str) -> None:
    shipped = json.loads((ROOT / SCHEMA_FILES[name]).read_text())
    assert shipped == SCHEMAS[name](), "regenerate with `servefleet schema --write`"


@pytest.mark.parametrize("name", list(SHIPPED))
def test_every_shipped_file_points_at_its_schema(name: str) -> None:
    for path in SHIPPED[name]:
        first = path.read_text().splitlines()[0]
        assert first.startswith(MODELINE), path
        target = (path.parent / first.removeprefix(MODELINE)).resolve()
        assert target == (ROOT / SCHEMA_FILES[name]).resolve(), path


def test_a_typo_in_a_profile_is_flagged() -> None:
    overlay = {"extends": "qwen36-fp8", "vllm": {"gpu_memory_utilisation": 0.5}}
    errors = _errors("profile", overlay)
    assert len(errors) == 1 and errors[0].startswith("vllm: Additional properties")
    assert "gpu_memory_utilisation" in errors[0]


def test_a_base_profile_needs_its_required_fields_an_overlay_does_not() -> None:
    assert _errors("profile", {"extends": "qwen36-fp8"}) == []
    missing = _errors("profile", {"description": "x"})
    assert missing and all("is a required property" in e for e in missing)


def test_a_wrong_type_and_the_descriptions_reach_the_editor() -> None:
    assert _errors("profile", {"extends": "qwen36-fp8", "vllm": {"max_num_seqs": "many"}})
    vllm = SCHEMAS["profile"]()["$defs"]["VllmSettings"]["properties"]
    assert vllm["gpu_memory_utilization"]["description"]


def test_stack_schema_knows_the_loader_keys() -> None:
    ok = {"config": {"servefleet:profiles": {"a": "p", "b": {"main": {"profile": "p",
                                                                     "port": 8000}}},
                     "servefleet:profiles.c": "q", "servefleet:hfToken": {"secure": "v1:x"},
                     "servefleet:secretEnv.MY_KEY": {"secure": "v1:y"}, "aws:region": "x"}}
    assert _errors("stack", ok) == []
    assert _errors("stack", {"config": {"servefleet:strategi": "rolling"}})
    assert _errors("stack", {"config": {"servefleet:profiles": {"a": {"main": {"port": 1}}}}})

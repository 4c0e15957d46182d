"""Turn pydantic's validation errors into one line per problem, naming file and field."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

# YAML 1.1 turns unquoted 0.21, on/off/yes/no and 2026-05-05 into numbers, booleans and
# dates; where a string was expected, say so, because the file looks right to a reader.
_STRING_EXPECTED = {"string_type", "literal_error", "enum"}


def _field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            # A key with a line break or escape is shown quoted, so the line stays one line.
            text = str(item) if str(item).isprintable() else repr(item)
            parts.append(("." if parts else "") + text)
    return "".join(parts) or "(top level)"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(
    error: ValidationError,
    source: str,
    prefix: tuple[Any, ...] = (),
    where: Callable[[tuple[Any, ...]], str] | None = None,
) -> list[str]:
    """One line per error: ``source: field.path: reason (got value)``.

    ``where`` turns a model location into the path the operator wrote, for files whose
    layout differs from the model's (the stack file's ``servefleet:profiles.<node>``).
    """
    lines = []
    for item in error.errors(include_url=False):
        loc = prefix + tuple(item["loc"])
        # Pydantic adds the tag of union members and "function-after[...]" to locations.
        loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in {
            "function-after", "literal", "str", "int", "float", "bool"})))
        message = str(item["msg"])
        message = message.removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; see `servefleet show` for the schema)"
        elif item["type"] == "missing":
            message = "required field is missing"
        got = ""
        if item["type"] not in {"missing", "extra_forbidden"} and "input" in item:
            value = item["input"]
            if not isinstance(value, dict | list):
                got = f" (got {_shown(value)})"
            if item["type"] in _STRING_EXPECTED and isinstance(
                value, bool | int | float | datetime.date
            ):
                got += f"; YAML read it as a {type(value).__name__}: put it in quotes"
        path = where(loc) if where is not None else _field_path(loc)
        lines.append(f"{source}: {path}: {message}{got}")
    return lines

"""Turn pydantic's validation errors into one line per problem, naming file and field."""

from __future__ import annotations

import datetime
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from servefleet.core.suggest import closest

# YAML 1.1 turns unquoted 0.21, on/off/yes/no and 2026-05-05 into numbers, booleans and
# dates; where a string was expected, say so, because the file looks right to a reader.
_STRING_EXPECTED = {"string_type", "literal_error", "enum"}
# The values in pydantic's "expected" of a Literal or enum error: "'a', 'b' or 'c'".
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


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


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return []
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def known_fields(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model found at ``loc`` (the mapping that holds the unknown
    key) below ``model``; list indexes and dict keys are stepped over."""
    if model is None:
        return []
    current: list[type[BaseModel]] = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {name: info for c in current for name, info in c.model_fields.items()}
        if part in fields:
            current = _models_in(fields[part].annotation)
            if not current:
                return []
        # else: a mapping's key (a deployment name…): the value model is already current
    return sorted({name for c in current for name in c.model_fields})


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(
    error: ValidationError,
    source: str,
    prefix: tuple[Any, ...] = (),
    where: Callable[[tuple[Any, ...]], str] | None = None,
    model: type[BaseModel] | None = None,
    schema: str | None = None,
    source_of: Callable[[tuple[Any, ...]], str] | None = None,
) -> list[str]:
    """One line per error: ``source: field.path: reason (got value)``.

    ``where`` turns a model location into the path the operator wrote, for files whose
    layout differs from the model's (the stack file's ``servefleet:profiles.<node>``).
    ``model`` (the model validated) lets an unknown field name the closest known one;
    ``schema`` names the ``servefleet schema`` that lists the fields. ``source_of`` picks
    the file per error location (an inherited setting is reported at the file that has it).
    """
    lines = []
    for item in error.errors(include_url=False):
        loc = prefix + tuple(item["loc"])
        # Pydantic adds the tag of union members and "function-after[...]" to locations.
        loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in {
            "function-after", "literal", "str", "int", "float", "bool"})))
        message = str(item["msg"])
        message = message.removeprefix("Value error, ")
        suggestion = _closest_allowed(item)
        if item["type"] == "extra_forbidden":
            message = _unknown_field(model, tuple(item["loc"]), schema)
        elif item["type"] == "missing":
            message = "required field is missing"
        elif suggestion is not None:
            message = suggestion
        got = ""
        if suggestion is None and item["type"] not in {"missing", "extra_forbidden"} \
                and "input" in item:
            value = item["input"]
            if not isinstance(value, dict | list):
                got = f" (got {_shown(value)})"
            if item["type"] in _STRING_EXPECTED and isinstance(
                value, bool | int | float | datetime.date
            ):
                got += f"; YAML read it as a {type(value).__name__}: put it in quotes"
        path = where(loc) if where is not None else _field_path(loc)
        file = source_of(tuple(item["loc"])) if source_of is not None else source
        lines.append(f"{file}: {path}: {message}{got}")
    return lines


def _closest_allowed(item: Any) -> str | None:
    """``unknown value 'fp8_e4m4' (did you mean 'fp8_e4m3'?; allowed: …)`` for a string
    that is close to one of a Literal's or an enum's values; ``None`` otherwise (the
    pydantic message then stands)."""
    value = item.get("input")
    expected = (item.get("ctx") or {}).get("expected")
    if item["type"] not in {"literal_error", "enum"} or not isinstance(value, str) \
            or not isinstance(expected, str):
        return None
    allowed = [match.group(1) for match in _QUOTED.finditer(expected)]
    by_lower = {choice.lower(): choice for choice in allowed}
    match = closest(value, allowed)
    if match is None and value.lower() in by_lower:
        match = by_lower[value.lower()]
    elif match is None:
        found = closest(value.lower(), by_lower)
        match = by_lower[found] if found is not None else None
    if match is None:
        return None
    return f"unknown value {_shown(value)} (did you mean {match!r}?; allowed: {expected})"


def _unknown_field(model: type[BaseModel] | None, loc: tuple[Any, ...],
                   schema: str | None) -> str:
    hints = []
    if loc:
        match = closest(str(loc[-1]), known_fields(model, loc[:-1]))
        if match is not None:
            hints.append(f"did you mean {match!r}?")
    hints.append(f"`servefleet schema {schema}` lists the fields" if schema
                 else "check the spelling")
    return f"unknown field ({'; '.join(hints)})"

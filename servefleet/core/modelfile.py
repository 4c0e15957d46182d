"""A YAML file that is one model (a scenario file, a canary file): read defensively
(:mod:`servefleet.core.yamlfile`), validated, every problem naming the file and field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from servefleet.core.errors import ConfigError
from servefleet.core.pydantic_errors import describe
from servefleet.core.yamlfile import read_yaml

M = TypeVar("M", bound=BaseModel)


def read_model_file(path: Path, model: type[M], top_key: str,
                    display: str | None = None) -> M:
    """``path`` validated as ``model``, whose file holds a mapping with ``top_key``;
    :class:`ConfigError` with one line per problem."""
    shown = display or str(path)
    data = read_yaml(path, shown)
    if not isinstance(data, dict):
        raise ConfigError(f"{shown}: expected a mapping with '{top_key}:' at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(describe(error, shown, model=model)) from None

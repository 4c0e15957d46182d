"""The ``servefleet:watch`` block of a stack file, read into :class:`WatchConfig`."""

from __future__ import annotations

import re
from typing import Any

from servefleet.core.models.watch import WatchConfig

_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake_keys(value: Any) -> Any:
    """Pulumi's camelCase keys (``intervalSeconds``) as the model's field names."""
    if isinstance(value, dict):
        return {(_CAMEL.sub(r"_\1", k).lower() if isinstance(k, str) else k): snake_keys(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [snake_keys(item) for item in value]
    return value


def watch_from_config(value: Any) -> WatchConfig:
    """The model of a ``servefleet:watch`` value (``None``: every default); pydantic's
    ValidationError when a field is wrong."""
    return WatchConfig.model_validate(snake_keys(value or {}))

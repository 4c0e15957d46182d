"""The engine service as docker compose merges a release's compose files.

Only the fields drift compares (``image``, ``command``, ``environment``, ``labels``), with
compose's interpolation from the release's ``.env`` and its ``!reset`` / ``!override`` tags.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pydantic import Field

from servefleet.core.models.common import StrictModel

ENGINE_SERVICE = "engine"
"""The compose service of the engine in every rendered compose file."""


_INTERPOLATION_RE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}"
                               r"|\$([A-Za-z_][A-Za-z0-9_]*)")


def _interpolate(value: str, variables: Mapping[str, str]) -> str:
    """Compose's interpolation of ``${NAME}``, ``${NAME:-default}``, ``$NAME`` and ``$$``."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(3)
        value = variables.get(name)
        if value in (None, "") and match.group(2) is not None:
            return match.group(2)
        return value or ""
    return _INTERPOLATION_RE.sub(replace, value)


def parse_dotenv(content: bytes) -> dict[str, str]:
    """``NAME=value`` lines of a compose ``.env`` / env file (quotes removed, comments
    skipped)."""
    values: dict[str, str] = {}
    for line in content.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def _mapping(value: Any, where: str) -> dict[str, str]:
    """A compose ``environment`` / ``labels`` entry (mapping or ``NAME=value`` list)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): "" if v is None else _scalar(v) for k, v in value.items()}
    if isinstance(value, list):
        result = {}
        for entry in value:
            name, _, rest = str(entry).partition("=")
            result[name] = rest
        return result
    raise ValueError(f"{where} is neither a mapping nor a list")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class _Reset:
    """A compose ``!reset`` value: the key is cleared, whatever earlier files set."""


class _Override:
    """A compose ``!override`` value: replaces the earlier value instead of merging."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _ComposeLoader(yaml.SafeLoader):
    """safe_load plus compose's merge tags (``!reset``, ``!override``)."""


def _construct_reset(loader: yaml.SafeLoader, node: yaml.Node) -> _Reset:
    return _Reset()


def _construct_override(loader: yaml.SafeLoader, node: yaml.Node) -> _Override:
    if isinstance(node, yaml.MappingNode):
        return _Override(loader.construct_mapping(node, deep=True))
    if isinstance(node, yaml.SequenceNode):
        return _Override(loader.construct_sequence(node, deep=True))
    return _Override(loader.construct_scalar(node))  # type: ignore[arg-type]


_ComposeLoader.add_constructor("!reset", _construct_reset)
_ComposeLoader.add_constructor("!override", _construct_override)


class ComposeService(StrictModel):
    """The engine service after docker compose merged the release's compose files."""

    image: str | None = None
    """``image:``."""
    command: tuple[str, ...] | None = None
    """``command:`` as a list."""
    environment: dict[str, str] = Field(default_factory=dict)
    """``environment:`` (not the ``env_file``)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """``labels:``."""


def merged_engine_service(files: Mapping[str, bytes], compose_files: Sequence[str],
                          service: str = ENGINE_SERVICE) -> ComposeService:
    """Merge ``compose_files`` (in ``-f`` order) the way docker compose does for the fields
    drift compares: ``image`` and ``command`` replaced, ``environment`` and ``labels``
    merged by key. Values are interpolated from the release's ``.env``."""
    variables = parse_dotenv(files.get(".env", b""))
    image: str | None = None
    command: tuple[str, ...] | None = None
    environment: dict[str, str] = {}
    labels: dict[str, str] = {}
    for name in compose_files:
        content = files.get(name)
        if content is None:
            continue  # an override outside the release (absolute path): not rendered here
        # A SafeLoader subclass: no arbitrary objects, only the two compose tags.
        document = yaml.load(content, Loader=_ComposeLoader) or {}
        spec = (document.get("services") or {}).get(service)
        if not isinstance(spec, dict):
            continue
        for key, value in list(spec.items()):
            if isinstance(value, _Reset):
                spec[key] = None
                if key == "environment":
                    environment = {}
                elif key == "labels":
                    labels = {}
            elif isinstance(value, _Override):
                spec[key] = value.value
                if key == "environment":
                    environment = {}
                elif key == "labels":
                    labels = {}
        if spec.get("image") is not None:
            image = _interpolate(str(spec["image"]), variables)
        if "command" in spec:
            raw = spec["command"]
            args = raw if isinstance(raw, list) else str(raw or "").split()
            command = tuple(_interpolate(_scalar(a), variables) for a in args) or None
        environment.update({k: _interpolate(v, variables) for k, v in
                            _mapping(spec.get("environment"), f"{name}: environment").items()})
        labels.update({k: _interpolate(v, variables) for k, v in
                       _mapping(spec.get("labels"), f"{name}: labels").items()})
    return ComposeService(image=image, command=command, environment=environment,
                          labels=labels)

"""Reading YAML written by people, defensively.

Profiles and inventories come from git, but a hostile or broken file must fail with one
clear line and cost nothing: the size is capped before parsing, anchors and aliases are
refused (the "billion laughs" alias bomb needs them; ``extends:`` is the way to share
settings), duplicate keys are refused, nesting depth is bounded, and numbers longer than
:data:`MAX_NUMBER_CHARS` are refused before Python turns them into an int (which raises past
4300 digits, and no setting needs more than a few). Only regular files are read, and never
more than the cap, whatever size the file system reports (``/dev/zero``, a FIFO).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from servefleet.core.errors import ConfigError
from servefleet.core.readfile import FileRefused, read_regular_file

MAX_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_NUMBER_CHARS = 64


def _check_number_length(node: Any) -> None:
    """Refuse a number literal longer than :data:`MAX_NUMBER_CHARS` (int or float)."""
    if len(str(node.value)) > MAX_NUMBER_CHARS:
        raise yaml.constructor.ConstructorError(
            None, None, f"a number of {len(str(node.value))} characters is longer than "
            f"{MAX_NUMBER_CHARS}; no setting needs one: check the value", node.start_mark,
        )


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, anchors, merge keys, duplicate or unhashable keys,
    and nesting deeper than :data:`MAX_DEPTH` (checked while composing: PyYAML's composer
    is recursive, so a file of 100 000 ``[`` would otherwise blow Python's stack)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._nesting = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "YAML aliases (*name) are not allowed; use 'extends:' instead",
                event.start_mark,
            )
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "YAML anchors (&name) are not allowed; use 'extends:' instead",
                event.start_mark,
            )
        if self._nesting >= MAX_DEPTH:
            raise yaml.constructor.ConstructorError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark,
            )
        self._nesting += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._nesting -= 1

    def construct_yaml_int(self, node: Any) -> Any:
        _check_number_length(node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: Any) -> Any:
        _check_number_length(node)
        return super().construct_yaml_float(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise yaml.constructor.ConstructorError(
                    None, None, "YAML merge keys (<<) are not allowed; use 'extends:' instead",
                    key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value, not a list or mapping",
                    key_node.start_mark,
                ) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max([_depth(v, level + 1) for v in value.values()] or [level])
    if isinstance(value, list):
        return max([_depth(v, level + 1) for v in value] or [level])
    return level


def _too_large(source: str, size: int) -> ConfigError:
    return ConfigError(
        f"{source}: file is {size // 1024} KiB, larger than the {MAX_BYTES // 1024} KiB "
        "limit; refusing to read it"
    )


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML ``text`` (named ``source`` in errors) with the limits above."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_BYTES:
        raise _too_large(source, size)
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        reason = " ".join((error.problem or error.context or "malformed YAML").split())
        if reason.startswith("could not determine a constructor for the tag"):
            reason = f"YAML tags are not allowed ({reason.rsplit(' ', 1)[-1]})"
        raise ConfigError(f"{source}:{where}: {reason}") from None
    except yaml.YAMLError as error:
        # Reader errors (NUL bytes, control characters) span several lines; keep one.
        reason = " ".join(str(error).split())
        raise ConfigError(f"{source}: malformed YAML ({reason})") from None
    if _depth(data) > MAX_DEPTH:
        raise ConfigError(f"{source}: nested deeper than {MAX_DEPTH} levels")
    return data


def read_yaml(path: Path, display: str | None = None) -> Any:
    """Read and parse one YAML file: a regular file, read up to the cap and no further."""
    source = display or str(path)
    try:
        data = read_regular_file(path, MAX_BYTES)
    except FileRefused as error:
        raise ConfigError(f"{source}: {error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text") from None
    return parse_yaml(text, source)

"""Constrained string types shared by the models.

Every value that may end up in a path, a compose file or a command line is constrained
here, so hostile input fails at load time with a clear message rather than later in a shell.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?\Z")
# Characters a POSIX shell treats specially; refused wherever a value is not meant to hold them.
SHELL_META = set(";&|`$<>()\\\"'*?[]{}!#~\n\r\t\0 ")


def _check_text(value: str) -> str:
    # A trailing newline from a YAML block scalar, a tab or an escape sequence would split a
    # rendered line, a log line or a shell word; no field servefleet renders needs one.
    bad = sorted({c for c in value if not c.isprintable() and c != " "})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise ValueError(
            f"{value[:40]!r} contains control characters ({shown}); remove them (a YAML "
            "'|' or '>' block adds a trailing newline: use a plain or quoted scalar)"
        )
    return value


def check_json_text(value: object) -> object:
    """Refuse control characters in every string (keys included) of a JSON-like value."""
    if isinstance(value, str):
        _check_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_json_text(key)
            check_json_text(item)
    elif isinstance(value, list | tuple):
        for item in value:
            check_json_text(item)
    return value


def _check_name(value: str) -> str:
    _check_text(value)
    if ".." in value or "/" in value or not NAME_RE.match(value):
        raise ValueError(
            f"{value!r} is not a valid name: use lower-case letters, digits, '.', '_' and '-' "
            "(no path separators, no '..', at most 63 characters)"
        )
    return value


def _check_safe_token(value: str) -> str:
    bad = sorted({c for c in value if c in SHELL_META or not c.isprintable()})
    if bad or not value:
        shown = "".join(bad).encode("unicode_escape").decode()
        raise ValueError(
            f"{value!r} contains characters that are not allowed here ({shown!r}); "
            "use letters, digits and . _ - / : @ = + , only"
        )
    return value


def _check_abs_path(value: str) -> str:
    _check_safe_token(value)
    if not (value.startswith("/") or value.startswith("~/")):
        raise ValueError(f"{value!r} must be an absolute path (or start with ~/)")
    if any(part == ".." for part in value.split("/")):
        raise ValueError(f"{value!r} must not contain '..'")
    return value


CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}\Z")
"""Docker's own rule for container names (``[a-zA-Z0-9][a-zA-Z0-9_.-]+``), bounded."""


def _check_container_name(value: str) -> str:
    if not CONTAINER_NAME_RE.match(value):
        raise ValueError(
            f"{value!r} is not a Docker container name or id: letters, digits, '_', '.' and "
            "'-', starting with a letter or digit (as `docker ps --format '{{.Names}}'` "
            "prints it, without a leading '/')"
        )
    return value


def _check_single_line(value: str) -> str:
    return _check_text(value)


SHA256_HEX_RE = re.compile(r"^[0-9a-f]{64}\Z")
"""A sha256 digest in hex, as ``sha256sum`` prints it."""


def _check_sha256(value: str) -> str:
    if not SHA256_HEX_RE.match(value):
        raise ValueError(f"{value!r} is not a sha256 hex digest (64 lower-case hex digits)")
    return value


Text = Annotated[str, AfterValidator(_check_text)]
"""Any string that reaches a rendered file, a log line or a command: printable characters
only (no newline, tab, escape or NUL). Every other string type here builds on it."""

JsonText = Annotated[Any, AfterValidator(check_json_text)]
"""Free-form JSON (``hf_overrides``…) whose strings, keys included, are :data:`Text`."""

Name = Annotated[str, AfterValidator(_check_name)]
"""A node, profile or deployment name: safe as a file name and a compose project name."""

SafeToken = Annotated[str, AfterValidator(_check_safe_token)]
"""A value without shell metacharacters or whitespace (model ids, hosts, tags)."""

AbsPath = Annotated[str, AfterValidator(_check_abs_path)]
"""An absolute path without '..' or shell metacharacters."""

ContainerName = Annotated[str, AfterValidator(_check_container_name)]
"""A Docker container's name or id, safe as a shell word."""

SingleLine = Annotated[str, AfterValidator(_check_single_line)]
"""Free text on one line (env values, labels): :data:`Text` under its older name."""

Sha256Hex = Annotated[str, AfterValidator(_check_sha256)]
"""The sha256 a pinned file must have (64 lower-case hex digits): a mismatch is refused."""


class StrictModel(BaseModel):
    """Base of every model: immutable, unknown keys rejected, docstrings kept as descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

"""Constrained string types shared by the models.

Every value that may end up in a path, a compose file or a command line is constrained
here, so hostile input fails at load time with a clear message rather than later in a shell.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$")
# Characters a POSIX shell treats specially; refused wherever a value is not meant to hold them.
SHELL_META = set(";&|`$<>()\\\"'*?[]{}!#~\n\r\t\0 ")


def _check_name(value: str) -> str:
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


def _check_single_line(value: str) -> str:
    if any(c in value for c in "\n\r\0"):
        raise ValueError("must be a single line without NUL, CR or LF characters")
    return value


Name = Annotated[str, AfterValidator(_check_name)]
"""A node, profile or deployment name: safe as a file name and a compose project name."""

SafeToken = Annotated[str, AfterValidator(_check_safe_token)]
"""A value without shell metacharacters or whitespace (model ids, hosts, tags)."""

AbsPath = Annotated[str, AfterValidator(_check_abs_path)]
"""An absolute path without '..' or shell metacharacters."""

SingleLine = Annotated[str, AfterValidator(_check_single_line)]
"""Free text that must stay on one line (env values, labels)."""


class StrictModel(BaseModel):
    """Base of every model: immutable, unknown keys rejected, docstrings kept as descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

"""A profile's pin (``model.revision``, ``model.weights_gib``, ``model.config``) written as
text, so that the operator's comments and layout stay as they are.

Only the lines of those keys in the top-level ``model:`` block change: a key that is there
gets its new value (its sub-block, for ``config``), a key that is not is added (``revision``
after ``id``, the others at the end of the block), and a profile without a ``model:`` block
of its own (one that ``extends`` another) gets one at its end. The edit is checked by parsing
the result: anything other than exactly these keys changed (an unusual layout: a flow
mapping, a multi-line scalar) is refused with the lines to write by hand, never written.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from servefleet.core.errors import ConfigError
from servefleet.core.yamlfile import parse_yaml

_TOP_KEY = re.compile(r"^[^\s#]")
_MODEL_LINE = re.compile(r"^model:[ \t]*(#.*)?$")


@dataclass(frozen=True)
class ProfilePin:
    """What ``models pin --profile`` writes into the profile's ``model`` block."""

    revision: str | None
    """The commit (``model.revision``); ``None``: left as it is (the staged snapshot's
    ``model.source.revision`` pins it)."""
    weights_gib: float
    """``model.weights_gib``: the size of the checkpoint's weight files."""
    config_file: str | None
    """``model.config.file`` (relative to ``profiles/``); ``None`` with
    :attr:`clear_config`: ``model.config: null``, else left as it is."""
    config_sha256: str | None
    clear_config: bool = False
    """Write ``config: null`` (the planner refuses the config: a pin of it would only make
    validate refuse the profile; null also stops inheriting a parent's pin)."""
    note: str = ""
    """A comment for the weights line (what the size was read from)."""

    def values(self) -> dict[str, Any]:
        """The ``model`` keys this pin sets, as the parsed profile will hold them."""
        found: dict[str, Any] = {}
        if self.revision is not None:
            found["revision"] = self.revision
        found["weights_gib"] = self.weights_gib
        if self.config_file is not None:
            found["config"] = {"file": self.config_file, "sha256": self.config_sha256}
        elif self.clear_config:
            found["config"] = None
        return found

    def lines(self, indent: str = "  ") -> dict[str, list[str]]:
        """Each key's lines at ``indent`` (its children one more level in)."""
        note = f"  # {self.note}" if self.note else ""
        found: dict[str, list[str]] = {}
        if self.revision is not None:
            found["revision"] = [f"{indent}revision: {self.revision}\n"]
        found["weights_gib"] = [f"{indent}weights_gib: {self.weights_gib}{note}\n"]
        child = indent + (indent if indent.strip(" ") == "" and indent else "  ")
        if self.config_file is not None:
            found["config"] = [f"{indent}config:\n", f"{child}file: {self.config_file}\n",
                               f"{child}sha256: {self.config_sha256}\n"]
        elif self.clear_config:
            found["config"] = [f"{indent}config: null  # not plannable (servefleet models "
                               "pin says why)\n"]
        return found

    def by_hand(self) -> str:
        """The block to write by hand when the edit is refused."""
        return "model:\n" + "".join(line for block in self.lines().values() for line in block)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block(lines: list[str], start: int) -> int:
    """The end (exclusive) of the top-level block starting at ``start``, before trailing
    blank lines and comments at the left margin (those belong to what follows)."""
    end = next((i for i in range(start + 1, len(lines)) if _TOP_KEY.match(lines[i])),
               len(lines))
    while end > start + 1 and not _is_content(lines[end - 1]) \
            and not lines[end - 1].startswith(" "):
        end -= 1
    return end


def _key_span(lines: list[str], start: int, end: int, indent: str,
              key: str) -> tuple[int, int] | None:
    """Where ``key`` (and any lines below it, more indented) sits in the block."""
    pattern = re.compile(rf"^{re.escape(indent)}{re.escape(key)}:(\s|$)")
    for i in range(start + 1, end):
        if pattern.match(lines[i]):
            stop = i + 1
            while stop < end and (not _is_content(lines[stop])
                                  or _indent(lines[stop]) > len(indent)):
                stop += 1
            while stop > i + 1 and not _is_content(lines[stop - 1]):
                stop -= 1  # blank lines and comments after the key stay where they are
            return i, stop
    return None


def write_pin(text: str, source: str, pin: ProfilePin) -> str:
    """``text`` (the profile file ``source``) with ``pin`` written into its ``model:``
    block; a :class:`ConfigError` naming the block to write by hand when the text is not
    laid out so that the edit changes only those keys."""
    data = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: not a mapping of profile fields")
    by_hand = f"; write it by hand:\n{pin.by_hand()}"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = next((i for i, line in enumerate(lines) if _MODEL_LINE.match(line.rstrip("\n"))),
                 None)
    if start is None:
        if "model" in data:
            raise ConfigError(f"{source}: 'model:' is not written as a block ('model:' on a "
                              f"line of its own){by_hand}")
        new_lines = [*lines, "model:\n", *(line for block in pin.lines().values()
                                           for line in block)]
    else:
        end = _block(lines, start)
        indent = next((line[:_indent(line)] for line in lines[start + 1:end]
                       if _is_content(line)), "  ")
        if not indent:
            raise ConfigError(f"{source}: the 'model:' block is empty{by_hand}")
        new_lines = list(lines)
        for key, block in pin.lines(indent).items():
            end = _block(new_lines, start)
            span = _key_span(new_lines, start, end, indent, key)
            if span is not None:
                new_lines[span[0]:span[1]] = block
                continue
            after = _key_span(new_lines, start, end, indent, "id") if key == "revision" \
                else None
            at = after[1] if after is not None else end
            new_lines[at:at] = block
    new = "".join(new_lines)
    want = copy.deepcopy(data)
    model = want.get("model")
    want["model"] = {**(model if isinstance(model, dict) else {}), **pin.values()}
    if parse_yaml(new, source) != want:
        raise ConfigError(f"{source}: could not write the pin without changing other "
                          f"settings (an unusual layout of the model block){by_hand}")
    return new

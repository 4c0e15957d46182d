"""Programs sent to a node as one source, kept here as several modules.

A script that runs on a node (the GPU probe on ``python3 -``, the drift collector through
its bootstrap) must arrive as one self-contained program. Kept here in parts, each part is
a module of its own (linted, type-checked, imported by tests) that imports what it uses
from the parts before it. :func:`assemble` joins them, in a fixed order, into the program
the node gets: the first part whole (its docstring, ``from __future__`` and the first
imports head the program), then each later part from the line after its
:data:`PART_MARKER` on. What stands above the marker stays on this machine: the part's
docstring, its ``from __future__`` and its imports of earlier parts (on the node those names
are already defined, earlier in the same program); what its code imports from the standard
library goes below the marker. A ``# isort: split`` line just above the marker keeps the
import sorter from moving imports across it.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

PART_MARKER = "# ---- node script part: the node gets the lines below, those above stay here ----"
"""The line that starts what a later part adds to the program."""


def _read_part(package: str, part: str) -> bytes:
    # "servefleet.core.gpu:probe_parse.py" names a file of another package: a pure part
    # that the core uses too lives there.
    owner, _, name = part.rpartition(":")
    return resources.files(owner or package).joinpath(name).read_bytes()


def assemble(package: str, parts: Sequence[str]) -> bytes:
    """The program made of the files ``parts`` of ``package``, in that order (see the
    module docstring); a part written ``other.package:file.py`` is read from that package.
    Raises :class:`ValueError` where a later part has no marker line, or more than one, or
    the first part has one."""
    marker = b"\n" + PART_MARKER.encode() + b"\n"
    texts = [_read_part(package, name) for name in parts]
    if marker in b"\n" + texts[0]:
        raise ValueError(f"{package}: {parts[0]} is the first part: it has no marker line")
    program = [texts[0]]
    for name, text in zip(parts[1:], texts[1:], strict=True):
        _, found, body = (b"\n" + text).partition(marker)
        if not found or marker in b"\n" + body:
            raise ValueError(f"{package}: {name} needs exactly one line {PART_MARKER!r}")
        program.append(body)
    return b"".join(program)

"""The releases command's output, parsed into a node's release folders.

The releases command prints sections introduced by ``@@`` marker lines::

    @@servefleet-releases 1
    @@current
    releases/<id>                  (readlink of <base>/<deployment>/current)
    @@previous
    releases/<id>                  (readlink of <base>/<deployment>/previous)
    @@release <id>
    {…}                            (that release's manifest.json), one section per release
    @@end

``@@end`` proves the output is complete; without it the parser refuses the output rather
than list half the releases.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from servefleet.core.observed.container import RELEASES_DIR
from servefleet.core.observed.deployment import ReleaseInfo

RELEASES_HEADER = "@@servefleet-releases 1"
END = "@@end"
MANIFEST_FILE = "manifest.json"
"""Name of the manifest inside each release folder."""


def _sections(text: str, header: str) -> Iterator[tuple[str, list[str]]]:
    """``(marker, lines)`` per ``@@`` section; raise ValueError when incomplete."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != header:
        raise ValueError(f"output does not start with {header!r}: {text[:200]!r}")
    if END not in (line.strip() for line in lines):
        raise ValueError("output is incomplete (no @@end line): the command was cut short")
    marker: str | None = None
    body: list[str] = []
    for line in lines[1:]:
        if line.startswith("@@"):
            if marker is not None:
                yield marker, body
            marker, body = line[2:].strip(), []
            if marker == END[2:]:
                return
        elif marker is not None:
            body.append(line)


def _manifest(lines: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    text = "\n".join(lines).strip()
    if not text:
        return None, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"{MANIFEST_FILE} is not valid JSON ({error.msg} at line {error.lineno})"
    if not isinstance(value, dict):
        return None, f"{MANIFEST_FILE} is not a JSON object"
    return value, None


def _release_of_link(target: str) -> str | None:
    target = target.strip().rstrip("/")
    if not target:
        return None
    parent, _, name = target.rpartition("/")
    if parent.rstrip("/").rpartition("/")[2] != RELEASES_DIR and parent != RELEASES_DIR:
        return None
    return name or None


def _link(lines: list[str] | None) -> str | None:
    """The release a link names: its first non-blank line (``readlink`` output)."""
    found = [ln for ln in lines or [] if ln.strip()]
    return _release_of_link(found[0]) if found else None


def parse_releases(text: str) -> list[ReleaseInfo]:
    """Parse the releases command's output, newest first (by the manifests' times)."""
    links: dict[str, str | None] = {"current": None, "previous": None}
    found: list[ReleaseInfo] = []
    for marker, body in _sections(text, RELEASES_HEADER):
        if marker in links:
            links[marker] = _link(body)
        elif marker.startswith("release "):
            release_id = marker.split(" ", 1)[1].strip()
            manifest, _ = _manifest(body)
            found.append(ReleaseInfo(release_id=release_id, manifest=manifest))
    found = [r.model_copy(update={"current": r.release_id == links["current"],
                                  "previous": r.release_id == links["previous"]})
             for r in found]
    found.sort(key=lambda r: (r.created_at, r.release_id), reverse=True)
    return found


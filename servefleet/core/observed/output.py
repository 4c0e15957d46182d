"""The observe and releases commands' output, parsed into a node's deployments and releases.

The observe command prints sections introduced by ``@@`` marker lines::

    @@servefleet-observe 1
    @@lock
    <the lock's owner file, if the node is locked>
    @@deployment main
    @@current
    releases/<id>                  (readlink of <base>/main/current)
    @@releases
    <id>                           (one per line)
    @@previous
    releases/<id>                  (readlink of <base>/main/previous)
    @@last-good
    releases/<id>                  (readlink of <base>/main/last-good)
    @@gated
    release=<id> started=<time> …  (<base>/main/gated: the engine that passed its gate)
    @@adopted
    release=<id> container=<id> …  (<base>/main/adopted: a container taken over by hand)
    @@manifest
    {…}                            (current release's manifest.json)
    @@files
    <sha256>  ./<path>             (every file of the current release but manifest.json;
                                    engine.env hashed in its secret-hashed form)
    @@secret-digests
    <NAME> <hmac>                  (only when the controller sent a key: see
                                    servefleet.core.envdigest.keyed_value_digests)
    @@candidate
    {"name": …, "status": …}       (the container the stack adopts, while there is no
                                    current release)
    @@containers
    {"name": …, "status": …}       (one JSON object per container of the compose project,
                                    and the adopted container)
    @@end

``@@end`` proves the output is complete; without it the parser refuses the output rather
than plan from half a picture.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from servefleet.core.observed.container import (
    RELEASES_DIR,
    ObservedContainer,
    as_adopted,
    parse_container,
)
from servefleet.core.observed.deployment import ObservedDeployment, ObservedNode, ReleaseInfo
from servefleet.core.observed.gate import parse_gate_mark

OBSERVE_HEADER = "@@servefleet-observe 1"
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


def _file_hashes(lines: list[str] | None) -> dict[str, str] | None:
    """``sha256sum`` lines (paths as ``./<path>``) as ``path → sha256``."""
    if lines is None:
        return None
    hashes: dict[str, str] = {}
    for line in lines:
        digest, sep, path = line.partition("  ")
        if sep and len(digest) == 64:
            hashes[path.removeprefix("./")] = digest
    return hashes


def _release_of_link(target: str) -> str | None:
    target = target.strip().rstrip("/")
    if not target:
        return None
    parent, _, name = target.rpartition("/")
    if parent.rstrip("/").rpartition("/")[2] != RELEASES_DIR and parent != RELEASES_DIR:
        return None
    return name or None


def _candidate(lines: list[str] | None) -> ObservedContainer | None:
    found = [ln for ln in lines or [] if ln.strip()]
    try:
        return parse_container(found[0]) if found else None
    except (ValueError, TypeError):
        return None


def _deployment(name: str, parts: dict[str, list[str]]) -> ObservedDeployment:
    manifest, manifest_error = _manifest(parts.get("manifest", []))
    adopted = parse_gate_mark(parts.get("adopted"))
    containers: list[ObservedContainer] = []
    docker_error: str | None = None
    for line in parts.get("containers", []):
        if not line.strip():
            continue
        try:
            container = parse_container(line)
        except (ValueError, TypeError):
            docker_error = line.strip()[:300]
            continue
        containers.append(as_adopted(container, adopted))
    if "docker-error" in parts:
        docker_error = " ".join(ln.strip() for ln in parts["docker-error"] if ln.strip())[:300]
    # Running containers first: they are what serves.
    containers.sort(key=lambda c: (not c.running, c.name))
    gated = parse_gate_mark(parts.get("gated"))
    return ObservedDeployment(
        name=name,
        current_release=_link(parts.get("current")),
        releases=tuple(sorted(ln.strip() for ln in parts.get("releases", []) if ln.strip())),
        manifest=manifest,
        manifest_error=manifest_error,
        file_hashes=_file_hashes(parts.get("files")),
        containers=tuple(containers),
        docker_error=docker_error or None,
        previous_release=_link(parts.get("previous")),
        last_good=_link(parts.get("last-good")),
        gated_release=gated.get("release"),
        gated_started_at=gated.get("started"),
        secret_digests=_secret_digests(parts.get("secret-digests")),
        adopted_release=adopted.get("release") or None,
        adopted_from=adopted.get("name") or None,
        adopt_candidate=_candidate(parts.get("candidate")),
    )


def _secret_digests(lines: list[str] | None) -> dict[str, str] | None:
    """``NAME <hex HMAC>`` lines; ``None`` when absent or unreadable (python3 missing)."""
    if lines is None:
        return None
    digests: dict[str, str] = {}
    for line in lines:
        name, _, digest = line.strip().partition(" ")
        if not name:
            continue
        if len(digest) != 64:
            return None
        digests[name] = digest
    return digests


def _link(lines: list[str] | None) -> str | None:
    """The release a link names: its first non-blank line (``readlink`` output)."""
    found = [ln for ln in lines or [] if ln.strip()]
    return _release_of_link(found[0]) if found else None


def parse_observation(text: str) -> ObservedNode:
    """Parse the observe command's output (see the module docstring).

    A deployment whose folder does not exist is left out: it has never been deployed.
    """
    lock_owner: str | None = None
    baselines: str | None = None
    deployments: dict[str, ObservedDeployment] = {}
    current: str | None = None
    exists = False
    parts: dict[str, list[str]] = {}

    def flush() -> None:
        if current is not None and exists:
            deployments[current] = _deployment(current, parts)
        elif current is not None and "candidate" in parts:
            # Never deployed, but the container the stack adopts runs there.
            deployments[current] = ObservedDeployment(
                name=current, adopt_candidate=_candidate(parts["candidate"]))

    for marker, body in _sections(text, OBSERVE_HEADER):
        if marker == "lock":
            owner = "\n".join(body).strip()
            lock_owner = owner or None
        elif marker == "baselines":
            baselines = "\n".join(body).strip() or None
        elif marker.startswith("deployment "):
            flush()
            current, exists, parts = marker.split(" ", 1)[1], True, {}
        elif marker == "absent":
            exists = False
        else:
            parts[marker] = body
    flush()
    return ObservedNode(lock_owner=lock_owner, deployments=deployments,
                        baselines_text=baselines)


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


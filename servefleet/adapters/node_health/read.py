"""What the health checks read from a node, in one command, and how it is read: the node's
clock, its baselines file and the engine's log with docker's timestamps, split into the
runs before and since the container's last start."""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from servefleet.adapters import remote
from servefleet.core.baselines import BASELINE_FILE, BaselineBook, parse_book
from servefleet.core.bootlog import BootFacts, BootLogParser, reader_for
from servefleet.core.secrets import SecretMask

LOG_TIMEOUT_SECONDS = 120
TAIL_EVIDENCE = 8
"""Last log lines shown when a log proves neither ready nor failed."""

# -- remote commands (argv builders, as in servefleet.adapters.remote) ----------------------
READ_SCRIPT = (
    'base=$1; dep=$2; '
    "printf 'now=%s\\n' \"$(date -u +%s)\"; "
    'f=$base/' + BASELINE_FILE + '; '
    "printf 'baselines='; if [ -r \"$f\" ]; then base64 < \"$f\" | tr -d '\\n'; fi; echo; "
    'c=$(docker ps -aq --latest --filter "label=' + remote.COMPOSE_PROJECT_LABEL + '=$dep") '
    '|| exit 1; '
    "[ -n \"$c\" ] || { printf '@@no-container\\n'; exit 0; }; "
    "printf 'image=%s\\n' \"$(docker inspect --format '{{.Image}}' \"$c\" 2>/dev/null)\"; "
    "printf '@@log\\n'; exec docker logs --timestamps \"$c\" 2>&1"
)


def read_log_and_baselines(base_dir: str, deployment: str) -> list[str]:
    """Read-only: the node's clock (``now=<epoch>``), its baselines file (``baselines=`` +
    base64), the image ID of the deployment's newest container (``image=``), then ``@@log``
    and that container's log with docker's timestamps, stdout and stderr merged in order."""
    return ["sh", "-c", READ_SCRIPT, "sh", base_dir.rstrip("/"),
            remote.compose_project(deployment)]


WRITE_SCRIPT = (
    'f=$1/' + BASELINE_FILE + '; tmp=$f.tmp.$$; '
    'cat > "$tmp" && mv -f "$tmp" "$f"'
)


def write_baselines(base_dir: str) -> list[str]:
    """Replace the node's baselines file with stdin (written to a temporary file, then
    renamed, so a reader never sees half a file)."""
    return ["sh", "-c", WRITE_SCRIPT, "sh", base_dir.rstrip("/")]


# -- reading the answers ---------------------------------------------------------------------
@dataclass(frozen=True)
class NodeRead:
    """The answer of :func:`read_log_and_baselines`."""

    now: float | None
    """The node's clock (epoch seconds)."""
    book: BaselineBook
    """The node's baselines."""
    book_problem: str | None
    """Why the baselines file could not be read (then it is treated as empty)."""
    lines: tuple[bytes, ...]
    """Log lines, each starting with docker's RFC 3339 timestamp; empty: no container."""
    has_container: bool
    """The deployment has a container."""
    image_id: str | None = None
    """Image ID (``sha256:…``) of the deployment's newest container."""


def parse_read(text: bytes) -> NodeRead:
    """Split the answer of :func:`read_log_and_baselines`."""
    head, marker, log = text.partition(b"@@log\n")
    now: float | None = None
    image_id: str | None = None
    book, problem = BaselineBook(), None
    has_container = bool(marker)
    for raw in head.splitlines():
        line = raw.decode("utf-8", "replace")
        if line.startswith("now="):
            with contextlib.suppress(ValueError):
                now = float(line[4:])
        elif line.startswith("image=sha256:"):
            image_id = line[6:].strip()
        elif line.startswith("baselines=") and line[10:].strip():
            try:
                decoded = base64.b64decode(line[10:].strip(), validate=True)
            except (binascii.Error, ValueError):
                decoded = b"not base64"
            book, problem = parse_book(decoded.decode("utf-8", "replace"))
    return NodeRead(now, book, problem, tuple(log.splitlines(keepends=True)), has_container,
                    image_id)


STAMP_RE = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z\s")


def stamp_key(stamp: bytes | str) -> tuple[str, int] | None:
    """``2026-11-21T10:00:03.5Z`` → ``("2026-11-21T10:00:03", 500000000)``: comparable
    whatever the number of fraction digits (docker trims trailing zeros in ``inspect``,
    pads them in ``logs --timestamps``)."""
    raw = stamp.encode() if isinstance(stamp, str) else stamp
    match = STAMP_RE.match(raw.rstrip() + b" ")
    if match is None:
        return None
    fraction = (match.group(2) or b"").decode()
    return match.group(1).decode(), int(fraction.ljust(9, "0")) if fraction else 0


def _start(stamp: str | None) -> tuple[float, int] | None:
    """Whole epoch seconds and nanoseconds of an RFC 3339 UTC time from docker; ``None``
    when unknown or docker's zero time (``0001-01-01…``: never started)."""
    key = stamp_key(stamp) if stamp else None
    if key is None or key[0].startswith("0001-"):
        return None
    seconds = datetime.strptime(key[0], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return seconds, key[1]


def epoch_of(stamp: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 UTC time from docker; ``None`` for docker's zero time."""
    start = _start(stamp)
    return None if start is None else start[0] + start[1] / 1e9


def key_of_epoch(epoch: float) -> tuple[str, int]:
    """The :func:`stamp_key` of an epoch time."""
    moment = datetime.fromtimestamp(int(epoch), UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S"), round((epoch - int(epoch)) * 1e9)


def since_of_stamp(stamp: str | None) -> str:
    """``docker logs --since`` of a container's ``StartedAt``, to the nanosecond
    (``<seconds>.<nanoseconds>``): whole seconds would let in the last lines of the run
    before a restart, written in the same second; ``0`` (the whole log) when unknown."""
    start = _start(stamp)
    return "0" if start is None else f"{int(start[0])}.{start[1]:09d}"


def split_runs(lines: Iterable[bytes], started_at: str | float | None
               ) -> tuple[list[bytes], list[bytes]]:
    """Log lines before the container's last start (an RFC 3339 time from docker, or epoch
    seconds) — earlier runs — and since it."""
    if isinstance(started_at, int | float):
        start: tuple[str, int] | None = key_of_epoch(started_at)
    else:
        start = stamp_key(started_at) if started_at else None
    earlier: list[bytes] = []
    current: list[bytes] = []
    for line in lines:
        key = stamp_key(line)
        if start is not None and key is not None and key < start:
            earlier.append(line)
        else:
            current.append(line)
    return earlier, current


def parse_lines(lines: Iterable[bytes], engine: str) -> BootFacts:
    """Boot facts of log lines (docker timestamps are understood by the parser)."""
    parser = BootLogParser(reader_for(engine))
    for line in lines:
        parser.feed(line)
    return parser.close()


def _tail(lines: Sequence[bytes], mask: SecretMask, count: int = TAIL_EVIDENCE) -> tuple[str, ...]:
    shown = []
    for raw in lines[-count:]:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        key = stamp_key(raw)
        if key is not None:
            text = text.split(" ", 1)[1] if " " in text else ""
        shown.append(mask(text[-300:]))
    return tuple(shown)

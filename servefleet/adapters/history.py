"""Read a deployment's history from its node: one read-only command, one round trip.

The command prints the tail of the deployment's ``audit.log`` and ``bench.jsonl``, the
node's baselines file, then the release folders with their manifests (the very script of
``servefleet releases``,
:func:`servefleet.adapters.remote.list_releases`, run by the same ``sh``). Parsing and
merging are pure (:mod:`servefleet.core.history`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from servefleet.adapters import remote
from servefleet.adapters.runtime import Transport, connect
from servefleet.core.baselines import BASELINE_FILE, BaselineBook, parse_book
from servefleet.core.bench.record import BENCH_FILE, BenchRecord, parse_records
from servefleet.core.errors import RemoteError
from servefleet.core.history import HistoryRow, history_rows, parse_audit
from servefleet.core.models import Node
from servefleet.core.observed import RELEASES_HEADER, parse_releases

HISTORY_HEADER = "@@servefleet-history 1"
AUDIT_TAIL_LINES = 5000
"""Audit lines read (the newest); years of deploys, and a bound on a runaway log."""

# $1 base dir, $2 deployment dir, $3 the releases script, $4 how many audit lines.
HISTORY_SCRIPT = (
    "printf '" + HISTORY_HEADER + "\\n@@audit\\n'; "
    'tail -n "$4" "$2/' + remote.AUDIT_FILE + '" 2>/dev/null; '
    "printf '@@bench\\n'; "
    'tail -n "$4" "$2/' + BENCH_FILE + '" 2>/dev/null; '
    "printf '@@baselines\\n'; cat \"$1/" + BASELINE_FILE + "\" 2>/dev/null; echo; "
    'sh -c "$3" sh "$2"'
)


def read_history_command(base_dir: str, deployment: str,
                         audit_lines: int = AUDIT_TAIL_LINES) -> list[str]:
    """Read-only: the audit log's tail, the baselines file and the releases with their
    manifests (parsed by :func:`parse_history`)."""
    return ["sh", "-c", HISTORY_SCRIPT, "sh", base_dir.rstrip("/"),
            remote.deployment_dir(base_dir, deployment), remote.RELEASES_SCRIPT,
            str(audit_lines)]


@dataclass(frozen=True)
class NodeHistory:
    """The history of one deployment on one node."""

    node: str
    """Node name."""
    deployment: str
    """Deployment name."""
    rows: list[HistoryRow]
    """One row per deploy or rollback, oldest first."""
    book_problem: str | None = None
    """Why the baselines file could not be read (its KV pools are then missing)."""
    bench: list[BenchRecord] = field(default_factory=list)
    """``servefleet bench`` records of the deployment, oldest first."""


def parse_history(text: str, node: str, deployment: str) -> NodeHistory:
    """Split and merge the answer of :func:`read_history_command`; raise ``ValueError``
    when the output is not that command's (cut short, or another program answered)."""
    head, marker, releases_text = text.partition(RELEASES_HEADER)
    if not head.startswith(HISTORY_HEADER) or not marker:
        raise ValueError(f"history output is incomplete: {text[:200]!r}")
    audit_text, _, book_text = head.partition("\n@@baselines\n")
    audit_text = audit_text.partition("@@audit\n")[2]
    audit_text, _, bench_text = audit_text.partition("@@bench\n")
    book, problem = parse_book(book_text) if book_text.strip() else (BaselineBook(), None)
    releases = parse_releases(marker + releases_text)
    rows = history_rows(parse_audit(audit_text), book, releases, deployment)
    bench, _ = parse_records(bench_text.splitlines())
    return NodeHistory(node, deployment, rows, problem, bench)


def read_history(transport: Transport, deployment: str,
                 audit_lines: int = AUDIT_TAIL_LINES) -> NodeHistory:
    """The deployment's history on the transport's node (one read-only round trip)."""
    node = transport.node
    result = transport.run(read_history_command(node.base_dir, deployment, audit_lines),
                           idempotent=True, what="read the history")
    try:
        return parse_history(result.text(), node.name, deployment)
    except ValueError as error:
        raise RemoteError(node.name, f"read the history: {error}") from None


def node_history(node: Node, deployment: str, *, audit_lines: int = AUDIT_TAIL_LINES,
                 transport_factory: Callable[[Node], Transport] = connect
                 ) -> NodeHistory:
    """Connect to ``node`` (host key checked against the pinned one) and read the
    deployment's history; connection and command errors propagate as
    :class:`~servefleet.core.errors.ServefleetError`."""
    with transport_factory(node) as transport:
        return read_history(transport, deployment, audit_lines)

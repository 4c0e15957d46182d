"""A deployment's release history on one node, from the node's own records (pure).

Three records on the node say what each release was and how its gate went:

* the deployment's ``audit.log``: one tab-separated line per action, ``time  who
  operation  deployment  release  status  detail`` (written by the rollout's
  ``audit_line``). Since the gate record was added, the detail ends with
  ``; gate: key=value …`` (:func:`gate_record`): profile, KV pool, maximum concurrency,
  CUDA-graph mode, boot seconds and, for a failed gate, the failure class. Older lines
  have no gate record; their failure class, when there was one, is the ``[class]`` the
  gate summary put in the detail;
* the node's baselines file (:mod:`servefleet.core.baselines`): the KV pool of the boot
  that set each profile's baseline, with its release id: the fallback for the KV pool of
  an older line;
* the manifests of the releases still on the node: the profile of an older line.

:func:`history_rows` merges them into one :class:`HistoryRow` per deploy or rollback,
oldest first; :func:`table_lines` and :func:`kv_chart_lines` print them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servefleet.core.baselines import BaselineBook
from servefleet.core.observed import ReleaseInfo

GATE_MARK = "; gate: "
"""Where the gate record starts in an audit line's detail."""
RELEASE_OPERATIONS = frozenset({"deploy", "rollback"})
"""Audit operations that start a release (``stop`` lines are not releases)."""
VERDICTS = {"ok": "passed", "failed": "failed", "rolled_back": "rolled back",
            "restore_failed": "restore failed", "interrupted": "interrupted"}
"""Audit status → the verdict the history shows."""
_CLASS_RE = re.compile(r"\[([a-z][a-z0-9_]*)\]")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.:/+-]+$")


def gate_record(*, profile: str | None, facts: Mapping[str, Any],
                boot_seconds: float | None, failure_class: str | None = None) -> str:
    """The gate record an audit line's detail ends with: ``; gate: profile=… kv_tokens=…
    max_concurrency=… cudagraph=… boot_s=… class=…`` (only the facts known; values that
    are not one plain token are left out, so the record always parses)."""
    values: dict[str, Any] = {
        "profile": profile,
        "kv_tokens": facts.get("kv_cache_tokens"),
        "kv_mib": facts.get("kv_cache_mib"),
        "max_concurrency": facts.get("max_concurrency"),
        "cudagraph": facts.get("cudagraph_mode"),
        "boot_s": None if boot_seconds is None else f"{boot_seconds:.1f}",
        "class": failure_class,
    }
    parts = [f"{key}={value}" for key, value in values.items()
             if value is not None and _TOKEN_RE.match(str(value))]
    return GATE_MARK + " ".join(parts) if parts else ""


def parse_gate_record(detail: str) -> dict[str, str]:
    """The ``key=value`` pairs of the gate record in ``detail`` (empty: an older line)."""
    _, mark, record = detail.rpartition(GATE_MARK)
    if not mark:
        return {}
    pairs = (token.partition("=") for token in record.split())
    return {key: value for key, sep, value in pairs if sep and key}


@dataclass(frozen=True)
class AuditEntry:
    """One line of a deployment's ``audit.log``."""

    time: str
    """When (ISO 8601, UTC)."""
    who: str
    """``user@host`` of the controller."""
    operation: str
    """``deploy``, ``rollback``, ``stop``…"""
    deployment: str
    """Deployment name."""
    release_id: str | None
    """Release (``None`` for ``-``)."""
    status: str
    """``ok``, ``failed``, ``rolled_back``, ``restore_failed``, ``interrupted``."""
    detail: str
    """Free text: previous release, gate summary or failure, gate record."""


def parse_audit(text: str) -> list[AuditEntry]:
    """Every well-formed line of ``audit.log``, in file order (a torn or foreign line is
    skipped: the log is append-only and a half-written last line is possible)."""
    entries = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) < 6 or not fields[0][:4].isdigit():
            continue
        detail = "\t".join(fields[6:])
        release = fields[4] if fields[4] != "-" else None
        entries.append(AuditEntry(fields[0], fields[1], fields[2], fields[3], release,
                                  fields[5], detail))
    return entries


@dataclass(frozen=True)
class HistoryRow:
    """One release started on the node (a deploy or a rollback) and how its gate went."""

    time: str
    """When the rollout ended (the audit line's time)."""
    operation: str
    """``deploy`` or ``rollback``."""
    release_id: str
    """Release id."""
    profile: str | None
    """Profile name (gate record, else the release's manifest)."""
    kv_pool: float | None
    """KV pool: tokens (vLLM) or MiB of KV buffer (llama.cpp)."""
    kv_unit: str | None
    """``tokens`` or ``MiB``."""
    max_concurrency: float | None
    """Requests of the full context the pool holds at once (vLLM's boot log)."""
    cudagraph: str | None
    """CUDA-graph mode the engine resolved (``FULL_AND_PIECEWISE``, ``PIECEWISE``…)."""
    boot_seconds: float | None
    """From ``up`` to the ready line."""
    verdict: str
    """``passed``, ``failed``, ``rolled back``, ``restore failed`` or ``interrupted``."""
    failure_class: str | None
    """Why the gate failed (``kv_cache_oom``, ``boot_deadline``…), when known."""
    on_node: bool
    """The release folder is still on the node (not pruned)."""

    @property
    def verdict_text(self) -> str:
        """The verdict with its failure class: ``rolled back (kv_cache_oom)``."""
        return f"{self.verdict} ({self.failure_class})" if self.failure_class else self.verdict

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def history_rows(audit: Iterable[AuditEntry], book: BaselineBook,
                 releases: Sequence[ReleaseInfo], deployment: str) -> list[HistoryRow]:
    """One row per deploy or rollback of ``deployment``, oldest first (see the module
    docstring for which record supplies which fact)."""
    manifests = {r.release_id: r for r in releases}
    baselines = {b.release_id: b for b in book.baselines.values()
                 if b.release_id and b.deployment in (None, deployment)}
    rows = []
    for entry in audit:
        if entry.operation not in RELEASE_OPERATIONS or entry.release_id is None \
                or entry.deployment != deployment:
            continue
        gate = parse_gate_record(entry.detail)
        info = manifests.get(entry.release_id)
        kv_pool, kv_unit = _number(gate.get("kv_tokens")), "tokens"
        if kv_pool is None and gate.get("kv_mib") is not None:
            kv_pool, kv_unit = _number(gate.get("kv_mib")), "MiB"
        baseline = baselines.get(entry.release_id)
        if kv_pool is None and baseline is not None and entry.status == "ok":
            kv_pool, kv_unit = baseline.kv_pool, baseline.unit
        failure_class = gate.get("class")
        if failure_class is None and entry.status != "ok":
            found = _CLASS_RE.search(entry.detail)
            failure_class = found.group(1) if found else None
        rows.append(HistoryRow(
            time=entry.time, operation=entry.operation, release_id=entry.release_id,
            profile=gate.get("profile") or (info.profile if info else None)
            or (baseline.profile if baseline else None),
            kv_pool=kv_pool, kv_unit=kv_unit if kv_pool is not None else None,
            max_concurrency=_number(gate.get("max_concurrency")),
            cudagraph=gate.get("cudagraph"), boot_seconds=_number(gate.get("boot_s")),
            verdict=VERDICTS.get(entry.status, entry.status), failure_class=failure_class,
            on_node=info is not None))
    return rows


def _kv_text(row: HistoryRow) -> str:
    if row.kv_pool is None:
        return "-"
    return f"{row.kv_pool:,.0f}" if row.kv_unit == "tokens" else f"{row.kv_pool:,.2f} MiB"


def _cells(row: HistoryRow) -> tuple[str, ...]:
    return (row.time.replace("T", " ").removesuffix("Z"), row.release_id, row.profile or "?",
            _kv_text(row),
            "-" if row.max_concurrency is None else f"{row.max_concurrency:.2f}",
            row.cudagraph or "-",
            "-" if row.boot_seconds is None else f"{row.boot_seconds:.1f}",
            row.verdict_text)


HEADER = ("time (UTC)", "release", "profile", "KV pool", "max conc.", "CUDA graphs",
          "boot s", "gate")
_RIGHT = {3, 4, 6}


def table_lines(rows: Sequence[HistoryRow]) -> list[str]:
    """The rows as aligned text under :data:`HEADER` (numbers right-aligned)."""
    cells = [HEADER, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    return ["  ".join(c.rjust(w) if i in _RIGHT else c.ljust(w)
                      for i, (c, w) in enumerate(zip(cell, widths, strict=True))).rstrip()
            for cell in cells]


BAR = "█"
DROP_TOLERANCE = 0.05
"""A pool smaller than the one before by more than this is marked as a drop (the
baselines' default ``kv_tolerance``)."""


@dataclass(frozen=True)
class ChartLine:
    """One bar of the KV chart."""

    release_id: str
    """Release id."""
    bar: str
    """The bar (empty when the release has no KV pool)."""
    value: str
    """The pool as text, with the change against the previous pool."""
    drop: bool
    """The pool is smaller than the previous one beyond :data:`DROP_TOLERANCE`."""

    def text(self, label_width: int) -> str:
        """``release  ████  pool (change)``."""
        bar = f"{self.bar} " if self.bar else ""
        return f"{self.release_id.ljust(label_width)}  {bar}{self.value}"


def kv_chart(rows: Sequence[HistoryRow], width: int = 40) -> list[ChartLine]:
    """A horizontal bar per release with a KV pool, scaled to the largest pool of its unit
    (``width`` characters), so a shrink is seen at a glance."""
    largest: dict[str, float] = {}
    for row in rows:
        if row.kv_pool is not None and row.kv_unit is not None:
            largest[row.kv_unit] = max(largest.get(row.kv_unit, 0.0), row.kv_pool)
    lines = []
    before: dict[str, float] = {}
    for row in rows:
        if row.kv_pool is None or row.kv_unit is None:
            lines.append(ChartLine(row.release_id, "", "no KV pool recorded", False))
            continue
        length = max(1, round(width * row.kv_pool / largest[row.kv_unit]))
        value = _kv_text(row)
        previous = before.get(row.kv_unit)
        drop = False
        if previous:
            change = (row.kv_pool - previous) / previous
            value += f" ({change:+.1%})"
            drop = change < -DROP_TOLERANCE
        before[row.kv_unit] = row.kv_pool
        lines.append(ChartLine(row.release_id, BAR * length, value, drop))
    return lines


def kv_chart_lines(rows: Sequence[HistoryRow], width: int = 40) -> list[str]:
    """:func:`kv_chart` as plain text lines."""
    chart = kv_chart(rows, width)
    label = max((len(c.release_id) for c in chart), default=0)
    return [c.text(label) for c in chart]

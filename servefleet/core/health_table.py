"""Health results as a table per node (fact, expected, observed, verdict) and as JSON (pure).

A row is anything with ``fact``, ``expected``, ``observed``, ``verdict`` and ``evidence``:
the rows the probes and baseline checks build here (:class:`CheckRow`) and the rows of the
rollout's health gate look the same, so one table shows both. Under the table, every failed
row is named again with the log lines (or HTTP answers) that prove it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

Verdict = Literal["pass", "fail", "warn", "info"]
VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "warn", "info")
EVIDENCE_SHOWN = 8
"""Proving lines shown under a failed row (the JSON keeps them all)."""
CELL_WIDTH = 60
"""Longest expected/observed cell in the text table; longer text is cut with ``…``."""


class HealthRow(Protocol):
    """What a health table shows of one check."""

    @property
    def fact(self) -> str:
        """What was checked."""
    @property
    def expected(self) -> str:
        """What the profile wants (``-``: nothing)."""
    @property
    def observed(self) -> str:
        """What was found."""
    @property
    def verdict(self) -> Verdict:
        """``pass``, ``fail``, ``warn`` or ``info``."""
    @property
    def evidence(self) -> tuple[str, ...]:
        """Proving log lines or HTTP answers."""


RowT = TypeVar("RowT", bound=HealthRow)


def failed_rows(rows: Iterable[RowT]) -> list[RowT]:
    """The rows that fail: the one rule that turns check rows into a verdict, shared by the
    rollout's gate, ``servefleet health`` and the Pulumi provider's rollout. Only ``fail``
    counts; ``warn`` and ``info`` rows are shown, never judged."""
    return [r for r in rows if r.verdict == "fail"]


def rows_pass(rows: Iterable[HealthRow]) -> bool:
    """No row fails (see :func:`failed_rows`)."""
    return not failed_rows(rows)


@dataclass(frozen=True)
class CheckRow:
    """One check's outcome (the same fields as the health gate's rows)."""

    fact: str
    """What was checked (``GET /version``, ``KV pool vs baseline``…)."""
    expected: str
    """What the profile wants, as text (``-`` when nothing is expected)."""
    observed: str
    """What was found, as text (``-`` when unknown)."""
    verdict: Verdict
    """``pass``, ``fail``, ``warn`` or ``info`` (shown, not judged)."""
    evidence: tuple[str, ...] = ()
    """Log lines (``L<n>: text``) or HTTP answers that prove the observation."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return row_json(self)


def shown(value: object) -> str:
    """A value as a table cell: ``-`` for unknown, integers with thousands separators."""
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def row_json(row: HealthRow) -> dict[str, Any]:
    """JSON-ready form of any row."""
    return {"fact": row.fact, "expected": row.expected, "observed": row.observed,
            "verdict": row.verdict, "evidence": list(row.evidence)}


@dataclass(frozen=True)
class DeploymentHealth:
    """The health of one deployment on one node."""

    node: str
    """Node name."""
    deployment: str
    """Deployment name."""
    rows: tuple[HealthRow, ...]
    """Every check, in the order run."""
    profile: str | None = None
    """Profile of the running release (from its manifest)."""
    release_id: str | None = None
    """The running release."""
    url: str | None = None
    """Base URL the probes used."""
    failure_class: str | None = None
    """The engine's failure class (``kv_cache_oom``…, ``boot_deadline``) when it failed."""
    facts: Mapping[str, Any] = field(default_factory=dict)
    """Headline boot facts (KV pool, CUDA-graph mode…)."""
    error: str | None = None
    """The node could not be checked at all (unreachable, host key refused…)."""
    boot_phase: str | None = None
    """Set while the engine is still booting inside its profile's deadline: the phase its
    log reached (``loading weights``, ``profiling``…). Not a failure, not healthy yet."""

    @property
    def failed(self) -> bool:
        """Not checked, or a row failed."""
        return self.error is not None or not rows_pass(self.rows)

    @property
    def booting(self) -> bool:
        """Nothing failed, and the engine is still booting inside its deadline."""
        return not self.failed and self.boot_phase is not None

    @property
    def ok(self) -> bool:
        """Checked, no row failed, and the engine is up (not booting)."""
        return not self.failed and self.boot_phase is None

    @property
    def state(self) -> str:
        """``healthy``, ``booting``, ``unhealthy`` or ``unreachable`` (nothing read)."""
        if self.error is not None and not self.rows:
            return "unreachable"
        return "healthy" if self.ok else "booting" if self.booting else "unhealthy"

    @property
    def failures(self) -> list[HealthRow]:
        """The failed rows."""
        return failed_rows(self.rows)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"node": self.node, "deployment": self.deployment, "ok": self.ok,
                "state": self.state, "boot_phase": self.boot_phase,
                "profile": self.profile, "release_id": self.release_id, "url": self.url,
                "failure_class": self.failure_class, "facts": dict(self.facts),
                "error": self.error, "checks": [row_json(r) for r in self.rows]}


def fleet_json(results: Sequence[DeploymentHealth]) -> dict[str, Any]:
    """The JSON document of ``servefleet health --json``."""
    return {"ok": all(r.ok for r in results), "deployments": [r.to_json() for r in results]}


def _cut(text: str, width: int = CELL_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def table_lines(rows: Sequence[HealthRow]) -> list[str]:
    """The rows as aligned text: ``fact  expected  observed  verdict``."""
    header = ("fact", "expected", "observed", "verdict")
    cells = [header] + [(r.fact, _cut(r.expected), _cut(r.observed), r.verdict) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(3)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)), row[3]])
            .rstrip() for row in cells]


def title_line(result: DeploymentHealth) -> str:
    """``node/deployment  profile  release  ->  healthy | UNHEALTHY [class] | booting (phase)
    | unreachable: reason`` (the last when nothing could be read from the node)."""
    parts = [f"{result.node}/{result.deployment}"]
    if result.profile:
        parts.append(f"profile {result.profile}")
    if result.release_id:
        parts.append(f"release {result.release_id}")
    if result.url:
        parts.append(result.url)
    if result.error is not None and not result.rows:
        # Nothing was read from the node: the reason is the whole report, not a table.
        state = "unreachable: " + result.error.removeprefix(f"{result.node}: ")
    elif result.ok:
        state = "healthy"
    elif result.booting:
        state = f"booting ({result.boot_phase})"
    else:
        state = "UNHEALTHY" + (f" [{result.failure_class}]" if result.failure_class else "")
    return "  ".join(parts) + f": {state}"


def failure_lines(result: DeploymentHealth) -> list[str]:
    """Each failed fact, what was expected and observed, then its proving lines."""
    lines: list[str] = []
    if result.error is not None and result.rows:  # without rows the title line says it
        lines.append(f"  error: {result.error}")
    for row in result.failures:
        lines.append(f"  FAILED {row.fact}: expected {row.expected}, observed {row.observed}")
        shown = row.evidence[:EVIDENCE_SHOWN]
        lines.extend(f"      {line}" for line in shown)
        if len(row.evidence) > len(shown):
            lines.append(f"      … {len(row.evidence) - len(shown)} more (see --json)")
    return lines


def summary_line(results: Sequence[DeploymentHealth]) -> str:
    """``N of M deployment(s) healthy`` (and how many are still booting)."""
    healthy = sum(r.ok for r in results)
    booting = sum(r.booting for r in results)
    line = f"{healthy} of {len(results)} deployment(s) healthy"
    return line + (f", {booting} still booting" if booting else "")


def render_text(results: Sequence[DeploymentHealth]) -> str:
    """The report of ``servefleet health``: per deployment a title, the table, failures."""
    blocks: list[str] = []
    for result in results:
        block = [title_line(result)]
        if result.rows:
            block.extend("  " + line for line in table_lines(result.rows))
        block.extend(failure_lines(result))
        blocks.append("\n".join(block))
    blocks.append(summary_line(results))
    return "\n\n".join(blocks) + "\n"

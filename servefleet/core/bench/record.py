"""What a node keeps of each benchmark run: one JSON line in ``<deployment>/bench.jsonl``.

A record is one scenario with one seed against one release, keyed by everything that can
change its figures: the release, the profile's identity, the engine's version, the image
the engine ran (its id, a digest: a re-tagged image reads as another) and the scenario's
identity (its load, not its name). ``history`` shows them beside the KV pool, and
``bench --compare`` compares any two releases' records.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

BENCH_FILE = "bench.jsonl"
"""The records' file in the deployment's folder on the node."""
SCHEMA = 1

Role = str
"""``run`` (a plain bench), or in an A/B: ``A``, ``B`` and ``control`` (A again)."""


@dataclass(frozen=True)
class Figure:
    """One figure a run reports."""

    key: str
    """Its key in the figures (vLLM's own name where it has one)."""
    label: str
    """Column header."""
    higher_is_better: bool
    """Which way is better, for the comparison."""
    unit: str = ""


FIGURES: tuple[Figure, ...] = (
    Figure("output_throughput", "out tok/s", True),
    Figure("request_throughput", "req/s", True),
    Figure("mean_ttft_ms", "TTFT mean", False, "ms"),
    Figure("median_ttft_ms", "TTFT p50", False, "ms"),
    Figure("p99_ttft_ms", "TTFT p99", False, "ms"),
    Figure("mean_tpot_ms", "TPOT", False, "ms"),
    Figure("mean_itl_ms", "ITL mean", False, "ms"),
    Figure("p99_itl_ms", "ITL p99", False, "ms"),
)
"""The figures tables show and comparisons judge, in column order."""
BY_KEY = {f.key: f for f in FIGURES}
DECIDING = ("output_throughput", "mean_ttft_ms")
"""The figures an A/B decides on (the seeds' decision: throughput and TTFT)."""


@dataclass(frozen=True)
class BenchRecord:
    """One scenario, one seed, one release."""

    at: str
    """When it ended (UTC, ISO 8601)."""
    run_id: str
    """The ``servefleet bench`` invocation it belongs to."""
    role: Role
    node: str
    deployment: str
    release: str
    profile: str
    profile_identity: str
    engine: str
    engine_version: str
    image: str
    """The image reference the release names."""
    image_id: str
    """The id of the image the engine ran (``sha256:…``)."""
    scenario: str
    scenario_identity: str
    shape: str
    seed: int
    figures: dict[str, Any] = field(default_factory=dict)
    """vLLM's figures (see :data:`FIGURES`), ``errors``, ``kv_peak`` (0-1) and the
    speculative-decoding acceptance when the engine drafts."""

    def value(self, key: str) -> float | None:
        """A figure as a float, ``None`` when the run did not report it."""
        value = self.figures.get(key)
        return float(value) if isinstance(value, int | float) else None

    def to_line(self) -> str:
        """The record as one JSON line (no newline)."""
        return json.dumps({"schema": SCHEMA, **asdict(self)}, sort_keys=True,
                          separators=(",", ":"))


def _record(data: Mapping[str, Any]) -> BenchRecord | None:
    names = BenchRecord.__dataclass_fields__
    if data.get("schema") != SCHEMA or not all(
            k in data for k in names if k != "figures"):
        return None
    try:
        return BenchRecord(**{k: data[k] for k in names if k in data})
    except TypeError:
        return None


def parse_records(lines: Iterable[str]) -> tuple[list[BenchRecord], int]:
    """The records of a ``bench.jsonl`` text, oldest first, and how many lines were not
    records (torn by a full disk, written by a newer servefleet): skipped, counted."""
    records: list[BenchRecord] = []
    skipped = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        record = _record(data) if isinstance(data, dict) else None
        if record is None:
            skipped += 1
        else:
            records.append(record)
    return records, skipped

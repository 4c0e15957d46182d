"""A canary's verdict: does the answer contain what it must, and not what it must not?
(pure; the probe that sends it is :func:`servefleet.adapters.probes.shared.probe_canaries`).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field

from servefleet.core.health_table import CheckRow
from servefleet.core.modelfile import read_model_file
from servefleet.core.models.common import StrictModel
from servefleet.core.models.health import Canary

SHOWN_CHARS = 160


def _shown(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= SHOWN_CHARS else flat[:SHOWN_CHARS] + "…")


def expected_text(canary: Canary) -> str:
    """``contains /…/, not /…/``: what the canary wants, for the table."""
    parts = ([f"contains /{canary.expect}/"] if canary.expect else []) + \
        ([f"not /{canary.refuse}/"] if canary.refuse else [])
    return ", ".join(parts)


def judge_canary(canary: Canary, answer: str) -> CheckRow:
    """The row of one answered canary: ``fail`` naming the check it broke."""
    fact = f"canary {canary.name}"
    wrong = []
    if canary.expect and not re.search(canary.expect, answer, re.IGNORECASE):
        wrong.append(f"lacks /{canary.expect}/")
    if canary.refuse and (found := re.search(canary.refuse, answer, re.IGNORECASE)):
        wrong.append(f"contains {found.group(0)!r}")
    observed = "as expected" if not wrong else "answer " + " and ".join(wrong)
    return CheckRow(fact, expected_text(canary), observed, "fail" if wrong else "pass",
                    (f"answer: {_shown(answer)}",))


class CanaryFile(StrictModel):
    """A canary file (``canaries/*.yaml``): ``canaries:`` a list of :class:`Canary`."""

    canaries: list[Canary] = Field(min_length=1, max_length=64)


def load_canaries(path: Path, display: str | None = None) -> list[Canary]:
    """The canaries of ``path``; :class:`ConfigError` naming the file and field."""
    return read_model_file(path, CanaryFile, "canaries", display).canaries

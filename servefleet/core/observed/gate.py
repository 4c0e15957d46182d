"""The health gate's mark: which engine last passed its gate, and how a running one misses it."""

from __future__ import annotations

from typing import Literal

GateMiss = Literal["no-gate", "other-release", "started-again"]
"""How a running engine misses its gate mark: no gate passed here, the last one passed for
another release, or its container started again since (by hand, or Docker's restart)."""


def gate_miss(release: str | None, started_at: str | None, gated_release: str | None,
              gated_started_at: str | None) -> GateMiss | None:
    """The one rule for an ungated engine (``plan``, ``health``, drift and the Pulumi
    providers each say it in their own words): the running container of ``release``,
    started at ``started_at``, against the gate mark; ``None`` when it is the gated one."""
    if gated_release is None:
        return "no-gate"
    if release != gated_release:
        return "other-release"
    if started_at != gated_started_at:
        return "started-again"
    return None


def parse_gate_mark(lines: list[str] | None) -> dict[str, str]:
    """A ``key=value key=value`` record as a mapping: the ``gated`` file
    (``release=<id> started=<StartedAt> at=<time>``) and the ``adopted`` one
    (``release=<id> container=<id> name=<name>``)."""
    text = " ".join(lines or [])
    return dict(part.split("=", 1) for part in text.split() if "=" in part)

"""The drift check's reports: one node's status and the fleet's report."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from servefleet.core.drift.items import ERROR_KINDS, DriftItem, NodeStatus
from servefleet.core.models.common import StrictModel


def node_status(items: Iterable[DriftItem]) -> NodeStatus:
    """``error`` when something could not be checked, ``drift`` when something differs."""
    kinds = {item.kind for item in items}
    if kinds & ERROR_KINDS:
        return "error"
    return "drift" if kinds else "ok"


class NodeReport(StrictModel):
    """The drift check's answer for one node."""

    status: NodeStatus
    """``ok``, ``drift`` or ``error``."""
    items: tuple[DriftItem, ...] = ()
    """What differs (or could not be checked)."""


class DriftReport(StrictModel):
    """The drift check's answer for the fleet (``servefleet drift --json``)."""

    status: NodeStatus
    """The worst node status."""
    nodes: dict[str, NodeReport]
    """Per node, in the order checked."""
    stack: str | None = None
    """Stack checked."""
    checked_at: str | None = None
    """When the check started (ISO 8601, UTC)."""
    errors: tuple[str, ...] = ()
    """Problems that stopped the check before any node was read (configuration)."""
    notes: tuple[str, ...] = ()
    """What was checked less strictly than it could be, and why (a missing secret)."""

    @property
    def exit_code(self) -> int:
        """0 clean, 2 drift, 1 error (``terraform plan -detailed-exitcode``'s convention)."""
        return {"ok": 0, "drift": 2, "error": 1}[self.status]

    @property
    def items(self) -> list[DriftItem]:
        """Every item of every node."""
        return [item for report in self.nodes.values() for item in report.items]

    def to_json(self) -> str:
        """The machine-readable report."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"


def build_report(items_by_node: Mapping[str, Sequence[DriftItem]], *,
                 stack: str | None = None, checked_at: str | None = None,
                 errors: Sequence[str] = (), notes: Sequence[str] = ()) -> DriftReport:
    """The fleet report from each node's items (and configuration errors, if any)."""
    nodes = {name: NodeReport(status=node_status(items), items=tuple(items))
             for name, items in items_by_node.items()}
    statuses = {r.status for r in nodes.values()}
    status: NodeStatus = "error" if "error" in statuses or errors else \
        "drift" if "drift" in statuses else "ok"
    return DriftReport(status=status, nodes=nodes, stack=stack, checked_at=checked_at,
                       errors=tuple(errors), notes=tuple(notes))

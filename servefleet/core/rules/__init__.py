"""Validation rules: named checks of profiles, their placement on nodes, and the nodes.

Each rule has an id, a severity and a check; every finding names the file, the field, the
value, why (an upstream issue or PR, or a measurement) and the fix. Version tables and
hardware facts live in :mod:`servefleet.core.rules.facts`. Pure: no I/O, apart from the
planner rules (:mod:`servefleet.core.rules.planner`) reading the pinned ``config.json``.

    findings = validate(load_project(root, "reference"))
"""

from servefleet.core.rules.base import (
    Finding,
    Issue,
    NodeContext,
    Placement,
    PlacementContext,
    ProfileContext,
    Rule,
    Scope,
    Severity,
)
from servefleet.core.rules.registry import ALL_RULES, placements, rule_by_id, validate

__all__ = [
    "ALL_RULES",
    "Finding",
    "Issue",
    "NodeContext",
    "Placement",
    "PlacementContext",
    "ProfileContext",
    "Rule",
    "Scope",
    "Severity",
    "placements",
    "rule_by_id",
    "validate",
]

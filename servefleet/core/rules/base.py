"""The pieces every rule is made of: findings, the contexts rules look at, and the rule type.

A rule is a named check with one severity. Its function receives a context and yields
:class:`Issue` objects (what is wrong, where, why, the fix); :meth:`Rule.run` turns them into
:class:`Finding` objects carrying the rule's id and severity, so a check never spells its own
id. Three scopes exist:

* ``profile`` — the profile alone (run once per profile);
* ``placement`` — a profile placed on a node through the stack (run once per deployment);
* ``node`` — a node with every deployment the stack places on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from servefleet.core.models import Deployment, Node, Profile


class Severity(StrEnum):
    """How bad a finding is: errors block (``servefleet validate`` exits 1), the rest inform."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Sort key: errors first."""
        return {"error": 0, "warning": 1, "info": 2}[self.value]


class Scope(StrEnum):
    """What a rule looks at."""

    PROFILE = "profile"
    PLACEMENT = "placement"
    NODE = "node"


def show(value: Any) -> str:
    """A value as an operator wrote it in YAML: strings bare, booleans lower-case."""
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, sort_keys=True, default=str)


class Finding(BaseModel):
    """One problem (or notice) a rule found."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    rule: str
    """Id of the rule that found it, e.g. ``turboquant-needs-hybrid-support``."""
    severity: Severity
    """``error``, ``warning`` or ``info``."""
    file: str
    """File to change, relative to the project folder (``profiles/qwen36-fp8.yaml``)."""
    field: str
    """Field path inside the file (``vllm.kv_cache_dtype``)."""
    value: Any = None
    """The value found there (``None`` when the field is unset)."""
    message: str
    """What is wrong, naming the value."""
    why: str
    """Where the fact comes from: an upstream issue or PR, a reference section, a seed."""
    fix: str
    """What to change."""

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message} ({self.why}); fix: {self.fix}"


@dataclass(frozen=True)
class Issue:
    """What a rule's check yields; :meth:`Rule.run` adds the rule id and severity."""

    field: str
    """Field path inside the file."""
    value: Any
    """The offending value."""
    message: str
    """What is wrong; should name the value."""
    why: str
    """Upstream issue/PR, reference section or seed."""
    fix: str
    """What to change."""
    file: str | None = None
    """File to change; ``None`` = the context's main file."""


# ------------------------------------------------------------------------------ contexts


@dataclass(frozen=True)
class Placement:
    """One deployment of the stack, resolved: its profile and its port."""

    deployment: Deployment
    """The stack entry."""
    profile: Profile
    """The resolved profile it runs."""
    profile_file: str
    """That profile's file."""
    port: int
    """The port it listens on (explicit, or the node's first port)."""

    @property
    def stack_path(self) -> str:
        """Where the stack file places it: ``servefleet:profiles.<node>.<deployment>``."""
        return f"servefleet:profiles.{self.deployment.node}.{self.deployment.name}"


@dataclass(frozen=True)
class ProfileContext:
    """A profile on its own."""

    profile: Profile
    """The resolved profile."""
    file: str
    """Its file, relative to the project folder."""
    root: Path | None = None
    """The project folder (``None``: a project held in memory, nothing to read)."""
    own: Mapping[str, Any] | None = None
    """The profile's own keys as written, before ``extends`` (``None``: unknown)."""
    parent: Profile | None = None
    """The resolved profile it ``extends`` (``None``: none, or unknown)."""


@dataclass(frozen=True)
class PlacementContext:
    """A profile placed on a node by the stack."""

    placement: Placement
    """The deployment being checked."""
    node: Node
    """The node it runs on."""
    node_file: str
    """The node's inventory file."""
    stack_file: str
    """The stack file that placed it."""
    neighbours: tuple[Placement, ...] = ()
    """The other deployments on the same node."""
    root: Path | None = None
    """The project folder (``None``: a project held in memory, nothing to read)."""

    @property
    def profile(self) -> Profile:
        """The profile being placed."""
        return self.placement.profile

    @property
    def file(self) -> str:
        """Findings point at the profile's file unless a check says otherwise."""
        return self.placement.profile_file

    @property
    def where(self) -> str:
        """How messages name the placement: ``on node dgx-spark-1 (deployment …)``."""
        dep = self.placement.deployment
        return f"on node {dep.node} (deployment {dep.key}, {self.node_file})"


@dataclass(frozen=True)
class NodeContext:
    """A node and everything the stack places on it."""

    node: Node
    """The node."""
    node_file: str
    """Its inventory file."""
    stack_file: str
    """The stack file."""
    placements: tuple[Placement, ...] = ()
    """The deployments on this node, in stack order."""

    @property
    def file(self) -> str:
        """Findings point at the node's file unless a check says otherwise."""
        return self.node_file


Context = ProfileContext | PlacementContext | NodeContext


# ---------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    """A named check with one severity."""

    id: str
    """Stable id, e.g. ``turboquant-needs-hybrid-support``."""
    severity: Severity
    """Severity of every finding of this rule."""
    scope: Scope
    """What the check receives (see the module docstring)."""
    summary: str
    """One line for humans: what the rule guards against."""
    check: Callable[[Any], Iterable[Issue]]
    """The check: a context in, issues out."""
    engines: frozenset[str] | None = None
    """Names of the engines (:data:`servefleet.core.engines.ENGINES`) whose profiles the
    rule checks; ``None``: every engine. :func:`~servefleet.core.rules.validate` runs a
    profile or placement rule only on profiles of these engines."""

    def applies_to(self, engine: str) -> bool:
        """Whether the rule checks profiles of ``engine``."""
        return self.engines is None or engine in self.engines

    def run(self, context: Context) -> list[Finding]:
        """Run the check and stamp each issue with this rule's id and severity."""
        return [
            Finding(rule=self.id, severity=self.severity, file=issue.file or context.file,
                    field=issue.field, value=issue.value, message=issue.message,
                    why=issue.why, fix=issue.fix)
            for issue in self.check(context)
        ]


def _rule(
    scope: Scope, rule_id: str, severity: Severity, engines: Collection[str] | None = None
) -> Callable[[Callable[..., Iterable[Issue]]], Rule]:
    def wrap(check: Callable[..., Iterable[Issue]]) -> Rule:
        summary = (check.__doc__ or rule_id).strip().splitlines()[0]
        return Rule(id=rule_id, severity=severity, scope=scope, summary=summary, check=check,
                    engines=None if engines is None else frozenset(engines))

    return wrap


def profile_rule(
    rule_id: str, severity: Severity, *, engines: Collection[str] | None = None
) -> Callable[[Callable[[ProfileContext], Iterable[Issue]]], Rule]:
    """Make a profile-scope rule of a check function (its docstring's first line = summary);
    ``engines``: the engines whose profiles it checks (default: all)."""
    return _rule(Scope.PROFILE, rule_id, severity, engines)


def placement_rule(
    rule_id: str, severity: Severity, *, engines: Collection[str] | None = None
) -> Callable[[Callable[[PlacementContext], Iterable[Issue]]], Rule]:
    """Make a placement-scope rule of a check function; ``engines`` as for
    :func:`profile_rule`."""
    return _rule(Scope.PLACEMENT, rule_id, severity, engines)


def node_rule(
    rule_id: str, severity: Severity
) -> Callable[[Callable[[NodeContext], Iterable[Issue]]], Rule]:
    """Make a node-scope rule of a check function."""
    return _rule(Scope.NODE, rule_id, severity)

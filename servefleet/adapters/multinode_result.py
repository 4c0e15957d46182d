"""One engine across nodes: its ranks during a rollout, its plan, and what happened to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servefleet.adapters.rollout import (
    DeploymentResult,
    Failure,
    NodeRollout,
    Restore,
    Target,
)
from servefleet.adapters.runtime import RuntimeLock
from servefleet.core.models import MultiNodeDeployment
from servefleet.core.observed import ObservedDeployment
from servefleet.core.plan import PlanItem


@dataclass
class Rank:
    """One rank during a rollout."""

    index: int
    rollout: NodeRollout
    target: Target
    observed: ObservedDeployment | None
    item: PlanItem
    result: DeploymentResult
    lock: RuntimeLock | None = None
    started: bool = False

    @property
    def node(self) -> str:
        """Node name."""
        return self.rollout.node.name


@dataclass
class MultiNodeResult:
    """What happened to one engine spanning nodes."""

    deployment: str
    """The multi-node deployment's key (``name@node+node``)."""
    release_id: str
    """The release every rank was to run."""
    status: str = "failed"
    """``unchanged``, ``deployed``, ``rolled_back``, ``restore_failed``, ``failed``,
    ``interrupted``."""
    ranks: list[DeploymentResult] = field(default_factory=list)
    """Each rank's result, in rank order."""
    failure: Failure | None = None
    """The first failure, naming the node."""
    restore: Restore | None = None
    """The restore of every rank (one release id for all)."""

    @property
    def ok(self) -> bool:
        """Deployed or already right."""
        return self.status in ("unchanged", "deployed")

    def to_json(self) -> dict[str, Any]:
        """Machine-readable summary, rank by rank."""
        return {"deployment": self.deployment, "release_id": self.release_id,
                "status": self.status, "ok": self.ok,
                "failure": self.failure.to_json() if self.failure else None,
                "restore": self.restore.to_json() if self.restore else None,
                "ranks": [r.to_json() for r in self.ranks]}


def rank_role(index: int) -> str:
    """``head`` for rank 0 (serves the API), else ``worker`` (``--headless``)."""
    return "head" if index == 0 else "worker"


@dataclass(frozen=True)
class MultiNodePlan:
    """What a deploy would do to one engine spanning nodes, rank by rank."""

    deployment: MultiNodeDeployment
    """The stack entry."""
    release_id: str
    """The one release every rank would run."""
    items: tuple[PlanItem, ...]
    """Each rank's plan, in rank order (the head first)."""

    @property
    def changes(self) -> bool:
        """True when any rank would change (then every rank restarts)."""
        return any(item.changes for item in self.items)

    @property
    def action(self) -> str:
        """``unchanged``, ``create`` (no rank runs anything yet) or ``update``."""
        if not self.changes:
            return "unchanged"
        return "create" if all(i.current_release is None for i in self.items) else "update"

    def summary_lines(self) -> list[str]:
        """One line for the engine, one per rank, then each rank's reasons and flag diff."""
        head = f"{self.deployment.key}: {self.action}"
        lines = [f"{head} (release {self.release_id} on every rank)" if not self.changes
                 else f"{head}: release {self.release_id} on every rank, restarted together"]
        for index, item in enumerate(self.items):
            now = item.current_release or "none"
            what = item.engine_state if not item.changes else \
                f"{now} -> {item.release_id}"
            lines.append(f"  rank {index} {rank_role(index)} {item.node}: {item.action} "
                         f"({what})")
            lines += [f"  {line}" for line in item.summary_lines()[1:]]
        return lines

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form for ``servefleet plan --json`` (``multi_node``)."""
        return {"deployment": self.deployment.key, "name": self.deployment.name,
                "profile": self.deployment.profile, "action": self.action,
                "release_id": self.release_id,
                "ranks": [{"rank": i, "role": rank_role(i), **item.to_json()}
                          for i, item in enumerate(self.items)]}

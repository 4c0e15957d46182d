"""What ``deploy`` and ``rollback`` print: the outcome per node and deployment, then each
failure with its class and proving lines, and what the restore did."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from servefleet.adapters.multinode import MultiNodeResult
    from servefleet.adapters.rollout import DeploymentResult, Failure, NodeResult, Restore

STATUS_STYLE = {
    "unchanged": "dim", "deployed": "green", "failed": "red", "rolled_back": "yellow",
    "restore_failed": "bold red", "skipped": "dim", "error": "red",
    "interrupted": "bold red",
}
"""Style per deployment or node status."""


def _health_cells(result: DeploymentResult) -> str:
    report = result.health or (result.restore.health if result.restore else None)
    if report is None:
        return ""
    facts = report.facts
    parts = []
    if "kv_cache_tokens" in facts:
        parts.append(f"KV {facts['kv_cache_tokens']:,} tokens")
    if "cudagraph_mode" in facts:
        parts.append(str(facts["cudagraph_mode"]))
    if "n_ctx" in facts:
        parts.append(f"n_ctx {facts['n_ctx']:,}")
    return ", ".join(parts)


def print_results(console: Console, results: Sequence[NodeResult]) -> None:
    """The outcome per node and deployment, with failures, proving lines and restores."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold")
    for column in ("node", "deployment", "status", "release", "health", "time"):
        table.add_column(column, justify="right" if column == "time" else "left")
    for node in results:
        if node.error is not None:
            table.add_row(node.node, "", Text(node.status, style=STATUS_STYLE[node.status]),
                          "", Text(node.error), f"{node.elapsed:.1f}s")
            continue
        for dep in node.deployments:
            release = dep.release_id or ""
            if dep.previous_release and dep.previous_release != dep.release_id:
                release = f"{dep.previous_release} -> {release}"
            table.add_row(node.node, dep.deployment,
                          Text(dep.status, style=STATUS_STYLE.get(dep.status, "")), release,
                          _health_cells(dep), f"{node.elapsed:.1f}s")
    console.print(table)
    for node in results:
        for dep in node.deployments:
            if dep.failure is None:
                continue
            _print_failure(console, f"{node.node}/{dep.deployment}", dep.failure,
                           dep.restore)
            if dep.status == "interrupted":
                console.print(Text(f"  the node lock stays, marked with the phase: "
                                   f"`servefleet plan {node.node}` shows it and the next "
                                   "deploy repairs it", style="bold red"))
        for warning in dep_warnings(node):
            console.print(Text(warning, style="yellow"))


def print_multinode_results(console: Console, results: Sequence[MultiNodeResult]) -> None:
    """One line per engine spanning nodes, one per rank, then its failure and restore."""
    from rich.text import Text

    from servefleet.adapters.multinode_result import rank_role

    for one in results:
        console.print(Text(f"{one.deployment}: {one.status} (release {one.release_id})",
                           style=STATUS_STYLE.get(one.status, "")))
        for index, dep in enumerate(one.ranks):
            release = dep.release_id or ""
            if dep.previous_release and dep.previous_release != dep.release_id:
                release = f"{dep.previous_release} -> {release}"
            health = _health_cells(dep)
            console.print(Text(f"  rank {index} {rank_role(index)} {dep.node}: {dep.status} "
                               f"{release}" + (f" ({health})" if health else "")))
            for text in dep.warnings:
                console.print(Text(f"  {dep.node}/{dep.deployment}: warning: {text}",
                                   style="yellow"))
        _print_failure(console, one.deployment, one.failure, one.restore, " on every rank")


def _print_failure(console: Console, who: str, failure: Failure | None,
                   restore: Restore | None, where: str = "") -> None:
    """The failed step with its class and evidence, then what the restore did."""
    from rich.text import Text

    if failure is not None:
        cls = f" [{failure.failure_class}]" if failure.failure_class else ""
        console.print(Text(f"{who}: failed in {failure.phase}{cls}: {failure.message}",
                           style="red"))
        for line in failure.evidence:
            console.print(Text(f"    {line}", style="dim"))
    if restore is not None:
        style = "yellow" if restore.ok else "bold red"
        console.print(Text(f"  restore of {restore.release_id}{where}: {restore.message}",
                           style=style))


def dep_warnings(node: NodeResult) -> list[str]:
    """``node/deployment: warning: …`` lines (after the switch: the release stays)."""
    return [f"{node.node}/{dep.deployment}: warning: {text}"
            for dep in node.deployments for text in dep.warnings]

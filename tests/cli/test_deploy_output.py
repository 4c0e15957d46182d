"""What ``deploy`` prints after a failure (no node needed): the failed step with its class
and proving lines, then the restore — for an engine on one node and for one spanning two."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from servefleet.adapters.multinode import MultiNodeResult
from servefleet.adapters.rollout import DeploymentResult, Failure, NodeResult, Restore
from servefleet.cli.results import print_multinode_results, print_results

FAILURE = Failure(phase="boot", message="KV cache does not fit", failure_class="kv_cache_oom",
                  evidence=("ValueError: No available memory for the cache blocks.",))
RESTORE = Restore(release_id="0123456789ab", ok=True, message="booted and passed its gate")


def printed(call: Callable[[Console, Any], None], results: Sequence[Any]) -> list[str]:
    console = Console(record=True, width=200)
    call(console, results)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_a_node_failure_is_printed_with_its_evidence_and_restore() -> None:
    dep = DeploymentResult(node="sim-spark-1", deployment="main", status="rolled_back",
                           failure=FAILURE, restore=RESTORE)
    lines = printed(print_results, [NodeResult(node="sim-spark-1", deployments=[dep])])
    start = lines.index("sim-spark-1/main: failed in boot [kv_cache_oom]: KV cache does not "
                        "fit")
    assert lines[start + 1:start + 3] == [
        "    ValueError: No available memory for the cache blocks.",
        "  restore of 0123456789ab: booted and passed its gate"]


def test_an_engine_spanning_nodes_says_the_restore_covers_every_rank() -> None:
    one = MultiNodeResult(deployment="pair@sim-spark-1+sim-spark-2", release_id="fedcba987654",
                          status="rolled_back", failure=FAILURE, restore=RESTORE)
    lines = printed(print_multinode_results, [one])
    assert lines == [
        "pair@sim-spark-1+sim-spark-2: rolled_back (release fedcba987654)",
        "pair@sim-spark-1+sim-spark-2: failed in boot [kv_cache_oom]: KV cache does not fit",
        "    ValueError: No available memory for the cache blocks.",
        "  restore of 0123456789ab on every rank: booted and passed its gate"]

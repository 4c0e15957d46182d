"""``servefleet history``: the table and chart, ``--json``, ``--last``, and one line with
exit 2 for a node that cannot be read."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import Result

from servefleet.adapters import history as history_adapter
from servefleet.adapters.history import NodeHistory
from servefleet.cli.history import EXIT_UNREACHABLE
from servefleet.core.baselines import BaselineBook
from servefleet.core.history import gate_record, history_rows, parse_audit
from servefleet.core.models import Node

# Facts as the CPU build of vLLM printed them (tests/core/bootlog/data/vllm-cpu-real:
# kv-space-2g.log, then healthy.log).
AUDIT = "\n".join([
    "\t".join(["2026-11-20T09:00:00Z", "ops@laptop", "deploy", "main", "a1", "ok",
               "previous -; healthy" + gate_record(
                   profile="qwen36-fp8", boot_seconds=52.3, facts={
                       "kv_cache_tokens": 2097152, "max_concurrency": 1024.0,
                       "cudagraph_mode": "NONE"})]),
    "\t".join(["2026-11-21T10:00:00Z", "ops@laptop", "deploy", "main", "b2", "ok",
               "previous a1; healthy" + gate_record(
                   profile="qwen36-fp8-mtp", boot_seconds=61.0, facts={
                       "kv_cache_tokens": 1048576, "max_concurrency": 512.0,
                       "cudagraph_mode": "NONE"})]),
])


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The node read replaced by the parsed records above; returns the calls made."""
    calls: list[tuple[str, str]] = []

    def fake(node: Node, deployment: str, **_: Any) -> NodeHistory:
        calls.append((node.name, deployment))
        rows = history_rows(parse_audit(AUDIT), BaselineBook(), [], deployment)
        return NodeHistory(node.name, deployment, rows)

    monkeypatch.setattr(history_adapter, "node_history", fake)
    return calls


def test_table_and_chart(run: Callable[..., Result], recorded: list[tuple[str, str]]) -> None:
    result = run("history", "dgx-spark-1", "-d", "main")
    assert result.exit_code == 0, result.output
    assert recorded == [("dgx-spark-1", "main")]
    lines = result.output.splitlines()
    assert lines[0] == "dgx-spark-1/main: 2 releases recorded"
    assert lines[2].split()[:4] == ["2026-11-20", "09:00:00", "a1", "qwen36-fp8"]
    assert "1,048,576" in lines[3] and lines[3].endswith("passed")
    assert lines[-2] == "  a1  " + "█" * 40 + " 2,097,152"
    assert lines[-1] == "  b2  " + "█" * 20 + " 1,048,576 (-50.0%)"


def test_json_and_last(run: Callable[..., Result], recorded: list[tuple[str, str]]) -> None:
    result = run("history", "dgx-spark-1", "--json", "--last", "1")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    [row] = data["releases"]
    assert (row["release_id"], row["profile"], row["kv_pool"], row["cudagraph"],
            row["boot_seconds"], row["verdict"]) == ("b2", "qwen36-fp8-mtp", 1048576.0,
                                                     "NONE", 61.0, "passed")


def test_unreachable_node_is_one_line_exit_1(run: Callable[..., Result]) -> None:
    # The shipped reference nodes pin no host key: servefleet refuses to connect.
    result = run("history", "dgx-spark-1")
    assert result.exit_code == EXIT_UNREACHABLE == 1
    [line] = result.output.splitlines()
    assert line.startswith("dgx-spark-1: unreachable: no host key is pinned")


def test_unknown_node_is_a_config_error(run: Callable[..., Result]) -> None:
    result = run("history", "dgx-spark-9")
    assert result.exit_code == 1
    assert "no node 'dgx-spark-9' in the inventory" in result.output

"""Health of an engine spanning two nodes: the worker's rows from its log (join line, NCCL
transport), a worker read over a fake node (the real node reader, the log handed in), and
one report with a block per rank even when a rank cannot be reached."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_multinode_rollout import NODES, Pair, pair  # noqa: F401  (the fixture)

from servefleet.adapters import multinode_health
from servefleet.adapters.multinode_health import check_multinode, worker_log_rows, worker_rows
from servefleet.adapters.node_health import DeploymentCheck, HealthOptions, NodeRead
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.baselines import BaselineBook
from servefleet.core.errors import HostKeyMismatch
from servefleet.core.models import Node
from servefleet.core.secrets import SecretMask

# vLLM 0.32.0 run_headless's line (vllm/entrypoints/cli/serve.py), and NCCL_DEBUG=INFO
# channel lines as posted in NVIDIA/nccl-tests#133 and NVIDIA/nccl#952.
JOINED = ("2026-11-24T10:00:01.000000000Z INFO 11-24 10:00:01 [serve.py:270] Launching vLLM "
          "(v0.32.0) headless multiproc executor, with head node address 10.77.1.2:29501 "
          "for torch.distributed process group.")
VIA_IB = "node2:1:2 [1] NCCL INFO Channel 01 : 13[92000] -> 4[89000] [send] via NET/IB/0/GDRDMA"
VIA_SOCKET = "node2:1:2 [1] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3"


def test_a_joined_worker_passes_and_a_silent_one_fails_with_its_tail() -> None:
    [row] = worker_log_rows(["INFO starting", JOINED], None)
    assert (row.fact, row.verdict, row.evidence) == ("worker joined the head", "pass",
                                                     (JOINED,))
    [row] = worker_log_rows(["INFO starting", "ERROR gloo connectFullMesh failed"], None)
    assert row.verdict == "fail" and row.observed == "no join line in the current run"
    assert row.evidence[-1] == "ERROR gloo connectFullMesh failed"


@pytest.mark.parametrize(("lines", "wanted", "verdict", "observed"), [
    ([VIA_SOCKET], "via NET/Socket", "pass", "via NET/Socket"),
    ([VIA_IB], "via NET/IB", "pass", "via NET/IB"),
    ([VIA_SOCKET], "via NET/IB", "fail", VIA_SOCKET[-80:]),
    ([], "via NET/Socket", "fail", "no NCCL channel line"),
])
def test_the_nccl_transport_is_the_one_the_link_promises(lines: list[str], wanted: str,
                                                         verdict: str, observed: str) -> None:
    rows = worker_log_rows([JOINED, *lines], wanted)
    assert (rows[1].fact, rows[1].verdict, rows[1].observed) == ("NCCL transport", verdict,
                                                                 observed)


@pytest.fixture
def deployed(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:  # noqa: F811
    result = pair.deploy(pair.ports[0])
    assert result.status == "deployed", result.to_json()
    yield pair


def _read(lines: list[str]) -> NodeRead:
    return NodeRead(now=None, book=BaselineBook(), book_problem=None,
                    lines=tuple(line.encode() for line in lines), has_container=True)


def test_worker_rows_read_the_worker_over_its_node(deployed: Pair,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    project = deployed.project(deployed.ports[0])
    dep = project.stack.multi_node[0]
    node = project.nodes[NODES[1]]
    release = deployed.current(NODES[1])
    transport = deployed.transports[NODES[1]]
    check = DeploymentCheck(project, node, dep.name, transport,  # type: ignore[arg-type]
                            HealthOptions())
    monkeypatch.setattr(check, "read", lambda: _read([JOINED]))
    rows = worker_rows(project, node, dep, release, check)
    assert [(r.fact, r.verdict) for r in rows] == [("worker container", "pass"),
                                                   ("worker joined the head", "pass")]
    assert rows[0].observed == f"running {release}"
    # The head names another release: the worker is out of step.
    rows = worker_rows(project, node, dep, "0123456789ab", check)
    assert rows[0].verdict == "fail" and "one; `servefleet deploy` moves both" in \
        rows[0].evidence[0]


def test_one_report_with_a_block_per_rank_when_ranks_cannot_be_reached(pair: Pair) -> None:  # noqa: F811
    project = pair.project(pair.ports[0])

    def refused(node: Node, mask: SecretMask) -> SshTransport:
        raise HostKeyMismatch(f"{node.name}: no host key is pinned")

    report = check_multinode(project, project.stack.multi_node[0], HealthOptions(),
                             transport_factory=refused)
    assert (report.node, report.deployment) == (f"{NODES[0]}+{NODES[1]}", "big")
    assert report.failed and report.error is not None
    assert all(f"{n}: no host key is pinned" in report.error for n in NODES)
    facts = [r.fact for r in report.rows]
    assert facts == [f"rank 0 head {NODES[0]}", "  node", f"rank 1 worker {NODES[1]}",
                     "  node"]
    assert multinode_health.check_multinode_fleet(project, [], HealthOptions()) == []

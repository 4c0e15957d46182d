"""Health of an engine spanning nodes: one report, a block of rows per rank.

The head (rank 0) serves the API: it gets every check a one-node engine gets
(:class:`~servefleet.adapters.node_health.DeploymentCheck`: boot log, probes, baselines).
A worker (``--headless``) serves nothing, so what can be proven about it is what the
rollout's gate proves: its container runs the head's release, its current run printed
vLLM's join line (``headless multiproc executor, with head node address``), and with
``ncclDebug`` that NCCL chose the transport its link promises (``via NET/IB`` with RDMA
devices, else ``via NET/Socket``). A rank that cannot be read fails the whole engine: an
engine whose peer is unknown is not known to serve.
"""

from __future__ import annotations

from collections.abc import Sequence

from servefleet.adapters.multinode import (
    NCCL_VIA_IB,
    NCCL_VIA_SOCKET,
    WORKER_JOINED,
)
from servefleet.adapters.multinode_result import rank_role
from servefleet.adapters.node_health import (
    TAIL_EVIDENCE,
    DeploymentCheck,
    HealthOptions,
    TransportFactory,
    _default_transport,
    split_runs,
)
from servefleet.adapters.observe import observe_node
from servefleet.core.errors import ServefleetError
from servefleet.core.health_table import CheckRow, DeploymentHealth, HealthRow, rows_pass
from servefleet.core.models import MultiNodeDeployment, Node
from servefleet.core.observed.serving import engine_container
from servefleet.core.project import Project
from servefleet.core.secrets import SecretMask


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace").rstrip("\r\n")


def worker_rows(project: Project, node: Node, dep: MultiNodeDeployment, release: str | None,
                check: DeploymentCheck) -> list[CheckRow]:
    """A worker rank's rows: container, join line, NCCL transport (``ncclDebug``)."""
    observed = observe_node(check.transport, [dep.name]).deployments.get(dep.name)
    container = engine_container(observed) if observed is not None else None
    if container is None or not container.running:
        state = observed.engine_state() if observed is not None else "nothing deployed here"
        return [CheckRow("worker container", f"running {release or '-'}", state, "fail")]
    rows = [CheckRow("worker container", f"running {release or '-'}",
                     f"running {container.release_id or '?'}",
                     "pass" if release is None or container.release_id == release else "fail",
                     () if container.release_id == release else
                     ("the worker runs another release than the head: the ranks must run "
                      "one; `servefleet deploy` moves both",))]
    _, current = split_runs(check.read().lines, container.started_at)
    link = node.fast_link
    wanted = NCCL_VIA_IB if link is not None and link.ib_hcas else NCCL_VIA_SOCKET
    lines = [check.transport.mask(_text(line)) for line in current]
    return rows + worker_log_rows(lines, wanted if dep.nccl_debug else None)


def worker_log_rows(lines: Sequence[str], nccl_wanted: str | None) -> list[CheckRow]:
    """From the worker's current run: the join line, and the NCCL transport when
    ``nccl_wanted`` names the one the link promises."""
    joined = [line for line in lines if WORKER_JOINED in line]
    rows = [CheckRow("worker joined the head", WORKER_JOINED,
                     "joined" if joined else "no join line in the current run",
                     "pass" if joined else "fail",
                     tuple(joined[:1]) if joined else tuple(lines[-TAIL_EVIDENCE:]))]
    if nccl_wanted is not None:
        found = [line for line in lines if NCCL_VIA_IB in line or NCCL_VIA_SOCKET in line]
        ok = bool(found) and all(nccl_wanted in line for line in found)
        seen = "no NCCL channel line" if not found else (
            nccl_wanted if ok else next(line for line in found if nccl_wanted not in line)[-80:])
        rows.append(CheckRow("NCCL transport", nccl_wanted, seen, "pass" if ok else "fail",
                             tuple(found[:3])))
    return rows


def _rank_rows(index: int, node: str, rows: Sequence[HealthRow], state: str,
               ) -> list[HealthRow]:
    """The rank's summary line, then its rows with the rank in front of each fact."""
    failed = not rows_pass(rows) or state == "unreachable"
    head = CheckRow(f"rank {index} {rank_role(index)} {node}", "healthy",
                    state if failed or state != "healthy" else "healthy",
                    "fail" if failed else "pass" if state == "healthy" else "info")
    return [head, *(CheckRow(f"  {r.fact}", r.expected, r.observed, r.verdict,
                             tuple(r.evidence)) for r in rows)]


def check_multinode(project: Project, dep: MultiNodeDeployment,
                    options: HealthOptions | None = None, *,
                    transport_factory: TransportFactory = _default_transport,
                    ) -> DeploymentHealth:
    """One report for the engine ``dep``: titled ``head+worker/name`` with the head's
    profile, release, URL and facts, and a block of rows per rank."""
    options = options or HealthOptions()
    mask = SecretMask.from_mapping(options.secrets)
    rows: list[HealthRow] = []
    head: DeploymentHealth | None = None
    errors: list[str] = []
    for index, name in enumerate(dep.nodes):
        node = project.nodes[name]
        try:
            with transport_factory(node, mask) as transport:
                check = DeploymentCheck(project, node, dep.name, transport, options)
                if index == 0:
                    head = check.run()
                    rows += _rank_rows(index, name, head.rows, head.state)
                else:
                    release = head.release_id if head is not None else None
                    mine = worker_rows(project, node, dep, release, check)
                    state = "healthy" if rows_pass(mine) else "unhealthy"
                    rows += _rank_rows(index, name, mine, state)
        except ServefleetError as error:
            errors.append(mask(str(error)))
            rows += _rank_rows(index, name, [CheckRow("node", "reachable", mask(str(error)),
                                                      "fail")], "unreachable")
    return DeploymentHealth(
        node="+".join(dep.nodes), deployment=dep.name, rows=tuple(rows),
        profile=head.profile if head else None, release_id=head.release_id if head else None,
        url=head.url if head else None,
        failure_class=(head.failure_class if head else None)
        or (None if rows_pass(rows) else "worker_failed"),
        facts=dict(head.facts) if head else {},
        error="; ".join(errors) if errors and len(errors) == len(dep.nodes) else None,
        boot_phase=head.boot_phase if head else None)


def check_multinode_fleet(project: Project, deployments: Sequence[MultiNodeDeployment],
                          options: HealthOptions | None = None, *,
                          transport_factory: TransportFactory = _default_transport,
                          ) -> list[DeploymentHealth]:
    """:func:`check_multinode` of each deployment, in stack order."""
    return [check_multinode(project, dep, options, transport_factory=transport_factory)
            for dep in deployments]

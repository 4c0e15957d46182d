"""Render an engine spanning several nodes: one release per rank, one release id for all.

Every rank runs ``vllm serve`` with the same profile, image and patch set, plus
``--nnodes N --node-rank R --master-addr HEAD --master-port P``; ranks other than 0 add
``--headless`` (no API server, only torch.distributed workers: vLLM PR #23691). Each rank's
container gets the node's fast-link facts as environment: ``VLLM_HOST_IP`` (its address on
the link), ``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME``, ``TP_SOCKET_IFNAME`` and
``UCX_NET_DEVICES`` (the interface), ``NCCL_IB_HCA`` (the RDMA devices) with
``NCCL_IB_DISABLE=0``, ``/dev/infiniband`` and ``IPC_LOCK``, as spark-vllm-docker and
sparkrun run two DGX Sparks over ConnectX-7.

The release id is a sha256 over every rank's files (rendered with an empty id, each path
prefixed by its rank), so changing a flag changes the release of every rank at once, and
a rank never runs a release its peers do not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from servefleet.core.engines import engine_of
from servefleet.core.errors import RenderError
from servefleet.core.models import Deployment, MultiNodeDeployment, Node
from servefleet.core.project import Project
from servefleet.core.render.inputs import RankExtras, prepare_inputs
from servefleet.core.render.layout import LABEL_PREFIX
from servefleet.core.render.release import (
    RenderedRelease,
    assemble_release,
    draft_files,
    release_id_of,
)

SOCKET_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES")
"""Variables that name the fast-link interface for every transport a rank may use."""
IB_DEVICES = "/dev/infiniband"
"""RDMA device nodes a rank needs for NCCL over RoCE/InfiniBand."""
IB_CAPABILITY = "IPC_LOCK"
"""RDMA pins (registers) memory; without it NCCL's IB transport fails to register buffers."""


@dataclass(frozen=True)
class MultiNodeRelease:
    """The releases of every rank of one engine, sharing ``release_id``."""

    deployment: MultiNodeDeployment
    """The stack entry."""
    release_id: str
    """The one id every rank's release carries."""
    ranks: tuple[RenderedRelease, ...]
    """One rendered release per rank, in rank order (the head first)."""
    rank_deployments: tuple[Deployment, ...]
    """The per-node view of each rank (node, deployment name, profile, port)."""

    @property
    def head(self) -> RenderedRelease:
        """Rank 0: the one that serves the API."""
        return self.ranks[0]

    @property
    def workers(self) -> tuple[RenderedRelease, ...]:
        """The headless ranks."""
        return self.ranks[1:]


def _fast_link(node: Node, where: str) -> tuple[str, str, list[str]]:
    link = node.fast_link
    if link is None:
        raise RenderError(f"{where}: node {node.name} has no fast_link in its inventory "
                          "file; add fast_link: {interface, address, ib_hcas}")
    return link.interface, link.address, list(link.ib_hcas)


def rank_extras(project: Project, dep: MultiNodeDeployment, rank: int) -> RankExtras:
    """Command-line flags, environment, devices and labels of rank ``rank``."""
    where = dep.key
    head = project.nodes[dep.head]
    node = project.nodes[dep.nodes[rank]]
    _, head_address, _ = _fast_link(head, where)
    interface, address, hcas = _fast_link(node, where)
    argv = []
    if dep.pipeline_parallel_size > 1:
        argv += ["--pipeline-parallel-size", str(dep.pipeline_parallel_size)]
    if dep.backend == "ray":
        raise RenderError(f"{where}: backend ray is not rendered by servefleet; use "
                          "backend: native (vllm serve --nnodes/--node-rank)")
    argv += ["--distributed-executor-backend", "mp",
             "--nnodes", str(len(dep.nodes)), "--node-rank", str(rank),
             "--master-addr", head_address, "--master-port", str(dep.master_port)]
    if rank > 0:
        argv.append("--headless")
    env = {"VLLM_HOST_IP": address, **{name: interface for name in SOCKET_ENV}}
    if hcas:
        env["NCCL_IB_HCA"] = ",".join(hcas)
        env["NCCL_IB_DISABLE"] = "0"
    else:
        # No RDMA device on the link: say so, rather than let NCCL probe and pick another.
        env["NCCL_IB_DISABLE"] = "1"
    if dep.nccl_debug:
        env["NCCL_DEBUG"] = "INFO"
    labels = {f"{LABEL_PREFIX}rank": str(rank),
              f"{LABEL_PREFIX}ranks": ",".join(dep.nodes),
              f"{LABEL_PREFIX}multi-node": dep.name}
    return RankExtras(argv=tuple(argv), environment=env,
                      devices=(IB_DEVICES,) if hcas else (),
                      cap_add=(IB_CAPABILITY,) if hcas else (),
                      labels=labels, serves_api=rank == 0)


def rank_deployments(project: Project, dep: MultiNodeDeployment) -> tuple[Deployment, ...]:
    """Each rank as a deployment on its node; every rank carries the head's API port."""
    head = project.nodes.get(dep.head)
    if head is None:
        raise RenderError(f"{dep.key}: no node {dep.head!r} in the inventory")
    port = dep.port or head.ports[0]
    return tuple(Deployment(node=n, name=dep.name, profile=dep.profile, port=port)
                 for n in dep.nodes)


def render_multinode(project: Project, dep: MultiNodeDeployment,
                     secrets: Mapping[str, str] | None = None, *,
                     require_secrets: bool = True,
                     templates_dir: Path | None = None) -> MultiNodeRelease:
    """Render every rank of ``dep``, entirely in memory, under one release id."""
    for name in dep.nodes:
        if name not in project.nodes:
            raise RenderError(f"{dep.key}: no node {name!r} in the inventory")
    profile = project.profiles.get(dep.profile)
    if profile is None:
        raise RenderError(f"{dep.key}: no profile {dep.profile!r}")
    if not engine_of(profile).spans_nodes:
        raise RenderError(f"{dep.key}: profile {profile.name} runs {profile.engine}; only "
                          "vLLM engines span nodes here")
    deployments = rank_deployments(project, dep)
    inputs = [prepare_inputs(project, d, secrets, require_secrets=require_secrets,
                             templates_dir=templates_dir,
                             rank=rank_extras(project, dep, index))
              for index, d in enumerate(deployments)]
    combined: dict[str, bytes] = {}
    for index, one in enumerate(inputs):
        for path, content in draft_files(one).items():
            combined[f"rank{index}/{path}"] = content
    modes = {path: 0o600 if path.endswith("/engine.env") else 0o644 for path in combined}
    release_id = release_id_of(combined, modes)
    return MultiNodeRelease(deployment=dep, release_id=release_id,
                            ranks=tuple(assemble_release(one, release_id) for one in inputs),
                            rank_deployments=deployments)

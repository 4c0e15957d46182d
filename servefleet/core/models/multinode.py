"""A deployment that runs one engine across several nodes (tensor or pipeline parallel).

Written in the stack file under ``servefleet:multiNode``::

    config:
      servefleet:multiNode:
        big:
          profile: qwen36-fp8-tp2
          nodes: [dgx-spark-1, dgx-spark-2]    # the first node is the head (rank 0)
          pipelineParallel: 1                  # tensor_parallel_size comes from the profile
          masterPort: 29501

Every rank runs the same profile, image and patch set. The head serves the API; the
other ranks run ``vllm serve … --headless`` and only join torch.distributed. The
deployment is rolled out, gated and restored as one unit with one release id.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from servefleet.core.models.common import Name, StrictModel

DEFAULT_MASTER_PORT = 29501
"""torch.distributed rendezvous port on the head (vLLM's own default, ``--master-port``)."""


class MultiNodeDeployment(StrictModel):
    """One engine spanning ``nodes``: a compose project of the same name on each of them."""

    name: Name
    """Deployment name: the folder and compose project on every node."""
    profile: Name
    """Serving profile every rank runs (a vLLM profile)."""
    nodes: list[Name] = Field(min_length=2, max_length=16)
    """Nodes in rank order; the first is the head (rank 0, serves the API)."""
    port: int | None = Field(None, ge=1, le=65535)
    """API port on the head; ``None`` = the head's first port."""
    master_port: int = Field(DEFAULT_MASTER_PORT, ge=1, le=65535)
    """torch.distributed rendezvous port on the head's fast-link address."""
    pipeline_parallel_size: int = Field(1, ge=1, le=64)
    """Pipeline stages (``--pipeline-parallel-size``); TP × PP must equal the GPUs spanned."""
    backend: Literal["native", "ray"] = "native"
    """``native``: every rank runs ``vllm serve --nnodes/--node-rank`` (multiprocessing
    executor); ``ray``: a Ray cluster with ``--distributed-executor-backend ray``."""
    nccl_debug: bool = False
    """Run with ``NCCL_DEBUG=INFO`` and make the gate prove the transport NCCL chose."""

    @field_validator("nodes")
    @classmethod
    def _nodes_distinct(cls, nodes: list[str]) -> list[str]:
        repeated = sorted({n for n in nodes if nodes.count(n) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} listed twice; each node runs one rank")
        return nodes

    @property
    def head(self) -> str:
        """The rank-0 node."""
        return self.nodes[0]

    @property
    def workers(self) -> list[str]:
        """The headless ranks, in rank order."""
        return self.nodes[1:]

    @property
    def key(self) -> str:
        """``deployment@node+node``: unique within a stack, names every rank."""
        return f"{self.name}@{'+'.join(self.nodes)}"

    def rank_of(self, node: str) -> int:
        """The node's rank (its position in ``nodes``)."""
        return self.nodes.index(node)

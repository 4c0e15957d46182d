"""Stack configuration: which profile runs where, read from ``Pulumi.<stack>.yaml``.

The same file drives ``pulumi up`` and the ``servefleet`` CLI, so there is one source of
truth. A node's entry is either a profile name (one deployment called ``main`` on the node's
first port) or a mapping of deployment names to ``{profile, port}``::

    config:
      servefleet:strategy: parallel
      servefleet:profiles:
        dgx-spark-1: qwen36-fp8-mtp
        dgx-spark-2:
          main: {profile: qwen36-fp8-mtp, port: 8000}
          nomtp: {profile: qwen36-fp8, port: 8001}

``pulumi config set servefleet:profiles.dgx-spark-2 qwen36-fp8`` writes the flat key
``servefleet:profiles.dgx-spark-2``, which is accepted too and wins over the mapping.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servefleet.core.models.common import ContainerName, Name, StrictModel, Text
from servefleet.core.models.gateway import GatewayConfig
from servefleet.core.models.multinode import MultiNodeDeployment
from servefleet.core.models.watch import WatchConfig

DEFAULT_DEPLOYMENT = "main"


class Deployment(StrictModel):
    """One engine on one node: a compose project of its own."""

    node: Name
    """Node it runs on."""
    name: Name = DEFAULT_DEPLOYMENT
    """Deployment name, stable across profile switches (the folder on the node)."""
    profile: Name
    """Serving profile."""
    port: int | None = Field(None, ge=1, le=65535)
    """Port the engine listens on; ``None`` = the node's first port."""
    adopt: ContainerName | None = None
    """A container started on the node by hand (``docker run`` or its own Compose project)
    that serves this deployment before servefleet does: the first deploy takes it over
    without a restart when it runs exactly the rendered engine (``plan`` says ``adopt``),
    and replaces it through the gated rollout otherwise. Written by ``servefleet import``."""

    @property
    def key(self) -> str:
        """``node/deployment``: unique within a stack."""
        return f"{self.node}/{self.name}"


class StackConfig(StrictModel):
    """The servefleet part of a Pulumi stack file."""

    stack: Name
    """Stack name (``sim``, ``reference``…)."""
    strategy: Literal["parallel", "rolling"] = "parallel"
    """Roll out all nodes at once, or one at a time stopping at the first failure."""
    deployments: list[Deployment] = Field(default_factory=list)
    """Every deployment of the stack, in file order."""
    multi_node: list[MultiNodeDeployment] = Field(default_factory=list)
    """Engines spanning several nodes (``servefleet:multiNode``), rolled out as one unit."""
    secret_names: list[Text] = Field(default_factory=list)
    """Environment variable names whose values the stack holds as Pulumi secrets."""
    keep_releases: int = Field(5, ge=1, le=100)
    """Releases kept on each node for rollback."""
    watch: WatchConfig = Field(default_factory=WatchConfig)
    """``servefleet:watch``: sampling, wedge detection and recovery of ``servefleet watch``."""
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    """``servefleet:gateway``: one endpoint for the fleet, routed by model, that rollouts
    drain and re-admit engines in (HAProxy)."""
    bench_scenarios: Text = "scenarios/seeds.yaml"
    """``servefleet:benchScenarios``: the scenario file ``servefleet bench`` runs unless
    given one (relative to the project folder)."""
    bench_image: Text | None = None
    """``servefleet:benchImage``: the vLLM image whose ``vllm bench serve`` loads an engine
    whose own image has none (llama.cpp), run beside it on its node. Unset: the pinned
    image of the project's vLLM profile with the newest engine version."""

    def for_node(self, node: str) -> list[Deployment]:
        """The deployments placed on ``node``."""
        return [d for d in self.deployments if d.node == node]

    @property
    def nodes(self) -> list[str]:
        """Node names used by the stack, in order of first appearance."""
        seen: dict[str, None] = {}
        for d in self.deployments:
            seen.setdefault(d.node, None)
        return list(seen)

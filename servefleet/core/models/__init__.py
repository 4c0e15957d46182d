"""Typed models of what the operator decides: nodes, serving profiles and stacks."""

from servefleet.core.models.inventory import FastLink, Gpu, Node, SshSettings
from servefleet.core.models.multinode import MultiNodeDeployment
from servefleet.core.models.profile import (
    HealthExpectations,
    ImageRef,
    LlamaCppSettings,
    ModelSpec,
    PatchOverlay,
    Profile,
    SpeculativeConfig,
    VllmSettings,
)
from servefleet.core.models.stack import Deployment, StackConfig

__all__ = [
    "Deployment",
    "FastLink",
    "Gpu",
    "HealthExpectations",
    "ImageRef",
    "LlamaCppSettings",
    "ModelSpec",
    "MultiNodeDeployment",
    "Node",
    "PatchOverlay",
    "Profile",
    "SpeculativeConfig",
    "SshSettings",
    "StackConfig",
    "VllmSettings",
]

"""Typed models of what the operator decides: nodes, serving profiles and stacks."""

from servefleet.core.models.inventory import Gpu, Node, SshSettings
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
    "Gpu",
    "HealthExpectations",
    "ImageRef",
    "LlamaCppSettings",
    "ModelSpec",
    "Node",
    "PatchOverlay",
    "Profile",
    "SpeculativeConfig",
    "SshSettings",
    "StackConfig",
    "VllmSettings",
]

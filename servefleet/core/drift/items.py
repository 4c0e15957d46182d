"""What a drift item is: the kinds of difference, one item, and the list a check fills."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import JsonValue

from servefleet.core.models.common import StrictModel


class DriftKind(StrEnum):
    """What kind of difference an item describes."""

    RELEASE = "release"
    """``current`` points at another release than git renders (or there is none)."""
    FILE_HASH = "file-hash"
    """A file of the current release no longer has the content it was deployed with."""
    CONTAINER_MISSING = "container-missing"
    """The deployment has no container."""
    CONTAINER_STOPPED = "container-stopped"
    """The container exists but does not run (exited, created, dead, paused)."""
    UNGATED_ENGINE = "ungated-engine"
    """The running engine never passed the health gate (started by hand, or again since)."""
    CONTAINER_RESTARTING = "container-restarting"
    """The container is crash-looping, or Docker has restarted it since it was created."""
    COMMAND = "command"
    """The running container's command line differs from the rendered one."""
    ENV = "env"
    """An environment variable is missing, different or added by hand."""
    LABELS = "labels"
    """A label is missing, different or added by hand."""
    IMAGE_DIGEST = "image-digest"
    """The container runs another image than the pinned / deployed one (a tag that moved)."""
    PATCH_SET = "patch-set"
    """The overlay marker inside the container differs from the release's patch set."""
    WEIGHTS = "weights"
    """The current release's staged weights are gone from the node's cache (another
    revision, a pruned or deleted file) or were never verified there."""
    DRIVER = "driver"
    """The NVIDIA driver differs from the inventory."""
    CUDA = "cuda"
    """The CUDA driver version differs from the inventory."""
    GPU = "gpu"
    """GPUs (name, count, memory, compute capability, architecture) differ from the inventory."""
    ENGINE_VERSION = "engine-version"
    """The engine's ``/version`` differs from the profile's ``engine_version``."""
    KV_POOL = "kv-pool"
    """The latest boot's KV pool differs from the baseline beyond the profile's tolerance."""
    CUDAGRAPH_MODE = "cudagraph-mode"
    """The latest boot's CUDA-graph mode differs from the expected one."""
    UNREACHABLE = "unreachable"
    """The node could not be reached or read: nothing on it was checked."""
    ERROR = "error"
    """A fact could not be read (docker down, collector failed): that part was not checked."""


ERROR_KINDS = frozenset({DriftKind.UNREACHABLE, DriftKind.ERROR})
"""Kinds that mean "not checked" rather than "differs": they make the exit status 1."""

NodeStatus = Literal["ok", "drift", "error"]


class DriftItem(StrictModel):
    """One difference between git and a node."""

    node: str
    """Node name."""
    deployment: str | None
    """Deployment name; ``None`` for node-wide facts (GPU, driver, reachability)."""
    kind: DriftKind
    """What differs."""
    expected: JsonValue = None
    """What git says (``None`` when git says nothing should be there)."""
    observed: JsonValue = None
    """What the node has (``None`` when missing or unreadable)."""
    message: str
    """One line for the operator: what differs and what to do."""
    subject: str | None = None
    """The file, variable or label concerned, when the kind has several."""


def short_digest(digest: str | None) -> str | None:
    """``algo:`` and the first 12 hex digits of a digest (its first 12 characters when it
    names no algorithm), short enough for a message."""
    if digest is None:
        return None
    algo, _, hexpart = digest.partition(":")
    return f"{algo}:{hexpart[:12]}" if hexpart else digest[:12]


class ItemCollector:
    """Collects items for one node and deployment; each message is prefixed with where."""

    def __init__(self, node: str, deployment: str | None) -> None:
        self.node = node
        self.deployment = deployment
        self.found: list[DriftItem] = []

    def add(self, kind: DriftKind, expected: JsonValue, observed: JsonValue, message: str,
            subject: str | None = None) -> None:
        """Record one difference (``subject``: the file, variable or label concerned)."""
        where = f"{self.node}/{self.deployment}" if self.deployment else self.node
        self.found.append(DriftItem(node=self.node, deployment=self.deployment, kind=kind,
                                    expected=expected, observed=observed,
                                    message=f"{where}: {message}", subject=subject))

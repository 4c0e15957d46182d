"""A container of a deployment's compose project, as the node reports it.

:class:`ObservedContainer` is the one model of a node's containers;
:func:`container_from_facts` fills it from the node reader's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from servefleet.core.models.common import StrictModel
from servefleet.core.render.layout import LABEL_PREFIX

RELEASES_DIR = "releases"
"""Folder of a deployment that holds one sub-folder per release."""
RELEASE_LABEL = f"{LABEL_PREFIX}release"
"""Container label carrying the release id (set by the rendered compose file)."""
COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
"""Label docker compose puts on a container: its service."""
COMPOSE_WORKING_DIR_LABEL = "com.docker.compose.project.working_dir"
"""Label docker compose puts on a container: the project folder it was started from."""


class ObservedEnvValue(StrictModel):
    """One environment variable of a container, as the node reported it."""

    sha256: str
    """``sha256:`` digest of the value (computed on the node)."""
    value: str | None = None
    """The value itself, only for variables known not to be secret."""


class ObservedContainer(StrictModel):
    """One container of a deployment's compose project, as ``docker inspect`` shows it.

    The one model of a node's containers, filled by the one reader of a node
    (:mod:`servefleet.adapters.drift_collect`) for the plan, the rollout, ``health``, watch,
    drift and the Pulumi providers. The fields up to ``command`` are always read; those
    after it only when the read asks for the image, the marker and the boot log (drift and
    the Pulumi providers do, the rollout does not), else they keep their empty defaults.
    """

    name: str
    """Container name without the leading slash."""
    status: str
    """Docker state: ``running``, ``exited``, ``restarting``, ``created``, ``paused``,
    ``dead``."""
    exit_code: int = 0
    """Exit code of the last run (137 after ``docker kill``)."""
    oom_killed: bool = False
    """The kernel OOM killer ended the last run."""
    restart_count: int = 0
    """How often Docker restarted it under its restart policy since it was created."""
    started_at: str | None = None
    """When the current (or last) run started, RFC 3339 (Docker's ``State.StartedAt``)."""
    health: str | None = None
    """Docker healthcheck status (``starting``, ``healthy``, ``unhealthy``); ``None``
    without a healthcheck."""
    image_ref: str | None = None
    """``Config.Image``: the image reference the container was created from."""
    labels: dict[str, str] = Field(default_factory=dict)
    """``Config.Labels``: compose's own (``com.docker.compose.*``), servefleet's
    (:data:`RELEASE_LABEL`…) and those the image brings."""
    id: str = ""
    """Container id."""
    command: tuple[str, ...] | None = None
    """``Config.Cmd``: the engine's command line after the image's entrypoint (``None``:
    not read)."""
    env: dict[str, ObservedEnvValue] = Field(default_factory=dict)
    """``Config.Env``, values hashed on the node (names in the read's plain list keep
    their values)."""
    image_id: str | None = None
    """``Image``: the ID of the image it runs."""
    # -- read only with the image reads (drift, the Pulumi providers) ------------------------
    repo_digests: tuple[str, ...] = ()
    """RepoDigests of the image it runs, ``repo@sha256:…``."""
    ref_image_id: str | None = None
    """Image ID that ``image_ref`` resolves to on the node now: another one than
    ``image_id`` means the tag moved under the container."""
    image_env: dict[str, str] = Field(default_factory=dict)
    """The image's own environment, name → ``sha256:`` digest: set by the image, not by
    compose."""
    image_labels: dict[str, str] = Field(default_factory=dict)
    """The image's own labels."""
    patch_marker_sha256: str | None = None
    """sha256 of the overlay marker inside the container; ``None`` when absent."""
    patch_marker_checked: bool = False
    """Whether the marker could be looked for: the container must run (``False`` also
    when the read did not look)."""

    @property
    def running(self) -> bool:
        """The container is up (``restarting`` is not up: it is crash-looping)."""
        return self.status == "running"

    @property
    def service(self) -> str | None:
        """Compose service name."""
        return self.labels.get(COMPOSE_SERVICE_LABEL) or None

    @property
    def working_dir(self) -> str | None:
        """Compose project folder it was started from: the release folder."""
        return self.labels.get(COMPOSE_WORKING_DIR_LABEL) or None

    @property
    def release_label(self) -> str | None:
        """The release id servefleet labelled the container with."""
        return self.labels.get(RELEASE_LABEL) or None

    @property
    def release_id(self) -> str | None:
        """Release the container was started from: its label, else its project folder."""
        if self.release_label:
            return self.release_label
        if not self.working_dir:
            return None
        parent, _, name = self.working_dir.rstrip("/").rpartition("/")
        return name if parent.endswith("/" + RELEASES_DIR) and name else None

    @property
    def state_phrase(self) -> str:
        """Its status and how its last run ended: ``exited (OOM-killed, exit 137)``."""
        detail = "OOM-killed, " if self.oom_killed else ""
        return f"{self.status} ({detail}exit {self.exit_code})"


def container_from_facts(raw: Mapping[str, Any]) -> ObservedContainer:
    """One container as the node's reader reports it (the collector's ``container_facts``
    of ``docker inspect``, plus its image reads when it made them), every field it read
    filled in."""
    return ObservedContainer(
        id=str(raw.get("id") or ""),
        name=str(raw.get("name") or "").lstrip("/"),
        status=str(raw.get("status") or "unknown"),
        exit_code=int(raw.get("exit_code") or 0),
        oom_killed=bool(raw.get("oom_killed")),
        restart_count=int(raw.get("restart_count") or 0),
        started_at=raw.get("started_at") or None,
        health=raw.get("health") or None,
        image_ref=raw.get("image_ref") or None,
        labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
        command=tuple(str(a) for a in raw["command"])
        if isinstance(raw.get("command"), list) else None,
        env=raw.get("env") or {},
        image_id=raw.get("image_id") or None,
        repo_digests=tuple(raw.get("repo_digests") or ()),
        ref_image_id=raw.get("ref_image_id") or None,
        image_env=raw.get("image_env") or {},
        image_labels=raw.get("image_labels") or {},
        patch_marker_sha256=raw.get("patch_marker_sha256"),
        patch_marker_checked=bool(raw.get("patch_marker_checked")),
    )


def as_adopted(container: ObservedContainer,
               record: dict[str, str]) -> ObservedContainer:
    """``container`` as started from the release the node's ``adopted`` record names, when
    it is the container that record names (else unchanged). An adopted container's labels
    cannot change while it runs, so the record gives its release, filled in here once so
    that every reader (plan, gate mark, health, watch, drift) sees the same."""
    release = record.get("release")
    if not release or record.get("container") != container.id:
        return container
    return container.model_copy(update={"labels": {**container.labels,
                                                   RELEASE_LABEL: release}})

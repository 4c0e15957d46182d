"""A container of a deployment's compose project, as the node reports it.

:class:`ObservedContainer` is the one model of a node's containers; :func:`parse_container`
reads one line of the observe command's ``docker inspect`` template into it.
"""

from __future__ import annotations

import json

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

    The one model of a node's containers, filled by two readers: the observe command
    (:func:`parse_container`; the plan, rollout, ``health`` and watch read it) and the drift
    collector (:mod:`servefleet.adapters.drift_collect`; drift and the Pulumi provider read
    it). Both fill the fields up to ``command``; the fields after it are read by the drift
    collector alone and keep their empty defaults in an observe command's answer.
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
    # -- read by the drift collector only ----------------------------------------------------
    env: dict[str, ObservedEnvValue] = Field(default_factory=dict)
    """``Config.Env``, values hashed on the node (drift collector only)."""
    image_id: str | None = None
    """``Image``: the ID of the image it runs (drift collector only)."""
    repo_digests: tuple[str, ...] = ()
    """RepoDigests of the image it runs, ``repo@sha256:…`` (drift collector only)."""
    ref_image_id: str | None = None
    """Image ID that ``image_ref`` resolves to on the node now: another one than
    ``image_id`` means the tag moved under the container (drift collector only)."""
    image_env: dict[str, str] = Field(default_factory=dict)
    """The image's own environment, name → ``sha256:`` digest: set by the image, not by
    compose (drift collector only)."""
    image_labels: dict[str, str] = Field(default_factory=dict)
    """The image's own labels (drift collector only)."""
    patch_marker_sha256: str | None = None
    """sha256 of the overlay marker inside the container; ``None`` when absent (drift
    collector only)."""
    patch_marker_checked: bool = False
    """Whether the marker could be looked for: the container must run (drift collector
    only; ``False`` in an observe command's answer)."""

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


def parse_container(line: str) -> ObservedContainer:
    """One line of the observe command's ``docker inspect`` template
    (:data:`servefleet.adapters.remote.INSPECT_TEMPLATE`: its ``image`` is ``Config.Image``)."""
    raw = json.loads(line)
    labels = raw.get("labels") or {}
    return ObservedContainer(
        name=str(raw.get("name", "")).lstrip("/"),
        status=str(raw.get("status", "unknown")),
        exit_code=int(raw.get("exit_code") or 0),
        oom_killed=bool(raw.get("oom_killed")),
        restart_count=int(raw.get("restart_count") or 0),
        started_at=raw.get("started_at") or None,
        health=raw.get("health") or None,
        image_ref=raw.get("image") or None,
        labels={str(k): str(v) for k, v in labels.items()},
        id=str(raw.get("id") or ""),
        command=tuple(str(a) for a in raw["command"])
        if isinstance(raw.get("command"), list) else None,
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

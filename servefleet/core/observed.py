"""Facts read from a node, and the pure parsers of the commands that read them.

Each fact comes from one remote command (built in :mod:`servefleet.adapters.remote`) whose
output is parsed here, so a parser is tested with plain text: output in, fact out.

The observe command prints sections introduced by ``@@`` marker lines::

    @@servefleet-observe 1
    @@lock
    <the lock's owner file, if the node is locked>
    @@deployment main
    @@current
    releases/<id>                  (readlink of <base>/main/current)
    @@releases
    <id>                           (one per line)
    @@previous
    releases/<id>                  (readlink of <base>/main/previous)
    @@last-good
    releases/<id>                  (readlink of <base>/main/last-good)
    @@gated
    release=<id> started=<time> …  (<base>/main/gated: the engine that passed its gate)
    @@manifest
    {…}                            (current release's manifest.json)
    @@files
    <sha256>  ./<path>             (every file of the current release but manifest.json;
                                    engine.env hashed in its secret-hashed form)
    @@secret-digests
    <NAME> <hmac>                  (only when the controller sent a key: see
                                    servefleet.core.envdigest.keyed_value_digests)
    @@containers
    {"name": …, "status": …}       (one JSON object per container of the compose project)
    @@end

``@@end`` proves the output is complete; without it the parser refuses the output rather
than plan from half a picture.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field

from servefleet.core.lockinfo import LockInfo, parse_lock
from servefleet.core.models.common import StrictModel
from servefleet.core.render.release import LABEL_PREFIX

OBSERVE_HEADER = "@@servefleet-observe 1"
RELEASES_HEADER = "@@servefleet-releases 1"
END = "@@end"
MANIFEST_FILE = "manifest.json"
"""Name of the manifest inside each release folder."""
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
    it). Both fill the fields up to ``labels``; the fields after it are read by the drift
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
    # -- read by the drift collector only ----------------------------------------------------
    id: str = ""
    """Container id (drift collector only)."""
    command: tuple[str, ...] | None = None
    """``Config.Cmd`` (drift collector only; ``None``: not read)."""
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


class ObservedDeployment(StrictModel):
    """What one deployment looks like on its node."""

    name: str
    """Deployment name (the folder under the node's base directory)."""
    current_release: str | None = None
    """Release ``current`` points to; ``None`` when there is no ``current`` link."""
    releases: tuple[str, ...] = ()
    """Release folders present under ``releases/``."""
    manifest: dict[str, Any] | None = None
    """The current release's manifest; ``None`` when missing or unreadable."""
    manifest_error: str | None = None
    """Why the manifest could not be read, when it exists but is not JSON."""
    file_hashes: dict[str, str] | None = None
    """Path → sha256 of every file of the current release folder (``manifest.json`` left
    out, ``engine.env`` in its secret-hashed form, as the renderer hashes it); ``None`` when
    the observation did not read them."""
    containers: tuple[ObservedContainer, ...] = ()
    """The compose project's containers (any state)."""
    docker_error: str | None = None
    """What ``docker`` said when it could not list the containers."""
    previous_release: str | None = None
    """Release ``previous`` points to: what was current before."""
    last_good: str | None = None
    """Release ``last-good`` points to: the last one whose engine passed its health gate
    here (written only after a passed gate; the restore target of a failed repair)."""
    gated_release: str | None = None
    """Release of the engine that last passed its gate (``<deployment>/gated``)."""
    gated_started_at: str | None = None
    """Docker's ``StartedAt`` of that engine's container when it passed: an engine started
    (or restarted by Docker) since then has not been gated."""
    secret_digests: dict[str, str] | None = None
    """Variable → HMAC-SHA256 of its assignment in the current ``engine.env``, under the key
    the controller sent with this observation (:func:`servefleet.core.envdigest.
    keyed_value_digests`); ``None`` when no key was sent or the node could not compute
    them. Worthless without that key, which only the observing controller holds."""

    @property
    def gate_miss(self) -> GateMiss | None:
        """How the running engine misses its gate mark (:func:`gate_miss`); ``None`` when
        it passed or nothing runs."""
        container = self.running_container
        if container is None:
            return None
        return gate_miss(container.release_id, container.started_at, self.gated_release,
                         self.gated_started_at)

    @property
    def ungated(self) -> bool:
        """An engine runs that has not passed its health gate: no gate was recorded for
        this release, or its container started (or was restarted) after the gate passed."""
        return self.gate_miss is not None

    @property
    def engine_argv(self) -> list[str] | None:
        """The current release's engine command line, from its manifest."""
        argv = (self.manifest or {}).get("engine_argv")
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            return list(argv)
        return None

    @property
    def running(self) -> bool:
        """Some container of the deployment is running."""
        return any(c.running for c in self.containers)

    @property
    def running_container(self) -> ObservedContainer | None:
        """The deployment's running container (the first, as observed), if one runs."""
        return next((c for c in self.containers if c.running), None)

    @property
    def running_release(self) -> str | None:
        """Release the running container was started from, if one runs."""
        container = self.running_container
        return container.release_id if container is not None else None

    @property
    def restart_count(self) -> int:
        """Restarts of the deployment's containers under Docker's restart policy."""
        return sum(c.restart_count for c in self.containers)

    def engine_state(self) -> str:
        """One phrase for the operator: ``running``, ``exited (137)``, ``no container``…"""
        if self.docker_error:
            return f"unknown (docker: {self.docker_error})"
        if not self.containers:
            return "no container"
        running = [c for c in self.containers if c.running]
        if running:
            restarts = self.restart_count
            return "running" + (f", {restarts} restarts" if restarts else "")
        last = self.containers[0]
        detail = "OOM-killed, " if last.oom_killed else ""
        return f"{last.status} ({detail}exit {last.exit_code})"


class ObservedNode(StrictModel):
    """One observe command's answer: the lock and every asked-for deployment."""

    lock_owner: str | None = None
    """Content of the node lock's owner file (and its state line, see
    :mod:`servefleet.core.lockinfo`); ``None`` when the node is not locked."""
    deployments: dict[str, ObservedDeployment] = Field(default_factory=dict)
    """Deployments found on the node, by name; a name absent here has never been deployed."""
    baselines_text: str | None = None
    """Content of the node's KV baselines file (``None``: none, or not read), for the
    planner's calibration (:mod:`servefleet.core.baselines` parses it)."""

    @property
    def lock(self) -> LockInfo | None:
        """The lock, parsed (``None``: the node is not locked)."""
        return parse_lock(self.lock_owner)


class ReleaseInfo(StrictModel):
    """One release folder on a node, for ``servefleet releases``."""

    release_id: str
    """The folder name under ``releases/``."""
    manifest: dict[str, Any] | None = None
    """Its manifest, when readable."""
    current: bool = False
    """``current`` points here."""
    previous: bool = False
    """``previous`` points here: what was current before (the default rollback target)."""

    @property
    def created_at(self) -> str:
        """When the release was made (from the manifest; empty when unknown)."""
        value = (self.manifest or {}).get("created_at")
        return value if isinstance(value, str) else ""

    @property
    def profile(self) -> str | None:
        """Profile name recorded in the manifest."""
        value = (self.manifest or {}).get("profile")
        if isinstance(value, dict):
            value = value.get("name")
        return value if isinstance(value, str) else None


class PreflightFacts(StrictModel):
    """What the preflight command found on a node."""

    docker_version: str | None = None
    """Docker server version; ``None`` when ``docker`` is missing or the daemon is down."""
    docker_error: str | None = None
    """What ``docker version`` said when it failed."""
    compose: tuple[str, ...] | None = None
    """The compose command that works there: ``("docker", "compose")`` or
    ``("docker-compose",)``; ``None`` when neither does."""
    compose_version: str | None = None
    """Its version."""
    disk_free_bytes: int | None = None
    """Free space on the file system of the base directory."""
    port_in_use: bool | None = None
    """Something listens on the deployment's port; ``None`` when it could not be told."""


# -- parsing ---------------------------------------------------------------------------------
def _sections(text: str, header: str) -> Iterator[tuple[str, list[str]]]:
    """``(marker, lines)`` per ``@@`` section; raise ValueError when incomplete."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != header:
        raise ValueError(f"output does not start with {header!r}: {text[:200]!r}")
    if END not in (line.strip() for line in lines):
        raise ValueError("output is incomplete (no @@end line): the command was cut short")
    marker: str | None = None
    body: list[str] = []
    for line in lines[1:]:
        if line.startswith("@@"):
            if marker is not None:
                yield marker, body
            marker, body = line[2:].strip(), []
            if marker == END[2:]:
                return
        elif marker is not None:
            body.append(line)


def _manifest(lines: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    text = "\n".join(lines).strip()
    if not text:
        return None, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"{MANIFEST_FILE} is not valid JSON ({error.msg} at line {error.lineno})"
    if not isinstance(value, dict):
        return None, f"{MANIFEST_FILE} is not a JSON object"
    return value, None


def _file_hashes(lines: list[str] | None) -> dict[str, str] | None:
    """``sha256sum`` lines (paths as ``./<path>``) as ``path → sha256``."""
    if lines is None:
        return None
    hashes: dict[str, str] = {}
    for line in lines:
        digest, sep, path = line.partition("  ")
        if sep and len(digest) == 64:
            hashes[path.removeprefix("./")] = digest
    return hashes


def _release_of_link(target: str) -> str | None:
    target = target.strip().rstrip("/")
    if not target:
        return None
    parent, _, name = target.rpartition("/")
    if parent.rstrip("/").rpartition("/")[2] != RELEASES_DIR and parent != RELEASES_DIR:
        return None
    return name or None


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
    )


def _deployment(name: str, parts: dict[str, list[str]]) -> ObservedDeployment:
    manifest, manifest_error = _manifest(parts.get("manifest", []))
    current_lines = [ln for ln in parts.get("current", []) if ln.strip()]
    containers: list[ObservedContainer] = []
    docker_error: str | None = None
    for line in parts.get("containers", []):
        if not line.strip():
            continue
        try:
            containers.append(parse_container(line))
        except (ValueError, TypeError):
            docker_error = line.strip()[:300]
    if "docker-error" in parts:
        docker_error = " ".join(ln.strip() for ln in parts["docker-error"] if ln.strip())[:300]
    # Running containers first: they are what serves.
    containers.sort(key=lambda c: (not c.running, c.name))
    gated = parse_gate_mark(parts.get("gated"))
    return ObservedDeployment(
        name=name,
        current_release=_release_of_link(current_lines[0]) if current_lines else None,
        releases=tuple(sorted(ln.strip() for ln in parts.get("releases", []) if ln.strip())),
        manifest=manifest,
        manifest_error=manifest_error,
        file_hashes=_file_hashes(parts.get("files")),
        containers=tuple(containers),
        docker_error=docker_error or None,
        previous_release=_link(parts.get("previous")),
        last_good=_link(parts.get("last-good")),
        gated_release=gated.get("release"),
        gated_started_at=gated.get("started"),
        secret_digests=_secret_digests(parts.get("secret-digests")),
    )


def _secret_digests(lines: list[str] | None) -> dict[str, str] | None:
    """``NAME <hex HMAC>`` lines; ``None`` when absent or unreadable (python3 missing)."""
    if lines is None:
        return None
    digests: dict[str, str] = {}
    for line in lines:
        name, _, digest = line.strip().partition(" ")
        if not name:
            continue
        if len(digest) != 64:
            return None
        digests[name] = digest
    return digests


def _link(lines: list[str] | None) -> str | None:
    found = [ln for ln in lines or [] if ln.strip()]
    return _release_of_link(found[0]) if found else None


GateMiss = Literal["no-gate", "other-release", "started-again"]
"""How a running engine misses its gate mark: no gate passed here, the last one passed for
another release, or its container started again since (by hand, or Docker's restart)."""


def gate_miss(release: str | None, started_at: str | None, gated_release: str | None,
              gated_started_at: str | None) -> GateMiss | None:
    """The one rule for an ungated engine (``plan``, ``health``, drift and the Pulumi
    providers each say it in their own words): the running container of ``release``,
    started at ``started_at``, against the gate mark; ``None`` when it is the gated one."""
    if gated_release is None:
        return "no-gate"
    if release != gated_release:
        return "other-release"
    if started_at != gated_started_at:
        return "started-again"
    return None


def parse_gate_mark(lines: list[str] | None) -> dict[str, str]:
    """``release=<id> started=<StartedAt> at=<time>`` (the ``gated`` file) as a mapping."""
    text = " ".join(lines or [])
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


def parse_observation(text: str) -> ObservedNode:
    """Parse the observe command's output (see the module docstring).

    A deployment whose folder does not exist is left out: it has never been deployed.
    """
    lock_owner: str | None = None
    baselines: str | None = None
    deployments: dict[str, ObservedDeployment] = {}
    current: str | None = None
    exists = False
    parts: dict[str, list[str]] = {}

    def flush() -> None:
        if current is not None and exists:
            deployments[current] = _deployment(current, parts)

    for marker, body in _sections(text, OBSERVE_HEADER):
        if marker == "lock":
            owner = "\n".join(body).strip()
            lock_owner = owner or None
        elif marker == "baselines":
            baselines = "\n".join(body).strip() or None
        elif marker.startswith("deployment "):
            flush()
            current, exists, parts = marker.split(" ", 1)[1], True, {}
        elif marker == "absent":
            exists = False
        else:
            parts[marker] = body
    flush()
    return ObservedNode(lock_owner=lock_owner, deployments=deployments,
                        baselines_text=baselines)


def parse_releases(text: str) -> list[ReleaseInfo]:
    """Parse the releases command's output, newest first (by the manifests' times)."""
    links: dict[str, str | None] = {"current": None, "previous": None}
    found: list[ReleaseInfo] = []
    for marker, body in _sections(text, RELEASES_HEADER):
        if marker in links:
            lines = [ln for ln in body if ln.strip()]
            links[marker] = _release_of_link(lines[0]) if lines else None
        elif marker.startswith("release "):
            release_id = marker.split(" ", 1)[1].strip()
            manifest, _ = _manifest(body)
            found.append(ReleaseInfo(release_id=release_id, manifest=manifest))
    found = [r.model_copy(update={"current": r.release_id == links["current"],
                                  "previous": r.release_id == links["previous"]})
             for r in found]
    found.sort(key=lambda r: (r.created_at, r.release_id), reverse=True)
    return found


def parse_preflight(text: str) -> PreflightFacts:
    """Parse the preflight command's ``key=value`` lines (unknown keys are ignored)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    compose = values.get("compose") or None
    disk = values.get("disk_free_kib", "")
    port = values.get("port_in_use", "")
    return PreflightFacts(
        docker_version=values.get("docker_version") or None,
        docker_error=values.get("docker_error") or None,
        compose=tuple(compose.split()) if compose else None,
        compose_version=values.get("compose_version") or None,
        disk_free_bytes=int(disk) * 1024 if disk.isdigit() else None,
        port_in_use={"yes": True, "no": False}.get(port),
    )

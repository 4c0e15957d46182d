"""What a node holds: its deployments, its lock and its release folders."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from servefleet.core.lockinfo import LockInfo, parse_lock
from servefleet.core.models.common import StrictModel
from servefleet.core.observed.container import ObservedContainer
from servefleet.core.observed.gate import GateMiss, gate_miss


class ComposeService(StrictModel):
    """The engine service as ``docker compose config`` merges the current release on its
    node: Compose's own answer (every ``-f`` file, ``.env`` interpolation, ``!reset`` and
    ``!override``), for the fields drift compares. Env files stay unresolved."""

    image: str | None = None
    """``image:``."""
    command: tuple[str, ...] | None = None
    """``command:`` as a list."""
    environment: dict[str, str] = Field(default_factory=dict)
    """``environment:`` (not the ``env_file``, whose values may be secrets)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """``labels:``."""


class BootSummary(StrictModel):
    """The facts of the latest boot log that drift and the Pulumi providers compare."""

    outcome: str | None = None
    """``ready``, ``failed`` or ``incomplete``."""
    kv_cache_tokens: int | None = None
    """KV pool in tokens (vLLM)."""
    kv_cache_mib: float | None = None
    """KV buffer in MiB (llama.cpp)."""
    cudagraph_mode: str | None = None
    """Final CUDA-graph mode."""


class ObservedDeployment(StrictModel):
    """What one deployment looks like on its node.

    The one model of an observed deployment: the rollout, the plan, ``health`` and watch
    read it, and so do drift and the Pulumi providers, whose read adds the latest boot's
    facts and the engine's version (the fields from ``boot`` on; else left empty).
    """

    name: str
    """Deployment name (the folder under the node's base directory)."""
    present: bool = True
    """The deployment's folder exists (``False``: never made, or removed by hand, while a
    container of it may still run). The gate mark is read with the folder: without the
    folder none was read."""
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
    engine_container_id: str | None = None
    """Id of the container that serves, as the node's reader chose it among
    :attr:`containers` (a running one, else the most recently created); ``None`` when the
    deployment has none."""
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
    adopted_release: str | None = None
    """Release an adopted container runs as (``<deployment>/adopted``): a container
    started by hand that servefleet took over without a restart."""
    adopted_from: str | None = None
    """The adopted container's name before servefleet renamed it."""
    adopt_candidate: ObservedContainer | None = None
    """The container the stack says to adopt, read while the deployment has no current
    release (``None``: none named, or no such container)."""
    secret_digests: dict[str, str] | None = None
    """Variable → HMAC-SHA256 of its assignment in the current ``engine.env``, under the key
    the controller sent with this observation (:func:`servefleet.core.envdigest.
    keyed_value_digests`); ``None`` when no key was sent or the node could not compute
    them. Worthless without that key, which only the observing controller holds."""
    release_secret_digests: dict[str, str] = Field(default_factory=dict)
    """Variable → ``sha256:`` digest of its value in the current release's ``engine.env``
    (unkeyed: what drift compares a container's hashed environment with)."""
    weights: dict[str, Any] | None = None
    """What the node holds of the current release's staged weights (``present``,
    ``verified``, ``revisions``: the commits its cache holds of the repository); ``None``
    when the release stages none."""
    # -- read by drift and the Pulumi providers alone -------------------------------------
    boot: BootSummary | None = None
    """Facts of the engine container's latest boot log; ``None`` when it was not read."""
    engine_version: str | None = None
    """What the engine's HTTP API says its version is."""
    engine_version_error: str | None = None
    """Why the version could not be asked."""
    compose_service: ComposeService | None = None
    """The engine service as Compose merges the current release; ``None`` when it was not
    asked for, there is no current release, or Compose failed (:attr:`compose_error`)."""
    compose_error: str | None = None
    """What ``docker compose config`` said when it failed."""

    @property
    def engine_container(self) -> ObservedContainer | None:
        """The container that serves (:attr:`engine_container_id`), if the deployment has
        one: the one drift and the Pulumi providers check."""
        if self.engine_container_id is None:
            return None
        return next((c for c in self.containers if c.id == self.engine_container_id), None)

    @property
    def other_containers(self) -> int:
        """How many more containers the compose project has besides the one that serves
        (left-overs)."""
        return max(0, len(self.containers) - 1)

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
        return self.containers[0].state_phrase


class ObservedNode(StrictModel):
    """One read of a node: its lock and every asked-for deployment."""

    lock_owner: str | None = None
    """Content of the node lock's owner file (and its state line, see
    :mod:`servefleet.core.lockinfo`); ``None`` when the node is not locked."""
    deployments: dict[str, ObservedDeployment] = Field(default_factory=dict)
    """Deployments found on the node, by name; a name absent here has never been deployed."""
    baselines: Any = None
    """The node's KV baselines file as JSON (``None``: none, unreadable, or not read), for
    the planner's calibration (:func:`servefleet.core.baselines.book_from_json` reads it)."""

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

"""What ``servefleet import`` knows of one container on a node: :class:`RunningEngine`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mount:
    """A bind mount or volume of the container."""

    source: str
    """Host path (bind) or volume name."""
    target: str
    """Path inside the container."""
    read_only: bool
    """Mounted read-only."""


@dataclass(frozen=True)
class RunningEngine:
    """One container as ``docker inspect`` showed it, read for import.

    Holds no secret value: :attr:`secret_env` has names only, and a flag whose name looks
    secret has its value replaced in :attr:`argv` (see :data:`SECRET_VALUE`).
    """

    container: str
    """Container name, without Docker's leading ``/``."""
    container_id: str
    """Full container id."""
    engine: str | None
    """``vllm`` or ``llama.cpp``; ``None``: not an engine servefleet runs (see
    :attr:`other_engine`)."""
    argv: tuple[str, ...] = ()
    """The engine's arguments after its entrypoint (what ``engine_command`` renders)."""
    other_engine: str | None = None
    """An inference engine servefleet does not run (``sglang``…), when recognised."""
    state: str = "running"
    """Docker's state (``running``, ``exited``…)."""
    image: str = ""
    """``Config.Image``: the reference the container was created from."""
    image_digest: str | None = None
    """``sha256:…`` from the image's RepoDigests for that repository; ``None``: unknown
    (a local build, or the image was removed)."""
    engine_version: str | None = None
    """The engine version the container says it runs, where it says so (a simulated
    node's ``STANDIN_ENGINE_VERSION``); else read from the image tag."""
    simulated: bool = False
    """Runs through a simulated node's CPU twin on a stand-in image (see
    :mod:`servefleet.core.adopt.entrypoint`)."""
    env: dict[str, str] = field(default_factory=dict)
    """Plain variables the container sets beyond its image's own."""
    secret_env: tuple[str, ...] = ()
    """Names of variables that hold secrets (values dropped on reading)."""
    mounts: tuple[Mount, ...] = ()
    """Bind mounts and volumes."""
    host_network: bool = False
    """``--network host`` / ``network_mode: host``."""
    published_ports: dict[int, int] = field(default_factory=dict)
    """Container port → host port, for published TCP ports."""
    gpu_count: int | None = None
    """GPUs reserved through ``--gpus`` / compose ``deploy.resources``: ``-1`` all, ``0``
    none (no device request)."""
    gpu_ids: tuple[str, ...] = ()
    """GPUs reserved by id, when pinned (``--gpus '"device=0,1"'``)."""
    restart_policy: str = ""
    """``no``, ``always``, ``on-failure:3``…"""
    compose_project: str | None = None
    """``com.docker.compose.project``: started by ``docker compose``."""
    compose_service: str | None = None
    """``com.docker.compose.service``."""
    compose_dir: str | None = None
    """``com.docker.compose.project.working_dir``."""
    compose_files: tuple[str, ...] = ()
    """``com.docker.compose.project.config_files`` (comma-separated in the label)."""
    servefleet_profile: str | None = None
    """The ``io.servefleet.profile`` label: the container was deployed by servefleet."""
    notes: tuple[str, ...] = ()
    """What reading the container noticed (a masked flag, an unknown image)."""

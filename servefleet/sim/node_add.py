"""``servefleet node add`` of a simulated node: the test-bed settings it needs beyond what
the node reports.

A simulated node answers SSH and the GPU probe like a real one (its stand-in
``nvidia-smi``), but its engines run on this machine's CPU through a compose override and
live under the test bed's folders. When the address given to ``node add`` is a node that
``sim up`` started on this machine, those settings are taken from the inventory file
``sim up`` wrote for it (the one place they are decided) and the override is copied next
to the new node file. For any other address this returns ``None`` and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servefleet.core.errors import SimError
from servefleet.core.yamlfile import read_yaml
from servefleet.sim import state
from servefleet.sim.layout import SimLayout, state_dir_from_env

SIM_KEYS = ("simulated", "base_dir", "hf_cache", "models_dir", "ports", "fast_link",
            "labels", "sim")
"""Top-level settings of a simulated node that the node cannot report."""
SIM_SSH_KEYS = ("authorized_keys",)


@dataclass(frozen=True)
class SimNodeParts:
    """What a simulated node's file adds to the read facts."""

    settings: dict[str, Any]
    """Top-level settings (:data:`SIM_KEYS`, and ``compose_overrides``)."""
    ssh: dict[str, Any]
    """``ssh`` settings (:data:`SIM_SSH_KEYS`)."""
    files: dict[str, str] = field(default_factory=dict)
    """Project-relative path → text: the node's compose override."""
    note: str = ""
    """The comment above the settings in the node file."""


def simulated_parts(address: str, name: str) -> SimNodeParts | None:
    """The test-bed settings of the simulated node at ``address``, for a node file named
    ``name``; ``None`` when no simulated node of this machine has that address."""
    try:
        fleet = state.load(SimLayout(state_dir_from_env()))
    except (SimError, OSError):
        return None
    spec = next((n.spec for n in fleet.nodes.values() if n.spec.address == address), None)
    if spec is None:
        return None
    files = {Path(p).name: Path(p) for p in fleet.inventory_files}
    written = files.get(f"{spec.name}.yaml")
    if written is None or not written.is_file():
        return None
    document = read_yaml(written)
    if not isinstance(document, dict):
        return None
    settings = {k: document[k] for k in SIM_KEYS if k in document}
    ssh = document.get("ssh") or {}
    copied: dict[str, str] = {}
    overrides = []
    for index, source in enumerate(document.get("compose_overrides") or ()):
        origin = written.parent.parent.parent / source
        target = f"nodes/{name}.sim-override{'' if index == 0 else index}.yaml.j2"
        copied[target] = origin.read_text()
        overrides.append(target)
    if overrides:
        settings["compose_overrides"] = overrides
    return SimNodeParts(
        settings=settings, ssh={k: ssh[k] for k in SIM_SSH_KEYS if k in ssh}, files=copied,
        note=f"Simulated node {spec.name} of this machine (`servefleet sim up`): its test-bed "
             "settings, as servefleet/sim decides them")

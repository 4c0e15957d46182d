"""``servefleet models NODE``: the staged weights a node caches, the releases that use each,
and the pruning of those no release on the node needs (one SSH round trip running
:mod:`.models_script` with ``python3``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from servefleet.adapters.runtime import Transport
from servefleet.core.errors import RemoteError

MODELS_TIMEOUT_SECONDS = 300
"""Summing a cache of a few hundred GB of files and deleting some: minutes at most."""


@dataclass(frozen=True)
class StagedItem:
    """One snapshot or file servefleet staged and verified on the node."""

    kind: str
    """``snapshot`` or ``file``."""
    pin: str
    """``org/name@<commit>`` or ``<file> sha256:<digest>``."""
    path: str
    """Where it is on the node."""
    size: int
    """Bytes on disk (a snapshot's files, links followed)."""
    used_by: tuple[str, ...]
    """``deployment/release`` of each release on the node that stages it (``*``: current)."""
    pruned: bool | None = None
    """With ``--prune``: whether it was removed (``None``: in use, kept)."""


@dataclass(frozen=True)
class ModelsReport:
    """What :func:`staged_models` found (and pruned)."""

    node: str
    items: tuple[StagedItem, ...]
    errors: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """For ``--json``."""
        return {"node": self.node, "errors": list(self.errors), "items": [
            {"kind": i.kind, "pin": i.pin, "path": i.path, "bytes": i.size,
             "used_by": list(i.used_by), **({} if i.pruned is None else {"pruned": i.pruned})}
            for i in self.items]}


def program() -> bytes:
    """The node program."""
    return resources.files(__package__ or __name__).joinpath("models_script.py").read_bytes()


def parse(node: str, text: str) -> ModelsReport:
    """The node program's JSON answer."""
    try:
        data = json.loads(text.strip().splitlines()[-1])
        items = tuple(
            StagedItem(kind=str(i["kind"]), pin=str(i["pin"]), path=str(i["path"]),
                       size=int(i["bytes"]), used_by=tuple(str(u) for u in i["used_by"]),
                       pruned=i.get("pruned"))
            for i in data["items"])
        return ModelsReport(node, items, tuple(str(e) for e in data.get("errors") or []))
    except (ValueError, KeyError, TypeError, IndexError) as error:
        raise RemoteError(node, "list the staged models", None,
                          f"unreadable answer ({error}): {text[-300:]}") from None


def staged_models(transport: Transport, *, prune: bool = False) -> ModelsReport:
    """List the node's staged weights; with ``prune``, remove those no release needs."""
    node = transport.node
    request = {"base_dir": node.base_dir, "hf_cache": node.hf_cache,
               "models_dir": node.models_dir, "prune": prune}
    done = transport.run(["python3", "-", json.dumps(request)], stdin=program(),
                         timeout=MODELS_TIMEOUT_SECONDS, idempotent=True,
                         what="prune the staged models" if prune else "list the staged models")
    return parse(node.name, done.text())

"""Read the engines running on a node for ``servefleet import``: one SSH round trip that
lists every container (``docker ps -a``), inspects them and their images, and hands the
JSON to :mod:`servefleet.core.adopt` (which keeps no secret value)."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from servefleet.adapters.ssh import SshTransport
from servefleet.core.adopt import RunningEngine, running_engines
from servefleet.core.errors import RemoteError
from servefleet.core.models import Node

SEPARATOR = "--servefleet-import-images--"
"""The line between the containers' JSON and the images' JSON."""
# Constant: no value from the inventory or the operator reaches this script. An image a
# container was created from may be gone (`docker image inspect` then fails for it alone),
# hence the `|| true`; the containers' listing and inspect must succeed.
SCRIPT = f"""set -e
ids=$(docker ps -a -q --no-trunc)
if [ -z "$ids" ]; then echo '[]'; echo {SEPARATOR}; echo '[]'; exit 0; fi
docker inspect $ids
echo {SEPARATOR}
images=$(docker inspect --format '{{{{.Image}}}}' $ids | sort -u)
out=$(docker image inspect $images 2>/dev/null) || true
if [ -n "$out" ]; then printf '%s\n' "$out"; else echo '[]'; fi
"""
TIMEOUT_SECONDS = 60


def import_argv() -> list[str]:
    """The one command run on the node."""
    return ["sh", "-c", SCRIPT, "sh"]


def split_listing(node: str, text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The containers' and the images' ``inspect`` arrays from the command's output."""
    head, sep, tail = text.partition(f"\n{SEPARATOR}\n")
    try:
        containers = json.loads(head) if sep else None
        images = json.loads(tail or "[]") if sep else None
    except json.JSONDecodeError as error:
        raise RemoteError(node, "docker inspect", 0, f"unreadable output ({error})") from None
    if not isinstance(containers, list) or not isinstance(images, list):
        raise RemoteError(node, "docker inspect", 0, "unexpected output (no JSON arrays)")
    return containers, images


def read_engines(node: Node, *, secret_names: Collection[str] = (),
                 sim_env: Collection[str] = (), connect_attempts: int = 2) -> list[RunningEngine]:
    """Every inference-engine container on ``node`` (running or stopped), by name.

    Raises :class:`~servefleet.core.errors.UnreachableNode`, ``HostKeyMismatch`` or
    :class:`~servefleet.core.errors.RemoteError` (Docker not usable) in one line each.
    """
    with SshTransport(node, connect_attempts=connect_attempts) as transport:
        done = transport.run(import_argv(), idempotent=True, timeout=TIMEOUT_SECONDS,
                             what="docker ps + inspect (import)")
    containers, images = split_listing(node.name, done.text())
    return running_engines(containers, images, secret_names=secret_names, sim_env=sim_env)

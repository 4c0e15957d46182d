"""The rollout's read of a node: the one node reader, asked for what a rollout needs.

A node is read one way (:mod:`servefleet.adapters.drift_collect`: one ``python3`` program,
sent on stdin). The rollout, the plan, ``health`` and watch ask it for the lock, the release
links, the gate mark and the adopted record, the current release's files, the secret
values' keyed digests and the deployment's containers; drift and the Pulumi providers ask
the same program for more (the image, the overlay marker, the boot log, the GPU).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servefleet.adapters.drift_collect import (
    CollectOptions,
    DeploymentQuery,
    build_request,
    collector_command,
    collector_input,
)
from servefleet.adapters.runtime import Transport
from servefleet.core.errors import RemoteError
from servefleet.core.models import Node
from servefleet.core.observed import ObservedNode, observed_node, parse_answer

OBSERVE_TIMEOUT_SECONDS = 60.0
"""The read's deadline: the program reports what it read before it (see
:class:`~servefleet.adapters.drift_collect.CollectOptions`), and the answer is then refused
as incomplete."""
NOT_FOUND_EXIT = 127
"""The shell's exit status for a command it cannot find."""


def observe_command(node: Node, deployments: Sequence[str], *, key: str = "",
                    candidates: Mapping[str, str] | None = None) -> tuple[list[str], bytes]:
    """The read as ``(argv, stdin)``: the lock, the node's baselines, then per deployment
    its links, records, files and containers; with ``key`` (random, one per call) also the
    keyed digests of the current ``engine.env``'s values. ``candidates``: deployment → a
    container the stack adopts, inspected while the deployment has no current release."""
    adopt = candidates or {}
    queries = [DeploymentQuery(name=name, marker=None, candidate=adopt.get(name) or None)
               for name in deployments]
    options = CollectOptions(timeout=OBSERVE_TIMEOUT_SECONDS, probe=False, boot_log=False,
                             container_extras=False, lock=True, observe_key=key)
    request = build_request(node.base_dir, queries, options)
    return collector_command(options.python), collector_input(request, probe=False)


def parse_observed(node: str, text: str, deployments: Sequence[str], *,
                   key: str = "") -> ObservedNode:
    """The read's answer as an :class:`ObservedNode`; :class:`RemoteError` when it is not a
    complete answer."""
    try:
        return observed_node(parse_answer(text), deployments, keyed=bool(key))
    except ValueError as error:
        raise RemoteError(node, f"observe: {error}") from None


def observe_node(transport: Transport, deployments: Sequence[str], *, key: str = "",
                 candidates: Mapping[str, str] | None = None) -> ObservedNode:
    """Read the node over ``transport`` (read-only: retried once after a dropped
    connection)."""
    argv, stdin = observe_command(transport.node, deployments, key=key, candidates=candidates)
    result = transport.run(argv, stdin=stdin, check=False, idempotent=True,
                           timeout=OBSERVE_TIMEOUT_SECONDS + 30, what="observe the node")
    if result.exit_status == NOT_FOUND_EXIT:
        raise RemoteError(transport.node.name, "observe the node: python3 is not installed "
                          "on the node; servefleet reads a node with it (install python3)")
    if not result.ok:
        tail = transport.mask(result.stderr.decode("utf-8", "replace").strip()[-300:])
        raise RemoteError(transport.node.name, "observe the node", result.exit_status, tail)
    return parse_observed(transport.node.name, result.text(), deployments, key=key)

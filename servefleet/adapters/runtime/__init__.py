"""How servefleet reaches a node and runs its engines: the runtime seam.

- :mod:`.base`: :class:`Transport`, a node's connection (commands as argv lists), and
  :class:`CommandResult`;
- :mod:`.node`: :class:`NodeRuntime`, what a rollout's state machine asks of a node;
- :mod:`.ssh`: the one implementation today, OpenSSH to the node and Docker Compose on it.

Everything else opens a node with :func:`connect` and drives its engines through
:func:`runtime_for`, never naming an implementation; :func:`implementation` is the one
place that decides, from the node, which one reaches it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servefleet.adapters.runtime.base import (
    CommandResult,
    Connection,
    Implementation,
    Transport,
    TransportFactory,
)
from servefleet.adapters.runtime.node import NodeRuntime, RuntimeLock

if TYPE_CHECKING:
    from servefleet.adapters.weights.peers import PeerCopy
    from servefleet.core.models import Node
    from servefleet.core.secrets import SecretMask

__all__ = [
    "CommandResult", "Connection", "Implementation", "NodeRuntime", "RuntimeLock", "Transport",
    "TransportFactory", "connect", "implementation", "implementations", "open_transport",
    "runtime_for",
]


def implementations() -> tuple[Implementation, ...]:
    """Every implementation :func:`implementation` can pick (the contract tests run each)."""
    # Imported here, not above: the implementations import paramiko and the rollout's
    # steps, which themselves import this package's protocols.
    from servefleet.adapters.runtime.ssh import SSH_COMPOSE

    return (SSH_COMPOSE,)


def implementation(node: Node) -> Implementation:
    """The implementation that reaches ``node``.

    Every inventory node is an SSH host whose engines Docker Compose runs; a node of
    another kind (Kubernetes) is to be told apart here, and nowhere else.
    """
    del node  # one kind of node today
    (ssh_compose,) = implementations()
    return ssh_compose


def connect(node: Node, *, mask: SecretMask | None = None,
            connect_attempts: int | None = None) -> Transport:
    """``node``'s connection, not yet open: use it as a context manager. ``mask`` hides the
    secrets' values in errors; ``connect_attempts`` (``None``: the implementation's
    default) is capped by the command's connect policy
    (:mod:`servefleet.core.connect_policy`)."""
    return implementation(node).connect(node, mask=mask, connect_attempts=connect_attempts)


def open_transport(node: Node, mask: SecretMask) -> Transport:
    """:func:`connect` as a :data:`TransportFactory` (the default of every entry point)."""
    return connect(node, mask=mask)


def runtime_for(transport: Transport, *, peers: PeerCopy | None = None) -> NodeRuntime:
    """The runtime a rollout drives on ``transport``'s node, over ``transport``
    (``peers``: the fleet's other nodes, to copy staged weights from)."""
    return implementation(transport.node).runtime(transport, peers=peers)

"""Nodes reached over OpenSSH whose engines Docker Compose runs.

- :mod:`.transport`: :class:`~.transport.SshTransport`, one verified, reused paramiko
  connection per node (pinned host keys, connect retries, remote timeouts);
- :mod:`.compose`: :class:`~.compose.ComposeSshRuntime`, the rollout's runtime: one
  deployment is one compose project, its releases folders on the node.

Nothing outside :mod:`servefleet.adapters.runtime` imports these; it picks them through
:data:`SSH_COMPOSE`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servefleet.adapters.runtime.base import Transport
    from servefleet.adapters.runtime.node import NodeRuntime
    from servefleet.adapters.weights.peers import PeerCopy
    from servefleet.core.models import Node
    from servefleet.core.secrets import SecretMask


class SshCompose:
    """The SSH + Compose implementation of :class:`~servefleet.adapters.runtime.base.
    Implementation`."""

    name = "ssh+compose"

    def connect(self, node: Node, *, mask: SecretMask | None = None,
                connect_attempts: int | None = None) -> Transport:
        """An :class:`~.transport.SshTransport` (the rollout's four connect attempts unless
        ``connect_attempts`` says otherwise)."""
        # Imported when a node is reached: this package is named by every adapter, and
        # its implementations import paramiko and the rollout's steps.
        from servefleet.adapters.runtime.ssh.transport import (
            DEFAULT_CONNECT_ATTEMPTS,
            SshTransport,
        )

        return SshTransport(node, mask=mask, connect_attempts=DEFAULT_CONNECT_ATTEMPTS
                            if connect_attempts is None else connect_attempts)

    def runtime(self, transport: Transport, *, peers: PeerCopy | None = None) -> NodeRuntime:
        """A :class:`~.compose.ComposeSshRuntime` over ``transport``."""
        from servefleet.adapters.runtime.ssh.compose import ComposeSshRuntime

        return ComposeSshRuntime(transport, peers=peers)


SSH_COMPOSE = SshCompose()
"""The implementation every inventory node uses today."""

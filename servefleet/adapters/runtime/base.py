"""What servefleet asks of a node's connection, whatever reaches the node.

Every adapter that acts on a node (observe, lock, upload a release, follow a boot log, run a
health check, read the history) takes a :class:`Transport`; only the runtime package that
implements it (today :mod:`servefleet.adapters.runtime.ssh`) knows how the node is reached.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Self

if TYPE_CHECKING:
    from servefleet.adapters.runtime.node import NodeRuntime
    from servefleet.adapters.weights.peers import PeerCopy
    from servefleet.core.models import Node
    from servefleet.core.secrets import SecretMask


@dataclass(frozen=True)
class CommandResult:
    """What a remote command returned."""

    exit_status: int
    """Exit status (-1 when the connection dropped before one arrived)."""
    stdout: bytes
    """Everything it wrote to stdout."""
    stderr: bytes
    """Everything it wrote to stderr."""

    @property
    def ok(self) -> bool:
        """Exit status 0."""
        return self.exit_status == 0

    def text(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", errors="replace")


class Connection(Protocol):
    """A byte stream to a service on the node (a socket or a forwarded channel)."""

    def sendall(self, data: bytes) -> None:
        """Send all of ``data``."""

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes (empty: the other end closed)."""

    def settimeout(self, timeout: float | None) -> None:
        """How long :meth:`recv` and :meth:`sendall` may wait."""

    def close(self) -> None:
        """Close the stream."""


class Transport(Protocol):
    """One node's connection: commands as argv lists, run on the node.

    A context manager (closing it closes the connection); it (re)connects when a command
    needs it. Errors are :class:`~servefleet.core.errors.ServefleetError`:
    :class:`~servefleet.core.errors.RemoteError` for a failed command,
    :class:`~servefleet.core.errors.CommandTimedOut`,
    :class:`~servefleet.core.errors.ConnectionLost` and
    :class:`~servefleet.core.errors.UnreachableNode`.
    """

    @property
    def node(self) -> Node:
        """The node this connection reaches."""

    @property
    def mask(self) -> SecretMask:
        """Masks the secrets' values in what is shown of commands and their output."""

    def __enter__(self) -> Self:
        """Connect."""

    def __exit__(self, *exc: object) -> None:
        """Close."""

    def close(self) -> None:
        """Close the connection (idempotent)."""

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
            timeout: float | None = 120, check: bool = True, idempotent: bool = False,
            what: str | None = None) -> CommandResult:
        """Run ``argv`` on the node: stopped there past ``timeout``; retried once on a new
        connection only when ``idempotent``; with ``check`` a non-zero exit raises
        :class:`~servefleet.core.errors.RemoteError` naming ``what``."""

    def stream_lines(self, argv: Sequence[str], *, timeout: float | None = None,
                     should_stop: Callable[[], bool] | None = None,
                     ) -> Generator[bytes, None, None]:
        """The lines (stdout and stderr merged) of a long-running command as they come;
        closing the iterator stops the command."""

    def open_local_port(self, port: int, *, timeout: float = 10) -> Connection:
        """A connection to ``127.0.0.1:port`` on the node (a service that listens on the
        node's loopback only)."""


TransportFactory = Callable[["Node", "SecretMask"], Transport]
"""Opens a node's connection with the secrets to mask (tests pass a fake node's)."""


class Implementation(Protocol):
    """One way of reaching nodes and running their engines (SSH + Compose today)."""

    name: str
    """Short name, as the contract tests and error messages show it."""

    def connect(self, node: Node, *, mask: SecretMask | None = None,
                connect_attempts: int | None = None) -> Transport:
        """``node``'s connection, not yet open (entering it connects); ``connect_attempts``:
        ``None`` for the implementation's default (the connect policy may lower it)."""

    def runtime(self, transport: Transport, *, peers: PeerCopy | None = None) -> NodeRuntime:
        """The runtime a rollout drives over ``transport`` (``peers``: the fleet's other
        nodes, to copy staged weights from)."""

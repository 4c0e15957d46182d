"""HAProxy's runtime API: one command per connection (its non-interactive mode), each
connection opened by the caller (through SSH to the node's loopback, or a local socket)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Literal, Protocol

from servefleet.adapters.runtime import Transport
from servefleet.core.errors import RemoteError
from servefleet.core.gateway.state import ServerState, server_states

READ_LIMIT = 4 * 1024 * 1024
"""``show stat`` of a large fleet is a few tens of kB."""


class Connection(Protocol):
    """What the API needs of a connection: a socket or a paramiko channel."""

    def sendall(self, data: bytes) -> None: ...
    def recv(self, size: int) -> bytes: ...
    def settimeout(self, timeout: float | None) -> None: ...
    def close(self) -> None: ...


Connect = Callable[[], Connection]


def local_connect(host: str, port: int) -> Connect:
    """Connections to a runtime API this machine reaches directly."""
    return lambda: socket.create_connection((host, port), timeout=10)


def api_through(transport: Transport, port: int) -> RuntimeApi:
    """The gateway's runtime API on its node, reached through ``transport``."""
    return RuntimeApi(lambda: transport.open_local_port(port), where=transport.node.name)


class RuntimeApi:
    """Commands to one HAProxy."""

    def __init__(self, connect: Connect, *, where: str = "gateway",
                 timeout: float = 10) -> None:
        self.connect = connect
        self.where = where
        self.timeout = timeout
        self._one_at_a_time = threading.Lock()

    def command(self, line: str) -> str:
        """Send one command and return HAProxy's whole answer (one at a time: rollouts in
        parallel share one SSH connection)."""
        with self._one_at_a_time:
            return self._command(line)

    def _command(self, line: str) -> str:
        conn = self.connect()
        try:
            conn.settimeout(self.timeout)
            conn.sendall(line.encode() + b"\n")
            chunks: list[bytes] = []
            size = 0
            while size < READ_LIMIT:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as error:
            raise RemoteError(self.where, f"gateway runtime API {line.split()[0]!r}: "
                              f"{error}") from None
        finally:
            conn.close()
        return b"".join(chunks).decode(errors="replace")

    def servers(self) -> list[ServerState]:
        """Every engine in every route, with its admin state, status and requests in
        flight."""
        return server_states(self.command("show servers state"), self.command("show stat"))

    def set_state(self, backend: str, server: str,
                  state: Literal["ready", "drain", "maint"]) -> None:
        """Set a server's admin state; HAProxy answers nothing when it took it."""
        answer = self.command(f"set server {backend}/{server} state {state}").strip()
        if answer:
            raise RemoteError(self.where, f"gateway: set {backend}/{server} {state}: {answer}")


def wait_for(api: RuntimeApi, done: Callable[[list[ServerState]], bool], *,
             timeout: float, interval: float = 0.5,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> list[ServerState]:
    """Read the servers until ``done`` holds or ``timeout`` passes; the last reading."""
    deadline = clock() + timeout
    while True:
        states = api.servers()
        if done(states) or clock() >= deadline:
            return states
        sleep(interval)

"""SSH transport: one verified, reused paramiko connection per node.

- Host keys are checked against the keys pinned in the inventory; a node that presents any
  other key is refused (no trust-on-first-use), naming both fingerprints.
- Connecting is retried with jittered exponential backoff on transient network errors;
  authentication and host-key failures are never retried.
- TCP_NODELAY is set on the socket: without it each command on an open connection costs
  ~48 ms instead of ~5 ms (Nagle + delayed ACK).
- Every command is an argv list, quoted with :func:`shlex.join` before it reaches the
  remote shell; stderr tail and exit status go into errors, with secrets masked.
"""

from __future__ import annotations

import base64
import hashlib
import select
import shlex
import socket
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from servefleet.core.errors import HostKeyMismatch, RemoteError, UnreachableNode
from servefleet.core.models import Node
from servefleet.core.secrets import SecretMask

KEEPALIVE_SECONDS = 15
STDERR_TAIL_BYTES = 2000


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


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:…`` fingerprint of a public key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _pinned_keys(node: Node) -> list[paramiko.PKey]:
    keys = []
    for line in node.ssh.host_keys:
        keytype, blob = line.split()[:2]
        keys.append(paramiko.PKey.from_type_string(keytype, base64.b64decode(blob)))
    return keys


def _is_transient(error: BaseException) -> bool:
    """Network trouble worth retrying; never authentication or host-key problems."""
    if isinstance(error, paramiko.BadHostKeyException | paramiko.AuthenticationException |
                  HostKeyMismatch):
        return False
    return isinstance(error, OSError | EOFError | paramiko.SSHException)


class SshTransport:
    """A connection to one node. Use as a context manager; reconnects when needed."""

    def __init__(self, node: Node, *, mask: SecretMask | None = None,
                 connect_attempts: int = 4) -> None:
        self.node = node
        self.mask = mask or SecretMask()
        self._client: paramiko.SSHClient | None = None
        self._connect_attempts = connect_attempts
        self._pkey: paramiko.PKey | None = None

    # -- connection -------------------------------------------------------------------
    def __enter__(self) -> SshTransport:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def host_alias(self) -> str:
        """The name OpenSSH's known_hosts uses for this node."""
        port = self.node.ssh.port
        return self.node.address if port == 22 else f"[{self.node.address}]:{port}"

    def connect(self) -> None:
        """Open the connection (retried on transient errors) unless already open."""
        if self._client is not None and self._is_active():
            return
        self.close()
        if not self.node.ssh.host_keys:
            raise HostKeyMismatch(
                f"{self.node.name}: no host key is pinned in the inventory (ssh.host_keys); "
                "servefleet does not trust on first use. Run `servefleet keyscan "
                f"{self.node.name}`, check the fingerprint on the node's console, and paste "
                "the line into its inventory file"
            )
        self._load_identity()
        attempt = retry(
            retry=retry_if_exception(_is_transient),
            wait=wait_random_exponential(multiplier=0.3, max=5),
            stop=stop_after_attempt(self._connect_attempts),
            reraise=True,
        )(self._connect_once)
        try:
            attempt()
        except (HostKeyMismatch, paramiko.AuthenticationException) as error:
            if isinstance(error, paramiko.AuthenticationException):
                raise UnreachableNode(
                    f"{self.node.name}: SSH authentication as {self.node.ssh.user!r} failed "
                    f"({error}); check ssh.identity_file / ssh.agent"
                ) from None
            raise
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise UnreachableNode(
                f"{self.node.name}: cannot reach {self.node.address}:{self.node.ssh.port} "
                f"over SSH after {self._connect_attempts} attempts "
                f"({error or type(error).__name__})"
            ) from None

    def _load_identity(self) -> None:
        """Parse the identity file once: given a file name, paramiko tries every key type
        on every connect, which costs CPU that a 50-node fan-out feels."""
        path = self.node.ssh.identity_file
        if not path or self._pkey is not None:
            return
        try:
            self._pkey = paramiko.PKey.from_path(Path(path).expanduser())
        except (OSError, ValueError, paramiko.SSHException) as error:
            raise UnreachableNode(f"{self.node.name}: cannot use the identity file {path} "
                                  f"({error or type(error).__name__})") from None

    def _connect_once(self) -> None:
        ssh = self.node.ssh
        sock = socket.create_connection((self.node.address, ssh.port),
                                        timeout=ssh.connect_timeout_seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = paramiko.SSHClient()
        host_keys = client.get_host_keys()
        for key in _pinned_keys(self.node):
            host_keys.add(self.host_alias, key.get_name(), key)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                self.node.address, port=ssh.port, username=ssh.user, sock=sock,
                pkey=self._pkey, allow_agent=ssh.agent, look_for_keys=False,
                timeout=ssh.connect_timeout_seconds, banner_timeout=ssh.connect_timeout_seconds,
                auth_timeout=ssh.connect_timeout_seconds,
            )
        except paramiko.BadHostKeyException as error:
            sock.close()
            raise HostKeyMismatch(
                f"{self.node.name}: host key mismatch at {self.host_alias}: the node presented "
                f"{error.key.get_name()} {fingerprint(error.key)} but the inventory pins "
                f"{error.expected_key.get_name()} {fingerprint(error.expected_key)}; refusing "
                "to connect (if the node was reinstalled, re-pin its key after checking it)"
            ) from None
        except BaseException:
            sock.close()
            raise
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(KEEPALIVE_SECONDS)
        self._client = client

    def _is_active(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return bool(transport and transport.is_active())

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- commands ---------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
            timeout: float | None = 120, check: bool = True, idempotent: bool = True,
            what: str | None = None) -> CommandResult:
        """Run ``argv`` on the node and return its result.

        ``idempotent`` commands are retried once on a new connection when the connection
        drops; others are not (the caller decides how to recover). With ``check`` a non-zero
        exit raises :class:`RemoteError` naming ``what`` (default: the command).
        """
        label = what or shlex.join(argv)[:120]
        attempts = 2 if idempotent else 1
        for attempt in range(attempts):
            self.connect()
            try:
                result = self._exec(argv, stdin, timeout)
                break
            except (OSError, EOFError, paramiko.SSHException) as error:
                self.close()
                if attempt + 1 == attempts:
                    raise RemoteError(self.node.name, f"{self.mask(label)}: connection lost "
                                      f"({error or type(error).__name__})") from None
        if check and not result.ok:
            tail = self.mask(result.stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace"))
            if not tail.strip():
                tail = self.mask(result.stdout[-STDERR_TAIL_BYTES:].decode("utf-8", "replace"))
            raise RemoteError(self.node.name, self.mask(label), result.exit_status, tail)
        return result

    def _exec(self, argv: Sequence[str], stdin: bytes | None,
              timeout: float | None) -> CommandResult:
        assert self._client is not None
        transport = self._client.get_transport()
        assert transport is not None
        channel = transport.open_session(timeout=30)
        try:
            channel.settimeout(timeout)
            channel.exec_command(shlex.join(argv))
            if stdin:
                view = memoryview(stdin)
                while view:
                    sent = channel.send(bytes(view[:65536]))
                    if sent <= 0:
                        raise EOFError("channel closed while sending")
                    view = view[sent:]
            channel.shutdown_write()
            stdout = bytearray()
            stderr = bytearray()
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if channel.recv_ready():
                    stdout += channel.recv(65536)
                    continue
                if channel.recv_stderr_ready():
                    stderr += channel.recv_stderr(65536)
                    continue
                if channel.exit_status_ready():
                    break
                if channel.closed:
                    raise EOFError("channel closed before the command exited")
                remaining = 1.0 if deadline is None else deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no exit after {timeout:.0f} s")
                # The channel's pipe wakes select() as soon as output or EOF arrives; the
                # exit status comes just after EOF, so the short wait below is for it alone.
                readable, _, _ = select.select([channel], [], [], min(remaining, 1.0))
                if not readable:
                    continue
                if not (channel.recv_ready() or channel.recv_stderr_ready()):
                    channel.status_event.wait(min(max(remaining, 0.0), 0.01))
            return CommandResult(channel.recv_exit_status(), bytes(stdout), bytes(stderr))
        finally:
            channel.close()

    def stream_lines(self, argv: Sequence[str], *, timeout: float | None = None,
                     should_stop: Callable[[], bool] | None = None,
                     ) -> Generator[bytes, None, None]:
        """Yield stdout+stderr lines of a long-running command (e.g. ``docker logs -f``)
        as they arrive; closing the generator stops the remote command."""
        self.connect()
        assert self._client is not None
        transport = self._client.get_transport()
        assert transport is not None
        channel = transport.open_session(timeout=30)
        channel.set_combine_stderr(True)
        channel.settimeout(0.2)
        channel.exec_command(shlex.join(argv))
        buffer = b""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                if should_stop is not None and should_stop():
                    return
                if deadline is not None and time.monotonic() > deadline:
                    return
                try:
                    chunk = channel.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    if buffer:
                        yield buffer
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line + b"\n"
        finally:
            channel.close()

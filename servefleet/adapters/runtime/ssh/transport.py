"""SSH transport: one verified, reused paramiko connection per node (the
:class:`~servefleet.adapters.runtime.base.Transport` of SSH nodes).

- Host keys are checked against the keys pinned in the inventory; a node that presents any
  other key is refused (no trust-on-first-use), naming both fingerprints.
- Connecting is retried with jittered exponential backoff on transient network errors;
  authentication and host-key failures are never retried. Read-only commands make one
  short attempt instead (:mod:`servefleet.core.connect_policy`).
- TCP_NODELAY is set on the socket: without it each command on an open connection costs
  ~48 ms instead of ~5 ms (Nagle + delayed ACK).
- Every command is an argv list, quoted with :func:`shlex.join` before it reaches the
  remote shell; stderr tail and exit status go into errors, with secrets masked.
- A command's output is read until the channel's end of file, *then* its exit status is
  taken: the exit status may arrive in the same moment as the last output, and a loop that
  stops at the exit status loses that output (an observation without its ``@@end`` line).
- A command with a timeout runs under coreutils ``timeout`` on the node, which puts it in a
  process group of its own and signals the whole group (TERM, then KILL after
  :data:`KILL_AFTER_SECONDS`): a timed-out command is stopped on the node, not left running,
  and raises :class:`~servefleet.core.errors.CommandTimedOut`, which is never retried.
- A dropped connection raises :class:`~servefleet.core.errors.ConnectionLost`; only commands
  marked ``idempotent`` are retried (once, on a new connection). Retries are opt-in.
- A node that offers only host-key types of which the inventory pins none is refused with
  :class:`~servefleet.core.errors.HostKeyTypeNotPinned`, naming both sets of types.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path

import paramiko
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from servefleet.adapters.runtime.base import CommandResult
from servefleet.core import connect_policy
from servefleet.core.errors import (
    CommandTimedOut,
    ConnectionLost,
    HostKeyMismatch,
    HostKeyTypeNotPinned,
    RemoteError,
    UnreachableNode,
)
from servefleet.core.hostkeys import pin_advice
from servefleet.core.models import Node
from servefleet.core.secrets import SecretMask

KEEPALIVE_SECONDS = 15
DEFAULT_CONNECT_ATTEMPTS = 4
"""Connect attempts of a rollout (read-only commands make one: ``core.connect_policy``)."""
STDERR_TAIL_BYTES = 2000
KILL_AFTER_SECONDS = 10
"""``timeout -k``: a command that ignores SIGTERM at its timeout gets SIGKILL this much later."""
LOCAL_GRACE_SECONDS = 5
"""Beyond the remote timeout and its kill delay: then the channel is closed from here."""
TIMEOUT_EXITS = (124, 137)
"""Exit statuses of coreutils ``timeout`` when it stopped the command (TERM, KILL)."""
CLOSE_JOIN_SECONDS = 2.0
"""How long :meth:`SshTransport.close` waits for paramiko's reader thread to end."""
# Host-key algorithms of the SSH protocol that sign with a key of another name.
_KEY_TYPE_OF_ALGORITHM = {"rsa-sha2-256": "ssh-rsa", "rsa-sha2-512": "ssh-rsa"}


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


def key_type_of(algorithm: str) -> str:
    """The key type a host-key algorithm signs with (``rsa-sha2-512`` → ``ssh-rsa``)."""
    return _KEY_TYPE_OF_ALGORITHM.get(algorithm, algorithm)


class _RecordingTransport(paramiko.Transport):
    """A paramiko transport that keeps the host-key algorithms the server offered, so that a
    refused key can name them."""

    offered_host_key_types: tuple[str, ...] = ()

    def _really_parse_kex_init(self, m: paramiko.Message,
                               ignore_first_byte: bool = False) -> dict[str, list[str]]:
        parsed: dict[str, list[str]] = super()._really_parse_kex_init(  # type: ignore[misc]
            m, ignore_first_byte)
        if not self.server_mode:
            types = dict.fromkeys(key_type_of(a) for a in parsed.get("server_key_algo_list", ())
                                  if "-cert-" not in a)
            self.offered_host_key_types = tuple(types)
        return parsed


def _shut(client: paramiko.SSHClient) -> None:
    """Close a client: the socket is shut down first and paramiko's reader thread joined,
    then closed. paramiko's own close closes the socket under the thread still reading it,
    which logs ``Socket exception: Bad file descriptor (9)`` on every close."""
    transport = client.get_transport()
    sock = getattr(transport, "sock", None)
    if transport is not None and isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        if transport.is_alive() and transport is not threading.current_thread():
            transport.join(CLOSE_JOIN_SECONDS)
    client.close()
    if isinstance(sock, socket.socket):
        sock.close()


def timed(argv: Sequence[str], timeout: float | None) -> list[str]:
    """``argv`` under coreutils ``timeout`` (own process group, TERM then KILL), or as is
    without a timeout."""
    if timeout is None:
        return list(argv)
    return ["timeout", "-k", str(KILL_AFTER_SECONDS), f"{max(timeout, 0.001):.3f}", *argv]


class SshTransport:
    """A connection to one node. Use as a context manager; reconnects when needed."""

    def __init__(self, node: Node, *, mask: SecretMask | None = None,
                 connect_attempts: int = DEFAULT_CONNECT_ATTEMPTS) -> None:
        self.node = node
        self.mask = mask or SecretMask()
        self._client: paramiko.SSHClient | None = None
        self._connect_attempts = connect_attempts
        self._pkey: paramiko.PKey | None = None
        self._attempt_timeout = node.ssh.connect_timeout_seconds
        """How long the next connect attempt waits (the policy's, set by :meth:`connect`)."""

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
                "servefleet does not trust on first use: "
                + pin_advice(self.node.name, self.node.address)
            )
        self._load_identity()
        policy = connect_policy.current()
        attempts = policy.attempts_for(self._connect_attempts)
        self._attempt_timeout = policy.timeout_for(self.node.ssh.connect_timeout_seconds)
        attempt = retry(
            retry=retry_if_exception(_is_transient),
            wait=wait_random_exponential(multiplier=0.3, max=5),
            stop=stop_after_attempt(attempts),
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
                f"over SSH after {attempts} attempt{'' if attempts == 1 else 's'} "
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
        timeout = self._attempt_timeout
        sock = socket.create_connection((self.node.address, ssh.port), timeout=timeout)
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
                timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                # paramiko passes gss keywords the stubs do not declare on Transport.
                transport_factory=_RecordingTransport,  # type: ignore[arg-type]
            )
        except paramiko.BadHostKeyException as error:
            offered = getattr(client.get_transport(), "offered_host_key_types", ()) \
                or (error.key.get_name(),)
            _shut(client)
            sock.close()
            pinned = sorted({k.get_name() for k in _pinned_keys(self.node)})
            presented = error.key.get_name()
            if presented not in pinned:
                # paramiko asks for the pinned types first: a key of another type means the
                # node offers none of them (a new install, or another sshd configuration).
                raise HostKeyTypeNotPinned(
                    f"{self.node.name}: the node at {self.host_alias} offers host keys of "
                    f"type {', '.join(offered)} but the inventory pins only "
                    f"{', '.join(pinned)} (ssh.host_keys); refusing to connect: "
                    + pin_advice(self.node.name, self.node.address)
                ) from None
            raise HostKeyMismatch(
                f"{self.node.name}: host key mismatch at {self.host_alias}: the node presented "
                f"{error.key.get_name()} {fingerprint(error.key)} but the inventory pins "
                f"{error.expected_key.get_name()} {fingerprint(error.expected_key)}; refusing "
                "to connect (if the node was reinstalled, re-pin its key after checking it)"
            ) from None
        except BaseException:
            _shut(client)
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
        client, self._client = self._client, None
        if client is not None:
            _shut(client)

    def open_local_port(self, port: int, *, timeout: float = 10) -> paramiko.Channel:
        """A TCP connection to ``127.0.0.1:port`` on the node, forwarded through this SSH
        connection (a ``direct-tcpip`` channel): reaches a service that listens on the
        node's loopback only, such as the gateway's runtime API."""
        self.connect()
        transport = self._client.get_transport() if self._client else None
        if transport is None:
            raise ConnectionLost(self.node.name, "the SSH connection closed")
        try:
            return transport.open_channel("direct-tcpip", ("127.0.0.1", port),
                                          ("127.0.0.1", 0), timeout=timeout)
        except (paramiko.SSHException, OSError) as error:
            raise RemoteError(self.node.name, f"connect to 127.0.0.1:{port} on the node "
                              f"through SSH: {error}") from None

    # -- commands ---------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
            timeout: float | None = 120, check: bool = True, idempotent: bool = False,
            what: str | None = None) -> CommandResult:
        """Run ``argv`` on the node and return its result.

        ``timeout``: seconds the command may run; past it the command is stopped on the node
        and :class:`CommandTimedOut` raised. When the connection drops,
        :class:`ConnectionLost` is raised, except that a command marked ``idempotent`` (safe
        to run twice) is first retried once on a new connection. With ``check`` a non-zero
        exit raises :class:`RemoteError` naming ``what`` (default: the command).
        """
        label = self.mask(what or shlex.join(argv)[:120])
        attempts = 2 if idempotent else 1
        for attempt in range(attempts):
            self.connect()
            try:
                result = self._exec(argv, stdin, timeout, label)
                break
            except (OSError, EOFError, paramiko.SSHException) as error:
                self.close()
                if attempt + 1 == attempts:
                    raise ConnectionLost(self.node.name, f"{label}: connection lost "
                                         f"({error or type(error).__name__})") from None
        if check and not result.ok:
            tail = self.mask(result.stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace"))
            if not tail.strip():
                tail = self.mask(result.stdout[-STDERR_TAIL_BYTES:].decode("utf-8", "replace"))
            raise RemoteError(self.node.name, label, result.exit_status, tail)
        return result

    def _timed_out(self, label: str, timeout: float, how: str) -> CommandTimedOut:
        return CommandTimedOut(self.node.name, f"{label}: timed out after {timeout:.0f} s; "
                               f"{how}")

    def _exec(self, argv: Sequence[str], stdin: bytes | None, timeout: float | None,
              label: str = "command") -> CommandResult:
        assert self._client is not None
        transport = self._client.get_transport()
        assert transport is not None
        channel = transport.open_session(timeout=30)
        started = time.monotonic()
        deadline = None if timeout is None else \
            started + timeout + KILL_AFTER_SECONDS + LOCAL_GRACE_SECONDS
        try:
            channel.exec_command(shlex.join(timed(argv, timeout)))
            if stdin:
                channel.settimeout(timeout)
                view = memoryview(stdin)
                while view:
                    try:
                        sent = channel.send(bytes(view[:65536]))
                    except TimeoutError:
                        # The command does not read its input: it hangs, the link is fine.
                        assert timeout is not None
                        raise self._timed_out(label, timeout, "it stopped reading its input "
                                              "(closed here; the node's timeout stops it)"
                                              ) from None
                    if sent <= 0:
                        raise EOFError("channel closed while sending")
                    view = view[sent:]
            channel.shutdown_write()
            stdout, stderr = self._read_to_eof(channel, deadline, label, timeout)
            # The exit status comes with or just after the end of file (or the channel
            # closes without one: the command was killed by a signal).
            while not channel.status_event.wait(0.2):
                if not transport.is_active():
                    raise EOFError("connection closed before the exit status arrived")
                if deadline is not None and time.monotonic() > deadline:
                    assert timeout is not None
                    raise self._timed_out(label, timeout, "no exit status arrived")
            status = channel.exit_status
            if status == -1 and not transport.is_active():
                raise EOFError("connection closed before the exit status arrived")
            if timeout is not None and status in TIMEOUT_EXITS and \
                    time.monotonic() - started >= timeout:
                raise self._timed_out(label, timeout, "stopped on the node (its process "
                                      "group got SIGTERM" + (", then SIGKILL)" if status == 137
                                                             else ")"))
            return CommandResult(status, bytes(stdout), bytes(stderr))
        finally:
            channel.close()

    def _read_to_eof(self, channel: paramiko.Channel, deadline: float | None, label: str,
                     timeout: float | None) -> tuple[bytearray, bytearray]:
        """stdout and stderr until the channel's end of file (or its close)."""
        stdout = bytearray()
        stderr = bytearray()
        while True:
            # Read the flag before draining: paramiko feeds every byte before it marks the
            # end of file, so what is buffered once the flag is seen is everything.
            ended = channel.eof_received or channel.closed
            while channel.recv_ready():
                stdout += channel.recv(65536)
            while channel.recv_stderr_ready():
                stderr += channel.recv_stderr(65536)
            if ended:
                return stdout, stderr
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                assert timeout is not None
                raise self._timed_out(label, timeout, "the node did not stop it in time "
                                      "(closed here)")
            # The channel's pipe wakes select() on output, end of file and close.
            select.select([channel], [], [], min(remaining, 1.0))

    def stream_lines(self, argv: Sequence[str], *, timeout: float | None = None,
                     should_stop: Callable[[], bool] | None = None,
                     ) -> Generator[bytes, None, None]:
        """Yield stdout+stderr lines of a long-running command (e.g. ``docker logs -f``)
        as they arrive; closing the generator stops the remote command.

        Ends normally when the command exits, ``timeout`` passes or ``should_stop`` says
        so; raises :class:`ConnectionLost` when the connection drops first.
        """
        self.connect()
        assert self._client is not None
        transport = self._client.get_transport()
        assert transport is not None
        try:
            channel = transport.open_session(timeout=30)
            channel.set_combine_stderr(True)
            channel.settimeout(0.2)
            # Under ``timeout`` on the node too: a follower whose connection dropped must not
            # leave ``docker logs -f`` running there forever.
            channel.exec_command(shlex.join(timed(argv, timeout)))
        except (OSError, EOFError, paramiko.SSHException) as error:
            self.close()
            raise ConnectionLost(self.node.name, f"stream {self.mask(shlex.join(argv)[:80])}: "
                                 f"connection lost ({error or type(error).__name__})") from None
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
                    if not transport.is_active():
                        chunk = b""
                    else:
                        continue
                if not chunk:
                    if buffer:
                        yield buffer
                    if not transport.is_active() or (channel.closed and
                                                     not channel.status_event.is_set()):
                        self.close()
                        raise ConnectionLost(self.node.name, "stream "
                                             f"{self.mask(shlex.join(argv)[:80])}: connection "
                                             "lost")
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line + b"\n"
        finally:
            channel.close()

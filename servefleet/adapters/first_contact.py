"""The first connection to a machine that has no inventory file yet (``servefleet node
add``): one short attempt, the host key decided during the handshake, then commands over
that same connection.

No trust on first use: the key the server presents is handed to the caller's ``decide``
*before* authenticating, and the connection goes on only if it says yes (the operator
confirmed the fingerprint, or ``--yes``). A key given out of band (``--host-key``) is
pinned up front instead, and a server presenting another one is refused before
authentication. Nothing here writes a file.
"""

from __future__ import annotations

import base64
import contextlib
import shlex
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import paramiko

from servefleet.adapters.runtime.ssh.transport import fingerprint, timed
from servefleet.core import connect_policy
from servefleet.core.errors import HostKeyMismatch, RemoteError, UnreachableNode

CONNECT_SECONDS = connect_policy.READ_ONLY_CONNECT_SECONDS
"""The longest the one connect attempt waits (TCP, banner, authentication)."""


@dataclass(frozen=True)
class Target:
    """Where to connect and as whom."""

    name: str
    """The node's name-to-be (for messages)."""
    address: str
    port: int
    user: str
    identity_file: str | None
    """Private key file; ``None``: the SSH agent."""

    @property
    def where(self) -> str:
        """``node add NAME: ADDRESS:PORT`` for messages."""
        return f"node add {self.name}: {self.address}:{self.port}"


@dataclass(frozen=True)
class PresentedKey:
    """The host key the server presented."""

    line: str
    """``ssh-ed25519 AAAA…`` as pinned in ``ssh.host_keys``."""
    fingerprint: str
    """``SHA256:…`` as ``ssh-keygen -lf`` prints it."""


class Declined(HostKeyMismatch):
    """The host key was not accepted; nothing was sent to the node."""


Decide = Callable[[PresentedKey], bool]
"""Shown the presented key before authentication; True to go on."""


def presented(key: paramiko.PKey) -> PresentedKey:
    """The key as a pinnable line and its fingerprint."""
    return PresentedKey(f"{key.get_name()} {key.get_base64()}", fingerprint(key))


class _Ask(paramiko.MissingHostKeyPolicy):
    """Asks ``decide`` about the unknown key; remembers it when accepted."""

    def __init__(self, decide: Decide, target: Target) -> None:
        self.decide = decide
        self.target = target
        self.accepted: PresentedKey | None = None

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        shown = presented(key)
        if not self.decide(shown):
            raise Declined(f"{self.target.where}: host key {shown.fingerprint} not accepted; "
                           "nothing was sent to the node and nothing written")
        self.accepted = shown


@dataclass
class Contact:
    """An open, authenticated connection and the key it was opened with."""

    client: paramiko.SSHClient
    key: PresentedKey
    target: Target

    def run(self, argv: list[str], stdin: bytes, timeout: float = 120
            ) -> tuple[int, bytes, bytes]:
        """Run ``argv`` (quoted with :func:`shlex.join`, under coreutils ``timeout``) with
        ``stdin``; ``(exit status, stdout, stderr)``."""
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise RemoteError(self.target.name, "the SSH connection closed")
        try:
            channel = transport.open_session(timeout=CONNECT_SECONDS)
            channel.settimeout(timeout + 15)
            channel.exec_command(shlex.join(timed(argv, timeout)))
            channel.sendall(stdin)
            channel.shutdown_write()
            # The probe writes little to stderr: reading stdout first cannot stall on it.
            out = channel.makefile("rb").read()
            err = channel.makefile_stderr("rb").read()
            return channel.recv_exit_status(), out, err
        except (OSError, EOFError, paramiko.SSHException) as error:
            raise RemoteError(self.target.name, f"{self.target.address}: connection lost "
                              f"({error or type(error).__name__}); run again") from None


def _shut(client: paramiko.SSHClient, sock: socket.socket) -> None:
    """Close the connection: the socket is shut down first, so paramiko's reader thread
    ends without logging a closed descriptor."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    client.close()
    sock.close()


def _key_of(line: str) -> paramiko.PKey:
    key_type, blob = line.split()[:2]
    return paramiko.PKey.from_type_string(key_type, base64.b64decode(blob))


def _identity(target: Target) -> paramiko.PKey | None:
    if target.identity_file is None:
        return None
    try:
        return paramiko.PKey.from_path(Path(target.identity_file).expanduser())
    except (OSError, ValueError, paramiko.SSHException) as error:
        raise UnreachableNode(f"{target.where}: cannot use the identity file "
                              f"{target.identity_file} ({error or type(error).__name__}); "
                              "pass --identity-file with a readable private key") from None


@contextmanager
def first_contact(target: Target, *, decide: Decide,
                  expected_key: str | None = None) -> Iterator[Contact]:
    """Connect once to ``target``: ``expected_key`` (a bare ``type base64`` line) must be
    the key the server presents; without it ``decide`` is asked. One attempt of at most
    :data:`CONNECT_SECONDS`; every failure is one line naming the node, the address and
    the fix."""
    pkey = _identity(target)
    try:
        sock = socket.create_connection((target.address, target.port),
                                        timeout=CONNECT_SECONDS)
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else \
            (error.strerror or str(error))
        raise UnreachableNode(f"{target.where}: cannot reach it over SSH ({reason}, one "
                              f"attempt of {CONNECT_SECONDS:g} s); check the address, the "
                              "port and that sshd runs there, then run again") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client = paramiko.SSHClient()
    alias = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
    ask = _Ask(decide, target)
    if expected_key is not None:
        pinned = _key_of(expected_key)
        client.get_host_keys().add(alias, pinned.get_name(), pinned)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    else:
        client.set_missing_host_key_policy(ask)
    try:
        client.connect(target.address, port=target.port, username=target.user, sock=sock,
                       pkey=pkey, allow_agent=pkey is None, look_for_keys=False,
                       timeout=CONNECT_SECONDS, banner_timeout=CONNECT_SECONDS,
                       auth_timeout=CONNECT_SECONDS)
    except paramiko.BadHostKeyException as error:
        _shut(client, sock)
        shown = presented(error.key)
        raise HostKeyMismatch(
            f"{target.where}: the server presented {shown.fingerprint} ({error.key.get_name()})"
            f" but --host-key is {fingerprint(error.expected_key)} "
            f"({error.expected_key.get_name()}); refusing to connect, nothing written: check "
            "the key on the node's console (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)"
        ) from None
    except paramiko.AuthenticationException as error:
        _shut(client, sock)
        raise UnreachableNode(f"{target.where}: SSH authentication as {target.user!r} failed "
                              f"({error}); pass --user and --identity-file (or load the key "
                              "into ssh-agent); nothing written") from None
    except (OSError, EOFError, paramiko.SSHException) as error:
        _shut(client, sock)
        raise UnreachableNode(f"{target.where}: SSH handshake failed "
                              f"({error or type(error).__name__}); check that sshd runs "
                              "there, then run again; nothing written") from None
    except BaseException:  # declined, no terminal, ^C at the prompt: closed, then raised
        _shut(client, sock)
        raise
    accepted = ask.accepted if expected_key is None else presented(_key_of(expected_key))
    assert accepted is not None
    try:
        yield Contact(client, accepted, target)
    finally:
        _shut(client, sock)

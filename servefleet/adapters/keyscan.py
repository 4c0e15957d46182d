"""Fetch a node's SSH host key so the operator can pin it: the one step that trusts nothing.

The key is shown with its fingerprint for the operator to compare with the node's console
(``ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`` there); it is never written to the
inventory automatically, so there is no trust-on-first-use.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import paramiko

from servefleet.adapters.runtime.ssh.transport import fingerprint
from servefleet.core.errors import UnreachableNode
from servefleet.core.models import Node

PREFERRED_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256")


@dataclass(frozen=True)
class ScannedKey:
    """A host key as the node presented it."""

    line: str
    """OpenSSH public key line (``ssh-ed25519 AAAA…``), ready for ``ssh.host_keys``."""
    fingerprint: str
    """``SHA256:…`` fingerprint to compare on the node's console."""


def scan_host_key(node: Node, key_type: str = "ssh-ed25519") -> ScannedKey:
    """Ask the node's sshd for its host key of ``key_type`` without authenticating."""
    try:
        sock = socket.create_connection((node.address, node.ssh.port),
                                        timeout=node.ssh.connect_timeout_seconds)
    except OSError as error:
        raise UnreachableNode(f"{node.name}: cannot reach {node.address}:{node.ssh.port} "
                              f"({error})") from None
    transport = paramiko.Transport(sock)
    try:
        options = transport.get_security_options()
        options.key_types = [key_type, *[k for k in PREFERRED_KEY_TYPES if k != key_type]]
        transport.start_client(timeout=node.ssh.connect_timeout_seconds)
        key = transport.get_remote_server_key()
    except paramiko.SSHException as error:
        raise UnreachableNode(f"{node.name}: SSH handshake failed ({error})") from None
    finally:
        transport.close()
    return ScannedKey(line=f"{key.get_name()} {key.get_base64()}", fingerprint=fingerprint(key))

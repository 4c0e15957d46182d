"""Pinned SSH host keys: the one procedure for pinning one, and the lines it accepts.

``validate``, ``keyscan`` and the inventory's own check give the same advice
(:func:`pin_advice`), and the line either tool prints is taken as printed: the bare
``ssh-ed25519 AAAA…`` of ``servefleet keyscan`` or the ``host ssh-ed25519 AAAA…`` of
``ssh-keyscan`` (its host field, ``[host]:port`` or hashed ``|1|…``, is dropped: the key is
what is pinned).
"""

from __future__ import annotations

import re
import shlex

KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
             "ecdsa-sha2-nistp521", "ssh-rsa")
"""Host-key types a pinned line may hold."""

HOST_KEY_RE = re.compile(
    r"^(" + "|".join(re.escape(t) for t in KEY_TYPES) + r") [A-Za-z0-9+/]+={0,3}( .*)?\Z")
"""A bare OpenSSH public key line: ``type base64 [comment]``."""


def pin_advice(node: str = "NODE", address: str = "HOST") -> str:
    """How to pin a node's host key, in the words every command uses."""
    return (f"run `servefleet keyscan {node}` (or `ssh-keyscan -t ed25519 -- "
            f"{shlex.quote(address)}`), check the fingerprint on the node's console, and paste "
            "the line under ssh.host_keys in its inventory file, as printed")


def normalize_host_key(line: str) -> str:
    """``type base64 [comment]`` from a pasted line; a leading host field (``host``,
    ``host,ip``, ``[host]:port``, ``|1|…``) as ``ssh-keyscan`` prints it is dropped.
    Raises :class:`ValueError` (the message names the line and the fix) otherwise."""
    text = line.strip()
    if HOST_KEY_RE.match(text):
        return text
    host, _, rest = text.partition(" ")
    rest = rest.lstrip()
    if not host.startswith(("@", "#")) and host not in KEY_TYPES \
            and HOST_KEY_RE.match(rest):
        return rest
    shown = f"{line[:40]!r}…" if len(line) > 40 else repr(line)
    if text.startswith("#"):
        why = "is a comment ssh-keyscan prints, not a key"
    elif text.startswith("@"):
        why = "is a known_hosts marker line (@cert-authority, @revoked), not a host key"
    else:
        why = ("is not an OpenSSH host key line (`ssh-ed25519 AAAA…`, with or without "
               "the host name before it)")
    raise ValueError(f"{shown} {why}; {pin_advice()}")

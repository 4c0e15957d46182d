"""A plain OpenSSH ``sshd`` on a loopback port, for tests of the SSH transport.

Not the simulated fleet: no network namespace, no dockerd, nothing under
``/var/lib/servefleet-sim``. Its own host keys (ed25519 and rsa, chosen per server), its
own client key, ``-D -e -f cfg`` in the foreground, stopped by pid at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from servefleet.core.models import Node

START_TIMEOUT_SECONDS = 10.0
PRIVSEP_DIR = "/run/sshd"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (the kernel picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path, keytype: str) -> str:
    """A key pair at ``path``; returns the public ``TYPE BASE64`` line."""
    subprocess.run(["ssh-keygen", "-q", "-t", keytype, "-N", "", "-C", "test", "-f",
                    str(path)], check=True, capture_output=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


@dataclass
class LoopbackSshd:
    """A running sshd and what a client needs to reach it."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes]
    host_keys: dict[str, str]
    """Key type (``ed25519``, ``rsa``) → public line of the host keys it offers."""
    client_key: Path
    program: str
    """The sshd binary."""

    def node(self, *, pinned: Sequence[str] | None = None, name: str = "loop",
             connect_timeout: float = 5.0) -> Node:
        """An inventory node for this server; ``pinned``: host key lines (default: all
        the server offers)."""
        user = os.environ.get("USER") or "root"
        return Node.model_validate({
            "name": name, "address": "127.0.0.1", "arch": os.uname().machine,
            "ssh": {"user": user, "port": self.port, "identity_file": str(self.client_key),
                    "host_keys": list(self.host_keys.values()) if pinned is None
                    else list(pinned),
                    "connect_timeout_seconds": connect_timeout},
            "gpus": [{"name": "NVIDIA GB10", "memory_gib": 128, "unified_memory": True,
                      "compute_capability": "12.1"}],
            "base_dir": str(self.folder / "base"),
        })

    def stop(self) -> None:
        """Stop sshd (by its pid) and wait for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@contextlib.contextmanager
def loopback_sshd(sshd: str, folder: Path, host_key_types: Sequence[str] = ("ed25519",),
                  path_prefix: Path | None = None) -> Iterator[LoopbackSshd]:
    """Start sshd on a free 127.0.0.1 port, offering host keys of ``host_key_types``;
    ``path_prefix`` goes first on the sessions' ``PATH`` (stand-in programs)."""
    folder.mkdir(parents=True, exist_ok=True)
    # sshd refuses to start without its privilege-separation folder (Debian's default).
    Path(PRIVSEP_DIR).mkdir(mode=0o755, exist_ok=True)
    host_keys = {t: keygen(folder / f"host_{t}", t) for t in host_key_types}
    client_pub = keygen(folder / "client", "ed25519")
    (folder / "authorized_keys").write_text(client_pub + "\n")
    port = free_port()
    lines = [f"ListenAddress 127.0.0.1:{port}",
             *(f"HostKey {folder / f'host_{t}'}" for t in host_key_types),
             f"PidFile {folder / 'sshd.pid'}",
             f"AuthorizedKeysFile {folder / 'authorized_keys'}",
             "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
             "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
             "StrictModes no", "PrintMotd no", "UseDNS no",
             "MaxStartups 64:30:256", "MaxSessions 64"]
    if path_prefix is not None:
        lines.append(f'SetEnv "PATH={path_prefix}:/usr/local/bin:/usr/bin:/bin"')
    config = folder / "sshd_config"
    config.write_text("\n".join(lines) + "\n")
    log = (folder / "sshd.log").open("wb")
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=log,
                               stderr=subprocess.STDOUT)
    server = LoopbackSshd(port, folder, process, host_keys, folder / "client", sshd)
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"sshd exited ({process.returncode}): "
                                   f"{(folder / 'sshd.log').read_text()[-500:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port),
                                                                        timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port} within "
                                   f"{START_TIMEOUT_SECONDS:.0f} s")
            time.sleep(0.05)
        yield server
    finally:
        server.stop()
        log.close()

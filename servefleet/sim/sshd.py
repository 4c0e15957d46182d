"""A simulated node's OpenSSH server: the real ``sshd``, one per node, in the node's namespace.

Each node has its own ed25519 host key and accepts the fleet's generated client key for
root. ``SetEnv`` gives every session the node's view of the world: ``DOCKER_HOST`` points at
the node's own Docker Engine, ``PATH`` starts with the node's ``bin`` (the stand-in
``nvidia-smi``), and ``HOME`` is the node's own home (its ``~/.docker`` holds the compose
plugin, and there are no shell start-up files, as on a fresh machine).
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from servefleet.core.errors import SimError
from servefleet.sim import procs
from servefleet.sim.layout import NodeLayout
from servefleet.sim.programs import find_program
from servefleet.sim.spec import NodeSpec

SSH_PORT = 22


def generate_key(path: Path, comment: str) -> None:
    """Create an ed25519 key pair at ``path`` (and ``path.pub``) unless it exists."""
    if path.exists() and path.with_suffix(".pub").exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    result = subprocess.run(
        [find_program("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", comment,
         "-f", str(path)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SimError(f"ssh-keygen for {path} failed: {result.stderr.strip()}")


def public_key_line(private_key: Path) -> str:
    """``ssh-ed25519 AAAA…`` of a key pair, without the comment."""
    fields = private_key.with_suffix(".pub").read_text().split()
    return f"{fields[0]} {fields[1]}"


def render_config(spec: NodeSpec, node: NodeLayout) -> str:
    """The node's sshd_config."""
    env = {
        "PATH": f"{node.bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(node.home),
    }
    if spec.docker:
        env["DOCKER_HOST"] = f"unix://{node.docker_sock}"
    setenv = " ".join(f'"{k}={v}"' for k, v in env.items())
    lines = [
        f"# sshd of the simulated node {spec.name} (servefleet sim).",
        f"ListenAddress {spec.address}:{SSH_PORT}",
        f"HostKey {node.host_key}",
        f"PidFile {node.sshd_pidfile}",
        f"AuthorizedKeysFile {node.authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        # The state folder may live under a world-writable parent (a test's tmp dir).
        "StrictModes no",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
        "UseDNS no",
        "AcceptEnv LANG LC_*",
        # Deploys open several connections per node at once; the default 10:30:100 drops some.
        "MaxStartups 64:30:256",
        "MaxSessions 64",
        f"SetEnv {setenv}",
    ]
    sftp = Path("/usr/lib/openssh/sftp-server")
    if sftp.exists():
        lines.append(f"Subsystem sftp {sftp}")
    return "\n".join(lines) + "\n"


def prepare(spec: NodeSpec, node: NodeLayout, client_public_key: str) -> None:
    """Write the node's host key, authorized_keys and sshd_config."""
    node.ssh_dir.mkdir(parents=True, exist_ok=True)
    node.ssh_dir.chmod(0o700)
    generate_key(node.host_key, f"root@{spec.name}")
    node.authorized_keys.write_text(client_public_key + "\n")
    node.authorized_keys.chmod(0o600)
    node.sshd_config.write_text(render_config(spec, node))
    # sshd refuses to start without its privilege-separation folder.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)


def start(spec: NodeSpec, node: NodeLayout) -> procs.ProcessRecord:
    """Start the node's sshd in its network namespace and a UTS namespace of its own, so
    ``hostname`` in a session is the node's name. Every step executes the next in place
    (no fork, sshd does not detach): the recorded pid is sshd's own."""
    sshd = [find_program("sshd"), "-D", "-f", str(node.sshd_config), "-E", str(node.sshd_log)]
    return procs.spawn(
        [find_program("unshare"), "--uts", "--", "/bin/sh", "-c",
         'hostname "$0" && exec "$@"', spec.name, *sshd],
        log=node.root / "sshd.out", netns=spec.netns)


def wait_ready(spec: NodeSpec, node: NodeLayout, record: procs.ProcessRecord,
               timeout: float = 15.0) -> None:
    """Wait until sshd accepts TCP connections on the node's address."""
    def listening() -> bool:
        try:
            with socket.create_connection((spec.address, SSH_PORT), timeout=1.0):
                return True
        except OSError:
            return False

    procs.wait_until(listening, record, timeout=timeout, delay=0.005, max_delay=0.1,
                     exited=f"{spec.name}: sshd exited",
                     late=f"{spec.name}: sshd did not listen on {spec.address}:{SSH_PORT}",
                     tail=lambda: _tail(node.sshd_log))


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no log at {path})"

"""An operator's first hour, from the built wheel in an empty folder: ``servefleet init``,
``node add`` of a reachable simulated node (its host key's fingerprint shown, pinned on a
"y" typed at a terminal), ``validate``, ``plan``, ``deploy``, in that order, with no YAML
edited beyond placing a profile in the stack file. Two nodes that cannot be reached are
each refused within seconds, in one line, and leave nothing behind.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servefleet.core.project import load_project
from servefleet.sim.testbed import FleetHandle
from tests.test_wheel import install_built_wheel

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NODE = "sim-5090"
DEP = "walk"
PORT = 8003
PROFILE = "qwen36-q4-llamacpp"
LIMIT_SECONDS = 5.0
SECRETS = {"HF_TOKEN": "hf_walk-test-secret"}


@pytest.fixture
def walk_node(sim_fleet: FleetHandle) -> Iterator[FleetHandle]:
    """The fleet, with the walk's deployment removed from :data:`NODE` before and after."""
    sim = load_project(sim_fleet.project_dir, "sim")
    sim_fleet.remove_deployment(sim, DEP, [NODE])
    try:
        yield sim_fleet
    finally:
        sim_fleet.remove_deployment(sim, DEP, [NODE])


def servefleet(env_dir: Path, cwd: Path, *args: str, answer: bytes | None = None,
               timeout: int = 600) -> tuple[int, str, float]:
    """Run the wheel's ``servefleet`` in ``cwd``; ``answer``: typed at a terminal (its
    stdin is a pseudo-terminal). ``(exit status, stdout+stderr, seconds)``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SERVEFLEET_STACK", "SERVEFLEET_PROJECT")} | SECRETS
    argv = [str(env_dir / "bin" / "servefleet"), *args]
    started = time.monotonic()
    if answer is None:
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
        return done.returncode, done.stdout.decode(), time.monotonic() - started
    main, tty = os.openpty()
    try:
        os.write(main, answer)  # read by the prompt once it asks
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=tty, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    finally:
        os.close(tty)
        os.close(main)
    return done.returncode, done.stdout.decode(), time.monotonic() - started


def host_fingerprint(fleet: FleetHandle) -> str:
    """The sim node's host key fingerprint as ``ssh-keygen -lf`` prints it."""
    key = fleet.project_dir / "nodes" / "sim" / f"{NODE}.yaml"
    line = next(raw.strip().removeprefix("- ") for raw in key.read_text().splitlines()
                if raw.strip().startswith("- ssh-ed25519 "))
    out = subprocess.run(["ssh-keygen", "-lf", "-"], input=line, capture_output=True,
                         text=True, check=True).stdout
    return out.split()[1]


def last_lines(out: str, count: int = 40) -> str:
    """The end of a command's output, where it says why it failed (a report cuts the middle
    of a long assertion message, and a deploy's boot log runs to hundreds of lines)."""
    return "\n".join(out.splitlines()[-count:])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_first_hour_from_the_wheel(walk_node: FleetHandle, tmp_path: Path) -> None:
    fleet = walk_node
    (tmp_path / "build").mkdir()
    env_dir = install_built_wheel(tmp_path / "build")
    far = tmp_path / "operator"
    far.mkdir()

    status, out, _ = servefleet(env_dir, far, "init", "fleet")
    assert status == 0, out
    root = far / "fleet"
    key = str(fleet.client_key)

    for name, address, port in (("down-1", "10.255.255.1", 22),
                                ("down-2", "127.0.0.1", closed_port())):
        status, out, took = servefleet(env_dir, root, "node", "add", name, address, "--port",
                                       str(port), "--identity-file", key, "--yes")
        assert status == 1 and took < LIMIT_SECONDS, (took, out)
        [line] = out.splitlines()
        # No answer at all, or something that takes the connection but speaks no SSH (a
        # network that accepts every connection does that for the black-holed address).
        assert line.startswith(f"error: node add {name}: {address}:{port}: ") and (
            "cannot reach it" in line or "SSH handshake failed" in line), line
        assert line.endswith("nothing written") or "cannot reach it" in line, line
        assert not (root / "nodes" / f"{name}.yaml").exists()

    address = fleet.nodes[NODE].address
    status, out, _ = servefleet(env_dir, root, "node", "add", NODE, address, "--user", "root",
                                "--identity-file", key, answer=b"y\n")
    assert status == 0, out
    shown = host_fingerprint(fleet)
    assert f"presents host key {shown} (ssh-ed25519)" in out
    assert "Pin this key and read the node? [y/N]" in out
    text = (root / "nodes" / f"{NODE}.yaml").read_text()
    assert f"# {shown}, confirmed by the operator on " in text
    assert "name: NVIDIA GeForce RTX 5090  # from nvidia-smi on " in text

    # The one edit: place a profile in the stack file, as its own comment shows.
    stack = root / "Pulumi.home.yaml"
    stack.write_text(stack.read_text().replace(
        "  servefleet:profiles: {}\n",
        f"  servefleet:profiles:\n    {NODE}:\n      {DEP}: {{profile: {PROFILE}, "
        f"port: {PORT}}}\n"))

    status, out, _ = servefleet(env_dir, root, "validate")
    assert status == 0, out
    assert out.splitlines()[-1].startswith("stack home: 0 error(s)"), out
    status, out, _ = servefleet(env_dir, root, "plan")
    assert status == 0, out
    assert DEP in out
    status, out, took = servefleet(env_dir, root, "deploy", "--yes")
    (tmp_path / "deploy.log").write_text(out)
    assert status == 0, last_lines(out)
    assert "Traceback" not in out
    print(f"deploy took {took:.0f} s\n{out}")

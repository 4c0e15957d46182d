"""``servefleet node add``: against a real OpenSSH ``sshd`` on a loopback port whose
sessions find the simulated fleet's stand-in ``nvidia-smi`` (an RTX 5090's readout) first
on their PATH.

The host key is shown and pinned on "y", nothing is written on "n", without a terminal or
with another ``--host-key``; an unreachable address fails in one short attempt; an
existing node file is never replaced; the file written validates.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from servefleet.core.project import load_nodes
from servefleet.sim import nvidia_smi
from tests.adapters.loopback_sshd import LoopbackSshd, free_port, loopback_sshd

Run = Callable[..., Result]
LIMIT_SECONDS = 5.0
READOUT = {"driver_version": "580.142", "cuda_version": "13.0",
           "gpus": [{"name": "NVIDIA GeForce RTX 5090", "uuid": "GPU-0c3b7d5e",
                     "pci_bus_id": "00000000:01:00.0", "memory_total_mib": 32607,
                     "memory_free_mib": 32100, "compute_cap": "12.0",
                     "persistence_mode": True, "mig_mode": None}],
           "processes": []}
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHWrinkP5271G+hYsu19FVutAVLAaXGxtzVCSx8KdwfB"


def _install_smi(bin_dir: Path, folder: Path) -> None:
    """The sim fleet's stand-in nvidia-smi, answering from ``READOUT``."""
    readout = folder / "gpu.json"
    readout.write_text(json.dumps(READOUT))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{nvidia_smi.GPU_JSON_ENV}={readout} exec {sys.executable} "
                   f"-I -S {nvidia_smi.__file__} \"$@\"\n")
    smi.chmod(0o755)


def _start(tmp_path: Path, need_program: Callable[[str], str], *,
           gpu: bool) -> Iterator[LoopbackSshd]:
    program = need_program("sshd")
    need_program("ssh-keygen")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if gpu:
        _install_smi(bin_dir, tmp_path)
    with loopback_sshd(program, tmp_path / "sshd", path_prefix=bin_dir) as server:
        yield server


@pytest.fixture
def sshd(tmp_path: Path, need_program: Callable[[str], str]) -> Iterator[LoopbackSshd]:
    """A loopback sshd whose sessions see an RTX 5090 through the stand-in nvidia-smi."""
    yield from _start(tmp_path, need_program, gpu=True)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator is at a terminal (click's runner feeds ``input`` as stdin)."""
    monkeypatch.setattr("servefleet.cli.node.stdin_is_terminal", lambda: True)


def fingerprint_of(server: LoopbackSshd) -> str:
    """``SHA256:…`` of the server's host key, as ``ssh-keygen -lf`` prints it."""
    out = subprocess.run(["ssh-keygen", "-lf", str(server.folder / "host_ed25519.pub")],
                         capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def add(run: Run, server: LoopbackSshd, *extra: str, name: str = "gpu-1",
        input: str | None = None, address: str = "127.0.0.1") -> Result:
    return run("node", "add", name, address, "--port", str(server.port), "--user", "root",
               "--identity-file", str(server.client_key), *extra, input=input)


def test_fingerprint_shown_and_pinned_on_yes(run: Run, project: Path, sshd: LoopbackSshd,
                                             terminal: None) -> None:
    result = add(run, sshd, input="y\n")
    assert result.exit_code == 0, result.output
    shown = fingerprint_of(sshd)
    assert f"presents host key {shown} (ssh-ed25519)" in result.output
    assert "Pin this key and read the node? [y/N]" in result.output
    path = project / "nodes/gpu-1.yaml"
    text = path.read_text()
    assert sshd.host_keys["ed25519"] in text
    assert f"# {shown}, confirmed by the operator on " in text
    assert "name: NVIDIA GeForce RTX 5090  # from nvidia-smi on " in text
    assert "driver_version: '580.142'  # from nvidia-smi on " in text
    document = yaml.safe_load(text)
    assert document["ssh"]["host_keys"] == [sshd.host_keys["ed25519"]]
    assert document["gpus"][0]["memory_gib"] == 31.84
    assert document["cuda_version"] == "13.0"

    nodes, _files, problems = load_nodes(project)
    assert problems == []
    gpu = nodes["gpu-1"].primary_gpu
    # No CUDA library here: CUDA's figure comes from the known-GPU table, said so.
    assert gpu.cuda_memory_gib == 31.37 and str(gpu.memory_source).startswith("known-GPU")
    checked = run("validate")
    assert checked.exit_code == 0, checked.output
    assert checked.output.splitlines()[-1].startswith("stack reference: 0 error(s)")
    assert "gpu-1" not in checked.output  # nothing to say about it


def test_nothing_written_on_no(run: Run, project: Path, sshd: LoopbackSshd,
                               terminal: None) -> None:
    result = add(run, sshd, input="n\n")
    assert result.exit_code == 1
    assert fingerprint_of(sshd) in result.output
    assert "not accepted; nothing was sent to the node and nothing written" in result.output
    assert not (project / "nodes/gpu-1.yaml").exists()


def test_no_terminal_names_the_flags(run: Run, project: Path, sshd: LoopbackSshd) -> None:
    result = add(run, sshd)
    assert result.exit_code == 1
    error = result.output.splitlines()[-1]
    assert "no terminal to confirm host key" in error
    assert f"--host-key '{sshd.host_keys['ed25519']}'" in error and "--yes" in error
    assert not (project / "nodes/gpu-1.yaml").exists()


def test_yes_says_it_accepted_without_confirmation(run: Run, project: Path,
                                                   sshd: LoopbackSshd) -> None:
    result = add(run, sshd, "--yes")
    assert result.exit_code == 0, result.output
    assert f"host key {fingerprint_of(sshd)} accepted without confirmation (--yes)" in \
        result.output
    assert "accepted with --yes without confirmation on" in \
        (project / "nodes/gpu-1.yaml").read_text()


def test_host_key_given_out_of_band(run: Run, project: Path, sshd: LoopbackSshd) -> None:
    # As ssh-keyscan prints it: the host field first.
    line = f"[127.0.0.1]:{sshd.port} {sshd.host_keys['ed25519']}"
    result = add(run, sshd, "--host-key", line)
    assert result.exit_code == 0, result.output
    assert "matches --host-key" in result.output
    assert "given with --host-key on" in (project / "nodes/gpu-1.yaml").read_text()


def test_host_key_mismatch_refused(run: Run, project: Path, sshd: LoopbackSshd) -> None:
    result = add(run, sshd, "--host-key", OTHER_KEY)
    assert result.exit_code == 1
    [error] = result.output.splitlines()
    assert f"the server presented {fingerprint_of(sshd)}" in error
    assert "but --host-key is SHA256:" in error and "nothing written" in error
    assert not (project / "nodes/gpu-1.yaml").exists()


def test_existing_file_not_overwritten(run: Run, project: Path, sshd: LoopbackSshd) -> None:
    before = (project / "nodes/rtx5090.yaml").read_text()
    result = add(run, sshd, "--yes", name="rtx5090")
    assert result.exit_code == 1
    assert "nodes/rtx5090.yaml exists; nothing was changed" in result.output
    assert "presents host key" not in result.output  # refused before connecting
    assert (project / "nodes/rtx5090.yaml").read_text() == before
    forced = add(run, sshd, "--yes", "--force", name="rtx5090")
    assert forced.exit_code == 0, forced.output
    assert "servefleet node add" in (project / "nodes/rtx5090.yaml").read_text()


def test_failed_probe_writes_nothing(run: Run, project: Path, tmp_path: Path,
                                     need_program: Callable[[str], str]) -> None:
    for server in _start(tmp_path, need_program, gpu=False):
        result = add(run, server, "--yes")
        assert result.exit_code == 1
        error = result.output.splitlines()[-1]
        assert error.startswith("error: node add gpu-1: 127.0.0.1: no GPU could be read")
        assert "nvidia-smi not found on PATH" in error and "nothing was written" in error
    assert not (project / "nodes/gpu-1.yaml").exists()


def test_bad_input_refused_before_connecting(run: Run, project: Path) -> None:
    result = run("node", "add", "--yes", "--identity-file", "/nonexistent", "--", "gpu-1",
                 "-oProxyCommand=touch x")
    assert result.exit_code == 1
    assert "node add gpu-1: address: " in result.output
    assert "neither a host name" in result.output
    assert not (project / "nodes/gpu-1.yaml").exists()


@pytest.mark.parametrize("where", ["closed", "blackhole"])
def test_unreachable_fails_fast_in_one_line(run: Run, project: Path, where: str,
                                            tmp_path: Path) -> None:
    import socket

    held: list[socket.socket] = []
    if where == "closed":
        port = free_port()
    else:  # a full listen queue: the kernel drops the SYN, as for a host that is down
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = int(server.getsockname()[1])
        held += [server, socket.create_connection(("127.0.0.1", port))]
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    try:
        started = time.monotonic()
        result = run("node", "add", "gpu-1", "127.0.0.1", "--port", str(port), "--yes",
                     "--identity-file", str(key))
        took = time.monotonic() - started
    finally:
        for sock in held:
            sock.close()
    assert result.exit_code == 1
    assert took < LIMIT_SECONDS, took
    [line] = result.output.splitlines()
    assert line.startswith(f"error: node add gpu-1: 127.0.0.1:{port}: cannot reach it over "
                           "SSH (")
    assert "one attempt of 3 s" in line
    assert not (project / "nodes/gpu-1.yaml").exists()

"""The SSH transport against a real OpenSSH server on a loopback port (``sshd`` fixture)."""

from __future__ import annotations

import time
from pathlib import Path

import paramiko
import pytest
from loopback_sshd import LoopbackSshd, keygen, loopback_sshd

from servefleet.adapters.runtime.ssh.transport import SshTransport, timed
from servefleet.core.errors import (
    CommandTimedOut,
    ConnectionLost,
    HostKeyMismatch,
    HostKeyTypeNotPinned,
)

# The shape of the node observation: many lines, the last one the end marker.
OBSERVE_LIKE = ("for i in $(seq 1 40); do printf '@@line %s %s\\n' $i "
                "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done; printf '@@end\\n'")
# The command kills the sshd process serving its session: the connection drops mid-command.
DROP = "echo started >> \"$1\"; kill -KILL $PPID"


def test_output_is_read_to_its_end_when_the_exit_status_comes_with_it(
        sshd: LoopbackSshd, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exit status can be handled by paramiko's thread in the same moment as the last
    output. A thread switch between "no output buffered" and "exit status here" (widened
    to 5 ms) once cut the observation short of its @@end line (30 of 200 runs)."""
    original = paramiko.Channel.recv_stderr_ready

    def switch_here(channel: paramiko.Channel) -> bool:
        time.sleep(0.005)
        return original(channel)

    monkeypatch.setattr(paramiko.Channel, "recv_stderr_ready", switch_here)
    with SshTransport(sshd.node()) as transport:
        cut = [i for i in range(40)
               if not transport.run(["sh", "-c", OBSERVE_LIKE]).text().endswith("@@end\n")]
    assert cut == []


def test_a_timeout_stops_the_command_on_the_node_and_is_not_retried(
        sshd: LoopbackSshd, tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    pid_file = tmp_path / "pid"
    script = 'echo x >> "$1"; sleep 30 & echo $! > "$2"; wait'
    began = time.monotonic()
    with SshTransport(sshd.node()) as transport, pytest.raises(CommandTimedOut) as caught:
        transport.run(["sh", "-c", script, "sh", str(starts), str(pid_file)], timeout=1,
                      idempotent=True, what="a slow command")
    assert time.monotonic() - began < 8
    assert "loop: a slow command: timed out after 1 s" in str(caught.value)
    assert "SIGTERM" in str(caught.value)
    assert starts.read_text() == "x\n"  # run once: a timeout is not a dropped connection
    sleeper = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{sleeper}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{sleeper}").exists(), "the timed-out command's child still runs"


def test_a_command_that_exits_124_quickly_is_no_timeout(sshd: LoopbackSshd) -> None:
    with SshTransport(sshd.node()) as transport:
        assert transport.run(["sh", "-c", "exit 124"], timeout=30, check=False
                             ).exit_status == 124


def test_timed_argv_runs_under_coreutils_timeout() -> None:
    assert timed(["docker", "stop", "x"], 300) == ["timeout", "-k", "10", "300.000",
                                                   "docker", "stop", "x"]
    assert timed(["true"], None) == ["true"]


def test_retries_are_opt_in(sshd: LoopbackSshd, tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    argv = ["sh", "-c", DROP, "sh", str(starts)]
    with SshTransport(sshd.node()) as transport:
        with pytest.raises(ConnectionLost, match="connection lost"):
            transport.run(argv, timeout=None)
        assert starts.read_text() == "started\n"  # not retried by default
        with pytest.raises(ConnectionLost):
            transport.run(argv, timeout=None, idempotent=True)
        assert starts.read_text() == "started\n" * 3  # marked idempotent: one retry
        # The transport reconnects for the next command.
        assert transport.run(["echo", "back"]).text() == "back\n"


def test_a_stream_that_loses_its_connection_says_so(sshd: LoopbackSshd,
                                                    tmp_path: Path) -> None:
    script = "echo one; echo two; sleep 0.3; kill -KILL $PPID"
    seen: list[bytes] = []
    with SshTransport(sshd.node()) as transport:
        with pytest.raises(ConnectionLost):
            for line in transport.stream_lines(["sh", "-c", script]):
                seen.append(line)
        assert seen == [b"one\n", b"two\n"]
        # A command that ends is the end of the stream, not an error.
        assert list(transport.stream_lines(["sh", "-c", "echo done"])) == [b"done\n"]


@pytest.mark.parametrize(("offered", "pinned"), [("rsa", "ed25519"), ("ed25519", "rsa")])
def test_a_host_key_of_an_unpinned_type_is_a_host_key_problem(
        sshd: LoopbackSshd, tmp_path: Path, offered: str, pinned: str) -> None:
    with loopback_sshd(sshd.program, tmp_path / "other", (offered,)) as server:
        other = keygen(tmp_path / "pinned", pinned)
        with pytest.raises(HostKeyTypeNotPinned) as caught, \
                SshTransport(server.node(pinned=[other])):
            pass
    text = str(caught.value)
    want_offered = "ssh-rsa" if offered == "rsa" else "ssh-ed25519"
    want_pinned = "ssh-rsa" if pinned == "rsa" else "ssh-ed25519"
    assert f"offers host keys of type {want_offered} " in text
    assert f"pins only {want_pinned} " in text
    assert "`servefleet keyscan loop`" in text
    assert "cannot reach" not in text


def test_a_different_key_of_a_pinned_type_is_still_a_mismatch(sshd: LoopbackSshd,
                                                               tmp_path: Path) -> None:
    other = keygen(tmp_path / "impostor", "ed25519")
    with pytest.raises(HostKeyMismatch) as caught, SshTransport(sshd.node(pinned=[other])):
        pass
    assert not isinstance(caught.value, HostKeyTypeNotPinned)
    assert "host key mismatch" in str(caught.value)

"""Following a boot log across SSH drops, against a real sshd on a loopback port.

``docker`` on the node is a small stand-in script (``tmp_path/bin/docker``) that answers
what :func:`follow_boot` runs from files: the log (a real vLLM boot log from the shared
fixtures), the container (``ps`` and ``inspect``, as the node reader asks), and per
``docker logs`` call whether to cut the SSH connection after some lines (it kills the sshd
process serving its session).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from loopback_sshd import LoopbackSshd

from servefleet.adapters.boot_follow import ENGINE_EXITED, follow_boot
from servefleet.adapters.runtime.ssh.transport import SshTransport
from tests.shared_data import shared_missing

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "boot-logs"
BOOT_LOG = "vllm-0.20.0-gb10-gemma-4-26b-a4b-it-04.log"
READY_LINE = 150
"""``Application startup complete.`` is line 150 of that log."""

FAKE_DOCKER = r"""#!/bin/sh
# A stand-in for the docker CLI, answering from the files in its folder.
state=$(dirname "$0")/state
case "$1" in
  ps) case "$*" in *name=*) ;; *) printf 'c0ffee\tservefleet-hc\n' ;; esac ;;
  inspect) cat "$state/inspect" ;;
  logs)
    n=$(($(cat "$state/calls" 2>/dev/null || echo 0) + 1)); echo "$n" > "$state/calls"
    plan=$(sed -n "${n}p" "$state/plan")
    case "$plan" in
      drop:*) head -n "${plan#drop:}" "$state/log"
              # Cut the connection: kill the sshd process that serves this session.
              p=$$
              while [ "$p" -gt 1 ]; do
                p=$(awk '{print $4}' "/proc/$p/stat")
                case $(cat "/proc/$p/comm") in sshd*) kill -KILL "$p"; exit 0 ;; esac
              done ;;
      end:*) head -n "${plan#end:}" "$state/log" ;;
      *) cat "$state/log"; sleep 30 ;;
    esac ;;
esac
"""


def _log() -> bytes:
    path = FIXTURES / BOOT_LOG
    if not path.is_file():
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{path} is missing (CI=true: the shared fixtures must be there)")
        shared_missing(f"shared boot-log fixture {path} not found")
    return path.read_bytes()


def _node_files(tmp_path: Path, plan: list[str], status: str) -> Path:
    bin_dir = tmp_path / "bin"
    state = bin_dir / "state"
    state.mkdir(parents=True)
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    (state / "log").write_bytes(_log())
    (state / "plan").write_text("\n".join(plan) + "\n")
    inspect = {"Id": "c0ffee", "Name": "/servefleet-hc-engine-1", "RestartCount": 0,
               "State": {"Status": status, "ExitCode": 0 if status == "running" else 1,
                         "OOMKilled": False, "StartedAt": "2026-11-21T10:00:00.5Z"},
               "Config": {"Image": "vllm/vllm-openai:v0.20.0", "Labels": {}}}
    (state / "inspect").write_text(json.dumps([inspect]) + "\n")
    return state


def _follow(sshd: LoopbackSshd, timeout: float = 60):  # type: ignore[no-untyped-def]
    with SshTransport(sshd.node()) as transport:
        return follow_boot(transport, "hc", "1700000000", engine="vllm",
                           deadline=time.monotonic() + timeout)


def test_an_ssh_drop_while_following_resumes_where_it_stopped(sshd: LoopbackSshd,
                                                              tmp_path: Path) -> None:
    state = _node_files(tmp_path, ["drop:60", "follow"], "running")
    booted = _follow(sshd)
    assert booted.facts.outcome == "ready", booted.tail
    assert booted.failure_class is None
    assert booted.resumed == 1
    assert booted.lines == READY_LINE  # each line once: the repeated ones were skipped
    assert booted.facts.kv_cache_tokens is not None
    assert (state / "calls").read_text().strip() == "2"


def test_a_log_that_ends_while_the_container_runs_is_followed_again(
        sshd: LoopbackSshd, tmp_path: Path) -> None:
    _node_files(tmp_path, ["end:40", "follow"], "running")
    booted = _follow(sshd)
    assert booted.facts.outcome == "ready"
    assert booted.resumed == 1 and booted.lines == READY_LINE


def test_the_engine_exited_only_when_its_container_did(sshd: LoopbackSshd,
                                                       tmp_path: Path) -> None:
    _node_files(tmp_path, ["end:40"], "exited")
    booted = _follow(sshd)
    assert booted.failure_class == ENGINE_EXITED
    assert booted.container is not None and booted.container.status == "exited"
    assert booted.lines == 40 and booted.resumed == 0

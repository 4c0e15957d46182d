"""The watcher's node read over a real loopback sshd: a real HTTP engine stand-in on
127.0.0.1 (real /metrics page), stand-in ``docker`` and ``nvidia-smi`` on the session's
PATH; a healthy engine, a wedged one (health 200, the canary never answered), and a node
whose sshd died, with the link's backoff."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_sshd import LoopbackSshd

from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.adapters.watch.fleet import NodeLink
from servefleet.adapters.watch.read import WatchedDeployment, read_command, read_spec
from servefleet.core.models import Node
from servefleet.core.models.watch import WatchConfig
from servefleet.core.secrets import SecretMask
from servefleet.core.watch.sample import parse_node_read

PAGE = (Path(__file__).parents[1] / "core" / "bootlog" / "data" / "vllm-cpu-real"
        / "busy.metrics.txt").read_text(encoding="utf-8")

DOCKER = """#!/bin/sh
case "$1" in
  ps) echo abc123 ;;
  inspect) echo '{"status":"running","restart_count":2,"started_at":"2026-11-24T10:00:00Z"}' ;;
esac
"""
NVIDIA_SMI = """#!/bin/sh
echo "0, 21.50, 96, 110000, 11000"
"""


class Engine(http.server.ThreadingHTTPServer):
    wedged = False

    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet: a wedged answer finds its client gone (a broken pipe), and the default
        would print that traceback into whatever captures stderr by then, another test's
        output included."""


class Handler(http.server.BaseHTTPRequestHandler):
    server: Engine

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(200, PAGE if self.path == "/metrics" else "")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.server.wedged:
            time.sleep(4)  # past the canary timeout: the engine core does not answer
        self._send(200, '{"choices":[{"text":"ok"}]}')


@pytest.fixture
def engine() -> Iterator[Engine]:
    server = Engine(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def shims(sshd: LoopbackSshd) -> None:
    bin_dir = sshd.folder.parent / "bin"
    for name, text in (("docker", DOCKER), ("nvidia-smi", NVIDIA_SMI)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


def target(port: int) -> WatchedDeployment:
    return WatchedDeployment(node="loop", name="main", port=port, engine="vllm",
                             model="tiny", profile="p")


def test_read_of_a_healthy_and_a_wedged_engine(sshd: LoopbackSshd, engine: Engine) -> None:
    shims(sshd)
    config = WatchConfig(canary_timeout_seconds=2)
    dep = target(engine.server_address[1])
    with SshTransport(sshd.node()) as transport:
        done = transport.run(read_command(), stdin=read_spec([dep], config, {}), timeout=60)
        sample = parse_node_read(done.text(), 0.0, {"main": "vllm"})["main"]
        assert (sample.container_status, sample.restart_count) == ("running", 2)
        assert sample.health_ok and sample.canary == "ok"
        assert (sample.requests_running, sample.requests_waiting) == (2, 14)
        assert sample.gpus[0].power_watts == 21.5
        assert sample.mem_available_bytes and sample.mem_available_bytes > 0
        # Only the counters the watcher needs leave the node.
        assert len(done.stdout) < 2000 < len(PAGE)
        engine.wedged = True
        done = transport.run(read_command(), stdin=read_spec([dep], config, {}), timeout=60)
        sample = parse_node_read(done.text(), 1.0, {"main": "vllm"})["main"]
        assert sample.health_ok and sample.canary == "timeout"


def test_a_dead_sshd_backs_off_and_comes_back(sshd: LoopbackSshd, engine: Engine) -> None:
    shims(sshd)
    now = [0.0]
    node = sshd.node(connect_timeout=2)

    def factory(n: Node, mask: SecretMask) -> SshTransport:
        return SshTransport(n, mask=mask, connect_attempts=1)

    link = NodeLink(node, factory, SecretMask(), lambda: now[0])
    spec = read_spec([target(engine.server_address[1])], WatchConfig(canary=False), {})
    assert link.read(read_command(), spec, 30) is not None
    # A stopped sshd leaves its open sessions alone: drop the kept-open one as a reset link
    # would, so that the next read must reconnect.
    sshd.stop()
    link.close()
    assert link.read(read_command(), spec, 30) is None
    assert link.failures == 1 and link.next_try == 1.0 and "next try" in link.last_error
    now[0] = 0.5
    assert link.read(read_command(), spec, 30) is None  # inside the backoff: not even tried
    assert link.failures == 1
    now[0] = 1.0
    assert link.read(read_command(), spec, 30) is None
    assert link.failures == 2 and link.next_try == 3.0

"""Benchmark: what ``servefleet watch`` costs per node and interval, for 3 and 50 nodes.

Against a real OpenSSH ``sshd`` on a loopback port (tests/adapters/loopback_sshd.py); the
"nodes" are that many kept-open connections to it, as the watcher keeps one per node. Each
session finds a stand-in ``docker`` and ``nvidia-smi`` first on its PATH and an HTTP engine
on 127.0.0.1 that answers ``/health``, ``/metrics`` (a real vLLM page, 2 running / 14
waiting) and the canary. Per interval every node gets the watcher's one read
(:func:`servefleet.adapters.watch.read.read_command`), in parallel, and its answer is parsed
into samples, as :class:`FleetWatcher.tick` does.

Printed per node and interval: the controller's CPU seconds (``time.process_time``, all
threads) and the payload bytes sent and received (the SSH framing adds its own), each next
to a baseline measured in the same run on the same connections: a bare ``true`` round trip.

    python bench/bench_watch.py [--rounds 5] [--nodes 3 50]

Smallest run: ``--rounds 1 --nodes 2``.
"""

from __future__ import annotations

import argparse
import http.server
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "adapters"))

from loopback_sshd import loopback_sshd  # noqa: E402

from servefleet.adapters.runtime.ssh.transport import SshTransport  # noqa: E402
from servefleet.adapters.watch.read import (  # noqa: E402
    WatchedDeployment,
    read_command,
    read_spec,
)
from servefleet.core.models.watch import WatchConfig  # noqa: E402
from servefleet.core.watch.sample import parse_node_read  # noqa: E402

PAGE = (ROOT / "tests" / "core" / "bootlog" / "data" / "vllm-cpu-real"
        / "busy.metrics.txt").read_text(encoding="utf-8")
SHIMS = {
    "docker": "#!/bin/sh\ncase \"$1\" in ps) echo abc ;; inspect) echo "
              "'{\"status\":\"running\",\"restart_count\":0,\"started_at\":\"t\"}' ;; esac\n",
    "nvidia-smi": "#!/bin/sh\necho '0, 45.00, 95, 110000, 11000'\n",
}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: str) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(PAGE if self.path == "/metrics" else "")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send('{"choices":[{"text":"ok"}]}')


def measure(transports: list[SshTransport], argv: list[str], stdin: bytes | None,
            rounds: int, parse: bool) -> tuple[float, float, float, float]:
    """Per node and interval: CPU seconds, wall seconds of the interval, bytes out, in."""
    sent = received = 0

    def one(transport: SshTransport) -> tuple[int, int]:
        done = transport.run(argv, stdin=stdin, timeout=120)
        if parse:
            parse_node_read(done.text(), 0.0, {"main": "vllm"})
        return sum(len(a) for a in argv) + len(stdin or b""), len(done.stdout) + len(
            done.stderr)

    cpu0, wall0 = time.process_time(), time.monotonic()
    with ThreadPoolExecutor(max_workers=min(32, len(transports))) as pool:
        for _ in range(rounds):
            for out, into in pool.map(one, transports):
                sent, received = sent + out, received + into
    count = rounds * len(transports)
    return ((time.process_time() - cpu0) / count, (time.monotonic() - wall0) / rounds,
            sent / count, received / count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 50])
    args = parser.parse_args()
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    folder = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name, text in SHIMS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    engine = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    dep = WatchedDeployment(node="n", name="main", port=engine.server_address[1],
                            engine="vllm", model="tiny", profile="p")
    spec = read_spec([dep], WatchConfig(), {})
    print(f"{'nodes':>5}  {'what':<10} {'CPU ms/node':>11} {'interval s':>10} "
          f"{'bytes out':>9} {'bytes in':>8}")
    try:
        with loopback_sshd(sshd, folder / "sshd", path_prefix=bin_dir) as server:
            for count in args.nodes:
                transports = [SshTransport(server.node(name=f"n{i}")) for i in range(count)]
                for transport in transports:
                    transport.connect()
                base = measure(transports, ["true"], None, args.rounds, parse=False)
                watch = measure(transports, read_command(), spec, args.rounds, parse=True)
                for what, row in (("true", base), ("watch", watch)):
                    print(f"{count:>5}  {what:<10} {row[0] * 1000:>11.2f} {row[1]:>10.2f} "
                          f"{row[2]:>9.0f} {row[3]:>8.0f}")
                print(f"{count:>5}  {'ratio':<10} {watch[0] / base[0]:>10.1f}x "
                      f"{watch[1] / base[1]:>9.1f}x {watch[2] / max(base[2], 1):>8.0f}x "
                      f"{watch[3] / max(base[3], 1):>7.0f}x")
                for transport in transports:
                    transport.close()
    finally:
        engine.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

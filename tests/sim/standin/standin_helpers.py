"""Helpers to run the stand-in engine as a local process (python3 on this host, no Docker).

``StandIn`` starts ``python3 -m standin_engine <engine> <args>`` from the build context
with the placeholder ``vllm`` package on the path, on a free local port, collects its
output and talks HTTP to it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from servefleet.sim.standin import CONTEXT_DIR, PLACEHOLDER_VLLM_DIR

READY_VLLM = "Application startup complete."
READY_LLAMA = "main: model loaded"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandIn:
    """One stand-in engine process."""

    def __init__(self, engine: str, args: list[str], env: dict[str, str],
                 vllm_site: Path = PLACEHOLDER_VLLM_DIR) -> None:
        self.engine = engine
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("STANDIN_", "VLLM_"))}
        full_env.update({
            "PYTHONPATH": f"{CONTEXT_DIR}{os.pathsep}{vllm_site}",
            "PYTHONDONTWRITEBYTECODE": "1",
            "STANDIN_TIME_SCALE": "0.0005",
            "STANDIN_CONTROL_DIR": env.get("STANDIN_CONTROL_DIR", "/nonexistent-standin-control"),
            "HF_TOKEN": "hf_test",
        })
        full_env.update(env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "standin_engine", engine, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=CONTEXT_DIR,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _pump(stream: Any, sink: list[str]) -> None:
        for raw in iter(stream.readline, b""):
            sink.append(raw.decode("utf-8", errors="replace"))

    @property
    def stdout(self) -> str:
        """Everything printed on stdout so far."""
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        """Everything printed on stderr so far."""
        return "".join(self.err)

    def wait_for(self, text: str, timeout: float = 20.0) -> bool:
        """Wait until ``text`` is on stdout; False if the process ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stdout:
                return True
            if self.proc.poll() is not None:
                time.sleep(0.1)
                return text in self.stdout
            time.sleep(0.02)
        tail = self.stdout[-3000:]
        raise AssertionError(f"timed out waiting for {text!r}; output so far:\n{tail}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        """Wait for the process to end; its exit status."""
        code = self.proc.wait(timeout=timeout)
        for thread in self._threads:
            thread.join(timeout=5)
        return code

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for thread in self._threads:
            thread.join(timeout=5)


def http(port: int, path: str, body: Any = None, headers: dict[str, str] | None = None,
         timeout: float = 10.0) -> tuple[int, bytes]:
    """GET (or POST JSON when ``body`` is given) on the stand-in; (status, body)."""
    data = None if body is None else json.dumps(body).encode()
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def chat(port: int, text: str, **extra: Any) -> dict[str, Any]:
    """POST /v1/chat/completions with one user message; the decoded answer."""
    status, raw = http(port, "/v1/chat/completions",
                       {"model": "x", "messages": [{"role": "user", "content": text}], **extra})
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer

"""A real HAProxy running the gateway's rendered configuration on loopback, in front of
small HTTP engines that record what reaches them; and the project that places them.

The engines are not LLM engines: they answer ``/health`` (200, or 503 when told) and any
POST with the port they listen on and the body they got, after an optional delay (a
request in flight). What is under test is HAProxy with servefleet's configuration: its
routing, its body rewrite, its runtime API.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from servefleet.adapters.gateway.follow import GatewayFollow
from servefleet.adapters.gateway.runtime_api import RuntimeApi
from servefleet.core.gateway.render import RenderedGateway, render_gateway
from servefleet.core.gateway.routes import resolve_routes
from servefleet.core.models.gateway import GatewayConfig
from servefleet.core.project import Project, load_project
from tests.reference_project import REPO_ROOT

LUA_IN_CONTAINER = "/usr/local/etc/haproxy/servefleet.lua"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Engine:
    """One recording HTTP engine."""

    port: int
    healthy: bool = True
    delay: float = 0.0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status = 200 if engine.healthy or self.path != "/health" else 503
                self._send(status, {"ok": status == 200})

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                engine.bodies.append(body)
                engine.headers.append({k.lower(): v for k, v in self.headers.items()})
                time.sleep(engine.delay)
                self._send(200, {"port": engine.port, "body": body})

            def _send(self, status: int, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@contextlib.contextmanager
def engines(count: int) -> Iterator[list[Engine]]:
    """``count`` recording engines on free loopback ports."""
    started = [Engine(free_port()) for _ in range(count)]
    for engine in started:
        engine.start()
    try:
        yield started
    finally:
        for engine in started:
            engine.stop()


def loopback_project(ports: Mapping[str, int], gateway: Mapping[str, Any]) -> Project:
    """The reference project with every node at 127.0.0.1 and each deployment
    (``node/name``) on the given port, and ``gateway`` (camelCase keys, as in a stack
    file) as its gateway."""
    from servefleet.core.watch.config import snake_keys

    project = load_project(REPO_ROOT, "reference")
    nodes = {name: node.model_copy(update={"address": "127.0.0.1"})
             for name, node in project.nodes.items()}
    deployments = [d.model_copy(update={"port": ports[d.key]})
                   for d in project.stack.deployments if d.key in ports]
    config = GatewayConfig.model_validate(snake_keys(dict(gateway)))
    stack = project.stack.model_copy(update={"deployments": deployments, "gateway": config})
    return dataclasses.replace(project, nodes=nodes, stack=stack)


@dataclass
class RunningGateway:
    """HAProxy serving a rendered gateway on loopback."""

    rendered: RenderedGateway
    port: int
    admin_port: int
    process: subprocess.Popen[bytes]
    log: Path

    def post(self, path: str, body: Mapping[str, Any] | bytes,
             headers: Mapping[str, str] | None = None,
             timeout: float = 30) -> tuple[int, dict[str, Any]]:
        """POST through the gateway; (status, JSON answer)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method="POST",
            headers={"content-type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """GET through the gateway."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


@contextlib.contextmanager
def running_gateway(haproxy: str, project: Project, folder: Path,
                    threads: int | None = None) -> Iterator[RunningGateway]:
    """HAProxy on the project's rendered gateway files, the Lua script read from ``folder``
    instead of the container's path, with ``threads`` worker threads (HAProxy's default is
    one per CPU of the host); stopped at the end."""
    rendered = render_gateway(project)
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in rendered.files.items():
        (folder / name).write_bytes(content)
    config = folder / "haproxy.cfg"
    text = config.read_text().replace(LUA_IN_CONTAINER, str(folder / "servefleet.lua"))
    if threads is not None:
        text = text.replace("\nglobal\n", f"\nglobal\n  nbthread {threads}\n", 1)
    config.write_text(text)
    log = folder / "haproxy.log"
    gw = project.stack.gateway
    with log.open("wb") as sink:
        process = subprocess.Popen([haproxy, "-db", "-f", str(config)], stdout=sink,
                                   stderr=subprocess.STDOUT)
    running = RunningGateway(rendered, gw.port, gw.admin_port, process, log)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"http://127.0.0.1:{gw.port}/servefleet/health", timeout=1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def show_info(admin_port: int) -> dict[str, str]:
    """HAProxy's ``show info`` over its runtime API, as a mapping."""
    with socket.create_connection(("127.0.0.1", admin_port), timeout=5) as conn:
        conn.sendall(b"show info\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    pairs = (line.split(":", 1) for line in data.decode().splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


SPARK1, SPARK2 = "dgx-spark-1/main", "dgx-spark-2/main"
"""The two Sparks' ``main`` deployments, the engines a pair of tests' routes share."""


def pair_project(e1: Engine, e2: Engine, **gateway: object) -> Project:
    """:func:`loopback_project` with both Sparks' ``main`` on ``e1`` and ``e2`` and a gateway
    on free ports (10 s to drain and to re-admit; ``gateway`` overrides, camelCase)."""
    return loopback_project({SPARK1: e1.port, SPARK2: e2.port}, {
        "node": "rtx5090", "port": free_port(), "adminPort": free_port(),
        "drainTimeoutSeconds": 10, "readyTimeoutSeconds": 10, **gateway})


def follow_in(project: Project, api: RuntimeApi, **kwargs: bool) -> GatewayFollow:
    """The project's gateway followed through ``api``."""
    return GatewayFollow(project.stack.gateway, resolve_routes(project), api, **kwargs)


def rotation(api: RuntimeApi) -> dict[str, str]:
    """Each server's rotation (``serving``, ``out``…) as the gateway reports it now."""
    return {s.server: s.rotation for s in api.servers()}

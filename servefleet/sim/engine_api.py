"""The few Docker Engine API calls the test bed makes itself, over the daemon's unix socket.

Plain HTTP/1.1 on an AF_UNIX socket: quicker than a ``docker`` CLI process per call, and no
client library to import.
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Any


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def request(sock: Path, method: str, path: str, *, timeout: float = 30.0) -> tuple[int, bytes]:
    """One API call; the status and the body. Raises OSError when the daemon is not there."""
    connection = _UnixConnection(sock, timeout)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def ping(sock: Path, *, timeout: float = 2.0) -> bool:
    """Whether the daemon behind ``sock`` answers ``/_ping``."""
    try:
        status, body = request(sock, "GET", "/_ping", timeout=timeout)
    except OSError:
        return False
    return status == 200 and body.strip() == b"OK"


def containers(sock: Path, *, all_: bool = True) -> list[dict[str, Any]]:
    """The daemon's containers (``docker ps -a``)."""
    status, body = request(sock, "GET", f"/containers/json?all={int(all_)}")
    if status != 200:
        raise OSError(f"GET /containers/json answered {status}")
    result: list[dict[str, Any]] = json.loads(body)
    return result


def remove_container(sock: Path, container_id: str) -> None:
    """``docker rm -f -v``: kill and remove one container and its anonymous volumes."""
    status, body = request(sock, "DELETE", f"/containers/{container_id}?force=1&v=1")
    if status not in (204, 404):
        raise OSError(f"removing container {container_id[:12]} answered {status}: "
                      f"{body.decode(errors='replace').strip()}")


def image_tags(sock: Path) -> list[str]:
    """Every ``repository:tag`` the daemon holds."""
    status, body = request(sock, "GET", "/images/json")
    if status != 200:
        raise OSError(f"GET /images/json answered {status}")
    return sorted(tag for image in json.loads(body) for tag in (image.get("RepoTags") or []))

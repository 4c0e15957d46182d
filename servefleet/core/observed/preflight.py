"""What the deploy preflight command found on a node, and the parser of its output."""

from __future__ import annotations

from servefleet.core.models.common import StrictModel


class PreflightFacts(StrictModel):
    """What the preflight command found on a node."""

    docker_version: str | None = None
    """Docker server version; ``None`` when ``docker`` is missing or the daemon is down."""
    docker_error: str | None = None
    """What ``docker version`` said when it failed."""
    compose: tuple[str, ...] | None = None
    """The compose command that works there: ``("docker", "compose")`` or
    ``("docker-compose",)``; ``None`` when neither does."""
    compose_version: str | None = None
    """Its version."""
    disk_free_bytes: int | None = None
    """Free space on the file system of the base directory."""
    port_in_use: bool | None = None
    """Something listens on the deployment's port; ``None`` when it could not be told."""


def parse_preflight(text: str) -> PreflightFacts:
    """Parse the preflight command's ``key=value`` lines (unknown keys are ignored)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    compose = values.get("compose") or None
    disk = values.get("disk_free_kib", "")
    port = values.get("port_in_use", "")
    return PreflightFacts(
        docker_version=values.get("docker_version") or None,
        docker_error=values.get("docker_error") or None,
        compose=tuple(compose.split()) if compose else None,
        compose_version=values.get("compose_version") or None,
        disk_free_bytes=int(disk) * 1024 if disk.isdigit() else None,
        port_in_use={"yes": True, "no": False}.get(port),
    )

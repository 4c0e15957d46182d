"""Releases on a node: upload one, list them, and finish a rollout (switch, prune, audit).

See :mod:`servefleet.adapters.remote` for the layout on the node. An upload is one command:
a tar on stdin unpacked into ``staging/``, checked file by file, then renamed into
``releases/<id>``. Finishing is one command too: ``current`` switched, old releases pruned,
an audit line appended.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Mapping
from typing import Any

from servefleet.adapters import remote
from servefleet.adapters.runtime import Transport
from servefleet.core.observed import MANIFEST_FILE, ReleaseInfo, parse_releases
from servefleet.core.render import RenderedRelease

UPLOAD_TIMEOUT_SECONDS = 300


def release_files(rendered: RenderedRelease,
                  manifest: Mapping[str, Any]) -> dict[str, tuple[bytes, int]]:
    """Every file of the release folder, ``path → (content, mode)``, manifest included."""
    files = {path: (content, rendered.modes.get(path, 0o644))
             for path, content in rendered.files.items()}
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    files[MANIFEST_FILE] = (text.encode(), 0o644)
    return files


def tar_bytes(files: Mapping[str, tuple[bytes, int]], mtime: float | None = None) -> bytes:
    """A plain tar of ``files`` (folders implied), stamped ``mtime`` (default: now)."""
    stamp = int(time.time() if mtime is None else mtime)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders = sorted({"/".join(p.split("/")[:i]) for p in files
                          for i in range(1, p.count("/") + 1)})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            info.mtime = stamp
            tar.addfile(info)
        for path in sorted(files):
            content, mode = files[path]
            info = tarfile.TarInfo(path)
            info.size = len(content)
            info.mode = mode
            info.mtime = stamp
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def checksum_lines(files: Mapping[str, tuple[bytes, int]]) -> str:
    """``sha256sum`` lines the node checks the unpacked files against."""
    return "\n".join(f"{hashlib.sha256(content).hexdigest()}  {path}"
                     for path, (content, _) in sorted(files.items()))


def upload(transport: Transport, rendered: RenderedRelease,
           manifest: Mapping[str, Any], aside: str | None = None) -> bool:
    """Put the release on the node (one command). True when it was sent, False when the
    node already had it. ``aside``: a release folder already on the node is replaced unless
    its rendered files (the manifest aside) are exactly these; the replaced one is renamed
    ``<id>.<aside>`` (see :func:`remote.upload_release`)."""
    files = release_files(rendered, manifest)
    content = {path: entry for path, entry in files.items() if path != MANIFEST_FILE}
    command = remote.upload_release(transport.node.base_dir, rendered.deployment,
                                    rendered.release_id, checksum_lines(files), aside,
                                    checksum_lines(content))
    # Safe to repeat on a new connection: a cut upload leaves only a staging folder.
    result = transport.run(command, stdin=tar_bytes(files), timeout=UPLOAD_TIMEOUT_SECONDS,
                           idempotent=True, what=f"upload release {rendered.release_id}")
    return "present" not in result.text()


def list_releases(transport: Transport, deployment: str) -> list[ReleaseInfo]:
    """The deployment's releases on the node, newest first."""
    result = transport.run(remote.list_releases(transport.node.base_dir, deployment),
                           idempotent=True, what="list releases")
    return parse_releases(result.text())

"""What a node caches of staged weights, which releases use each, and the pruning of those
no release on the node needs (runs on a node).

Sent as ``python3 - REQUEST_JSON`` (stdlib only; it imports nothing of servefleet). Only
what servefleet staged and verified is listed or pruned: a snapshot with a record under
``<hf_cache>/servefleet/verified/``, a file with one under ``<models_dir>/.servefleet/``.
Whatever else the cache holds (a model the operator downloaded by hand) is never touched.
A staged item is in use while any release folder still on the node names it in its
manifest: every such release can be rolled back to, and its engine boots offline.

Prints one JSON object: ``{"items": [...], "errors": [...]}``, each item with ``kind``,
``pin``, ``path``, ``bytes``, ``used_by`` (``deployment/release`` with ``*`` for the
current one) and, when pruning, ``pruned``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from typing import Any


def _manifests(base_dir: str) -> list[tuple[str, str, bool, dict[str, Any]]]:
    """(deployment, release, is current, manifest) of every release on the node."""
    found: list[tuple[str, str, bool, dict[str, Any]]] = []
    try:
        deployments = sorted(os.listdir(base_dir))
    except OSError:
        return found
    for deployment in deployments:
        folder = os.path.join(base_dir, deployment)
        try:
            current = os.readlink(os.path.join(folder, "current")).rstrip("/").rsplit("/", 1)[-1]
        except OSError:
            current = None
        try:
            releases = sorted(os.listdir(os.path.join(folder, "releases")))
        except OSError:
            continue
        for release in releases:
            try:
                with open(os.path.join(folder, "releases", release, "manifest.json"),
                          encoding="utf-8") as handle:
                    manifest = json.load(handle)
            except (OSError, ValueError):
                continue
            if isinstance(manifest, dict):
                found.append((deployment, release, release == current, manifest))
    return found


def _tree_bytes(path: str) -> int:
    """Bytes of the files under ``path``, links followed (a snapshot links into blobs)."""
    total = 0
    for folder, _dirs, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(folder, name)).st_size
    return total


def _snapshots(hf_cache: str) -> list[dict[str, Any]]:
    """Staged snapshots: one per verification record."""
    records = os.path.join(hf_cache, "servefleet", "verified")
    items = []
    for name in sorted(os.listdir(records)) if os.path.isdir(records) else []:
        if not name.endswith(".json") or "@" not in name:
            continue
        folder, revision = name[:-len(".json")].rsplit("@", 1)
        repo = folder[len("models--"):].replace("--", "/")
        path = os.path.join(hf_cache, "hub", folder, "snapshots", revision)
        items.append({"kind": "snapshot", "pin": f"{repo}@{revision}", "path": path,
                      "record": os.path.join(records, name), "bytes": _tree_bytes(path),
                      "key": (hf_cache.rstrip("/"), folder, revision)})
    return items


def _files(models_dir: str) -> list[dict[str, Any]]:
    """Staged files: one per verification record."""
    records = os.path.join(models_dir, ".servefleet")
    items = []
    for name in sorted(os.listdir(records)) if os.path.isdir(records) else []:
        if not name.endswith(".verified"):
            continue
        file_name = name[:-len(".verified")]
        path = os.path.join(models_dir, file_name)
        try:
            with open(os.path.join(records, name), encoding="utf-8") as handle:
                sha = handle.read(200).split()[0]
        except (OSError, IndexError):
            sha = "?"
        size = os.path.getsize(path) if os.path.isfile(path) else 0
        items.append({"kind": "file", "pin": f"{file_name} sha256:{sha}", "path": path,
                      "record": os.path.join(records, name), "bytes": size,
                      "key": (models_dir.rstrip("/"), file_name)})
    return items


def _key_of(weights: Any) -> tuple[str, ...] | None:
    """The staged item a manifest's ``weights`` names (as :func:`_snapshots` keys it)."""
    if not isinstance(weights, dict) or not isinstance(weights.get("host_folder"), str):
        return None
    folder = weights["host_folder"].rstrip("/")
    if weights.get("kind") == "snapshot":
        return (folder, "models--" + str(weights.get("repo")).replace("/", "--"),
                str(weights.get("revision")))
    return (folder, str(weights.get("file_name")))


def _prune_snapshot(item: dict[str, Any]) -> None:
    """Remove a snapshot and the blobs no other snapshot of its repository links to."""
    snapshot = item["path"]
    repo_dir = os.path.dirname(os.path.dirname(snapshot))
    linked_elsewhere: set[str] = set()
    snapshots = os.path.join(repo_dir, "snapshots")
    for other in os.listdir(snapshots) if os.path.isdir(snapshots) else []:
        if os.path.join(snapshots, other) == snapshot:
            continue
        for folder, _dirs, names in os.walk(os.path.join(snapshots, other)):
            linked_elsewhere.update(os.path.realpath(os.path.join(folder, n)) for n in names)
    for folder, _dirs, names in os.walk(snapshot):
        for name in names:
            blob = os.path.realpath(os.path.join(folder, name))
            if blob not in linked_elsewhere and os.path.dirname(blob).endswith("/blobs"):
                with contextlib.suppress(OSError):
                    os.unlink(blob)
    shutil.rmtree(snapshot, ignore_errors=True)
    refs = os.path.join(repo_dir, "refs")
    revision = os.path.basename(snapshot)
    for folder, _dirs, names in os.walk(refs):
        for name in names:
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    if handle.read().strip() == revision:
                        os.unlink(os.path.join(folder, name))
            except OSError:
                pass
    os.unlink(item["record"])


def main(request: dict[str, Any]) -> int:
    """List (and with ``prune``, remove) the staged weights; print the answer as JSON."""
    errors: list[str] = []
    items = _snapshots(request["hf_cache"])
    if request.get("models_dir"):
        items += _files(request["models_dir"])
    users: dict[tuple[str, ...], list[str]] = {}
    for deployment, release, current, manifest in _manifests(request["base_dir"]):
        key = _key_of(manifest.get("weights"))
        if key is not None:
            users.setdefault(key, []).append(f"{deployment}/{release}" + ("*" if current
                                                                            else ""))
    for item in items:
        item["used_by"] = users.get(item.pop("key"), [])
        if request.get("prune") and not item["used_by"]:
            try:
                if item["kind"] == "snapshot":
                    _prune_snapshot(item)
                else:
                    for path in (item["path"], item["record"]):
                        if os.path.lexists(path):
                            os.unlink(path)
                item["pruned"] = True
            except OSError as error:
                errors.append(f"{item['path']}: {error.strerror or error}")
                item["pruned"] = False
        item.pop("record")
    sys.stdout.write(json.dumps({"items": items, "errors": errors}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))

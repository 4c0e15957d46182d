"""``servefleet models``: the node program that lists staged weights, names the releases
using each and prunes only what servefleet staged and no release on the node needs (run
here on a node-shaped folder tree, as the node runs it: ``python3 - REQUEST``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from servefleet.adapters.weights.models import parse, program

OLD, NEW = "a" * 40, "b" * 40


def _release(base: Path, deployment: str, release: str, weights: dict[str, str] | None,
             current: bool = False) -> None:
    folder = base / deployment / "releases" / release
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(
        {"release_id": release, **({"weights": weights} if weights else {})}))
    if current:
        (base / deployment / "current").symlink_to(f"releases/{release}")


def _snapshot(hf: Path, revision: str, blobs: dict[str, bytes], record: bool = True) -> None:
    repo = hf / "hub" / "models--Qwen--Tiny"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, data in blobs.items():
        blob = repo / "blobs" / f"{name}-{len(data)}"
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    if record:
        (hf / "servefleet" / "verified").mkdir(parents=True, exist_ok=True)
        (hf / "servefleet" / "verified" / f"models--Qwen--Tiny@{revision}.json").write_text("{}")


def _run(tmp_path: Path, prune: bool) -> object:
    request = {"base_dir": str(tmp_path / "base"), "hf_cache": str(tmp_path / "hf"),
               "models_dir": str(tmp_path / "models"), "prune": prune}
    done = subprocess.run(["python3", "-", json.dumps(request)], input=program(),
                          capture_output=True, check=True, timeout=60)
    return parse("n1", done.stdout.decode())


def test_staged_weights_are_listed_with_their_releases_and_only_unused_ones_pruned(
        tmp_path: Path) -> None:
    hf, models, base = tmp_path / "hf", tmp_path / "models", tmp_path / "base"
    shared = b"s" * 100
    _snapshot(hf, OLD, {"config.json": b"{}", "model.safetensors": shared})
    _snapshot(hf, NEW, {"config.json": b"{}", "model.safetensors": b"n" * 50})
    # A blob both snapshots link to survives the pruning of one of them.
    other = hf / "hub" / "models--Qwen--Tiny" / "snapshots" / NEW / "shared.bin"
    other.symlink_to(os.path.relpath(hf / "hub" / "models--Qwen--Tiny" / "blobs" /
                                     "model.safetensors-100", other.parent))
    _snapshot(hf, "c" * 40, {"config.json": b"{}"}, record=False)  # fetched by hand
    models.mkdir()
    (models / "q4.gguf").write_bytes(b"g" * 30)
    (models / ".servefleet").mkdir()
    (models / ".servefleet" / "q4.gguf.verified").write_text(f"{'d' * 64} 30\n")
    (models / "own.gguf").write_bytes(b"operator")  # no record: never listed
    snapshot = {"kind": "snapshot", "host_folder": str(hf), "repo": "Qwen/Tiny"}
    _release(base, "main", "r1", {**snapshot, "revision": NEW}, current=True)
    _release(base, "main", "r0", None)
    _release(base, "chat", "r9", {"kind": "file", "host_folder": str(models),
                                  "file_name": "q4.gguf"})

    listed = _run(tmp_path, prune=False)
    by_pin = {item.pin: item for item in listed.items}  # type: ignore[attr-defined]
    assert set(by_pin) == {f"Qwen/Tiny@{OLD}", f"Qwen/Tiny@{NEW}", f"q4.gguf sha256:{'d' * 64}"}
    assert by_pin[f"Qwen/Tiny@{NEW}"].used_by == ("main/r1*",)
    assert by_pin[f"Qwen/Tiny@{OLD}"].used_by == ()
    assert by_pin[f"q4.gguf sha256:{'d' * 64}"].used_by == ("chat/r9",)
    assert by_pin[f"Qwen/Tiny@{OLD}"].size == 102

    pruned = _run(tmp_path, prune=True)
    assert [(i.pin, i.pruned) for i in pruned.items  # type: ignore[attr-defined]
            if i.pruned is not None] == [(f"Qwen/Tiny@{OLD}", True)]
    repo = hf / "hub" / "models--Qwen--Tiny"
    assert not (repo / "snapshots" / OLD).exists()
    assert (repo / "blobs" / "model.safetensors-100").exists()  # still linked from NEW
    assert (repo / "snapshots" / NEW / "model.safetensors").read_bytes() == b"n" * 50
    assert (repo / "snapshots" / ("c" * 40) / "config.json").exists()
    assert (models / "own.gguf").read_bytes() == b"operator"
    assert (models / "q4.gguf").exists()

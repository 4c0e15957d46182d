"""Stage one Hugging Face snapshot into the hub cache, then verify it (runs on a node).

Sent on standard input to ``python3 -u -`` in a one-shot container of the engine's own image
(every vLLM image has ``huggingface_hub``); it imports nothing of servefleet. The real
client does the work: ``snapshot_download`` fetches (an interrupted download resumes from
the files it finished; within one call it retries a dropped transfer from its last whole
10 MiB chunk), ``verify_repo_checksums`` checks every file against the sizes
and hashes the hub publishes (sha256 for LFS files, the git blob id for the others). A
verified snapshot is recorded next to the hub cache, so the next deploy of the same commit
checks sizes only.

Reads ``SERVEFLEET_WEIGHTS_REPO``, ``_REVISION`` (a commit) and ``_DEST`` (the hub cache),
``HF_TOKEN`` and ``HF_ENDPOINT`` from its environment. Prints lines starting ``@@weights``:
``plan FILES TOTAL PRESENT``, ``progress DONE TOTAL``, ``cached FILES TOTAL``, ``verified
FILES TOTAL``, ``corrupt PATH ALGORITHM`` and ``error TEXT``; exits 0 only when the snapshot
is complete and verified.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

PROGRESS_EVERY_SECONDS = 2.0
SPARE_BYTES = 1 << 30
"""Left free on the cache's filesystem: an engine, its logs and Docker share that disk."""


def say(*words: object) -> None:
    """One protocol line (the controller reads them as they come)."""
    print("@@weights", *words, flush=True)


def blob_names(entry: Any) -> str:
    """The blob a file of the tree is stored under in the cache: its LFS sha256, else
    its git blob id (the ETag the hub sends for it)."""
    lfs = getattr(entry, "lfs", None)
    return str(lfs.sha256) if lfs is not None else str(entry.blob_id)


def present_bytes(blobs: Path, tree: list[Any]) -> int:
    """Bytes of the snapshot's files already in the cache, finished or not (the client
    writes ``<blob>.<random>.incomplete`` while it downloads)."""
    done = 0
    for entry in tree:
        name = blob_names(entry)
        try:
            done += (blobs / name).stat().st_size
            continue
        except OSError:
            pass
        for partial in blobs.glob(name + ".*incomplete"):
            with contextlib.suppress(OSError):
                done += partial.stat().st_size
    return done


def sizes_match(snapshot: Path, record: dict[str, int]) -> bool:
    """Whether every recorded file is still there, with its size."""
    try:
        return all((snapshot / path).stat().st_size == size for path, size in record.items())
    except OSError:
        return False


def drop(snapshot: Path, path: str) -> None:
    """Remove a corrupt file and its blob, so the next run fetches it again."""
    link = snapshot / path
    try:
        blob = link.resolve()
        link.unlink()
        if blob != link:
            blob.unlink()
    except OSError:
        pass


def main() -> int:
    """Fetch, verify, record; the exit status says whether the snapshot can be served."""
    repo = os.environ["SERVEFLEET_WEIGHTS_REPO"]
    revision = os.environ["SERVEFLEET_WEIGHTS_REVISION"]
    cache = Path(os.environ["SERVEFLEET_WEIGHTS_DEST"])
    token = os.environ.get("HF_TOKEN") or None
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.hf_api import RepoFile
    except ImportError as error:
        say("error", f"the image's python3 has no huggingface_hub ({error})")
        return 3
    folder = cache / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / revision
    record_file = cache.parent / "servefleet" / "verified" / f"{folder.name}@{revision}.json"
    # A commit's files never change: a snapshot verified once, whose files all still have
    # their sizes, needs no word with the hub (a deploy works while the hub is down).
    try:
        record = json.loads(record_file.read_text())
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict) and record and sizes_match(snapshot, record):
        say("cached", len(record), sum(record.values()))
        return 0
    api = HfApi(token=token)
    try:
        tree = [entry for entry in api.list_repo_tree(repo, revision=revision, recursive=True)
                if isinstance(entry, RepoFile)]
    except Exception as error:  # any failure of the hub is reported as text
        say("error", f"listing {repo}@{revision}: {type(error).__name__}: "
                     f"{str(error).splitlines()[0][:300]}")
        if type(error).__name__ in ("RepositoryNotFoundError", "GatedRepoError"):
            say("error", "the hub refused access (gated or private): the profile needs "
                         "secret_env: [HF_TOKEN] and the stack a token that may read it")
        return 5
    total = sum(int(entry.size) for entry in tree)
    present = present_bytes(folder / "blobs", tree)
    say("plan", len(tree), total, present)
    cache.mkdir(parents=True, exist_ok=True)
    stat = os.statvfs(cache)
    free = stat.f_bavail * stat.f_frsize
    if total - present > free - SPARE_BYTES:
        say("error", f"the files still to fetch take {total - present} bytes and the cache's "
                     f"filesystem has {free} free (keeping {SPARE_BYTES} spare): free space, "
                     "or prune with `servefleet models NODE --prune`")
        return 7
    finished = threading.Event()

    def report() -> None:
        while not finished.wait(PROGRESS_EVERY_SECONDS):
            say("progress", present_bytes(folder / "blobs", tree), total)

    watcher = threading.Thread(target=report, daemon=True)
    watcher.start()
    try:
        snapshot_download(repo_id=repo, revision=revision, cache_dir=str(cache), token=token)
    except Exception as error:
        say("error", f"download: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
        return 5
    finally:
        finished.set()
    say("progress", present_bytes(folder / "blobs", tree), total)
    result = api.verify_repo_checksums(repo, revision=revision, cache_dir=str(cache))
    for mismatch in result.mismatches:
        drop(snapshot, mismatch["path"])
        say("corrupt", mismatch["path"], mismatch["algorithm"])
    for path in result.missing_paths:
        say("error", f"missing after the download: {path}")
    if result.mismatches or result.missing_paths:
        return 4
    record_file.parent.mkdir(parents=True, exist_ok=True)
    sizes = {entry.path: int(entry.size) for entry in tree}
    record_file.write_text(json.dumps(sizes, sort_keys=True))
    say("verified", result.checked_count, total)
    return 0


if __name__ == "__main__":
    sys.exit(main())

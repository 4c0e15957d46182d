"""A local Hugging Face Hub: serves folders as model repositories over plain HTTP.

The test bed for weight staging. The real ``huggingface_hub`` client, pointed at it with
``HF_ENDPOINT=http://host:port``, can ``snapshot_download``, ``hf_hub_download`` and
``verify_repo_checksums``; ``curl -fL -C -`` can resume a file. It speaks just enough of the
Hub's HTTP API for that (``/api/models/{repo}[/revision/{rev}]``, ``/api/models/{repo}/tree/
{rev}[/{path}]`` and ``/{repo}/resolve/{rev}/{path}``), with the Hub's headers and error codes,
and it injects the faults staging must survive: a slow link, a dropped link, corrupted bytes.

Files are served from the added folders as they are on disk (nothing is copied: weights can
be large), so a folder must stay unchanged while served; a file that changed since
:meth:`LocalHub.add_repo` answers 500 rather than bytes that differ from its published hash.
It never sends Xet headers, so the client takes the plain HTTP download path.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt")
LFS_MIN_SIZE = 10 * 1024 * 1024  # bigger files are LFS whatever their name, as on the Hub
_CHUNK = 1024 * 1024
# Never repo files (the client's verify_repo_checksums skips the same folders).
_SKIPPED_DIRS = (".git", ".cache/huggingface")


@dataclass(frozen=True)
class HubFile:
    """One file of a commit: where its bytes come from and the hashes the API publishes."""

    path: str  # repo-relative, "/"-separated
    source: Path
    size: int
    mtime_ns: int
    blob_id: str  # git blob sha1 (of the LFS pointer, for LFS files, as git stores them)
    sha256: str | None = None  # LFS files only
    pointer_size: int | None = None

    @property
    def etag(self) -> str:
        """The ETag the Hub sends: the sha256 for LFS files, the git blob sha1 otherwise."""
        return self.sha256 or self.blob_id

    def tree_entry(self) -> dict[str, Any]:
        """The file as ``/api/models/{repo}/tree`` lists it."""
        lfs = {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
        return {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.path,
                **({"lfs": lfs} if self.sha256 else {})}


@dataclass(frozen=True)
class HubRequest:
    """One request the hub answered. The token itself is never kept, only its sha256."""

    method: str
    path: str  # as sent, query included
    range: str | None  # the Range header
    authorization: bool  # whether an Authorization header came
    token_sha256: str | None  # sha256 hex of the bearer token (of the whole value if not Bearer)
    status: int  # 0 if no answer was started
    at: float = 0.0  # time.monotonic() when the request came (it is logged once answered)


@dataclass(frozen=True)
class _Fault:
    bytes_per_second: int | None = None
    cut_after: int | None = None
    corrupt_at: int | None = None


@dataclass
class _Repo:
    commits: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    modified: str = ""


def _hash_file(source: Path, rel: str, known: str | None = None) -> HubFile:
    stat = source.stat()
    lfs = rel.endswith(LFS_SUFFIXES) or stat.st_size > LFS_MIN_SIZE
    if lfs and known is not None:
        sha256 = known
    else:
        digest = hashlib.sha256() if lfs else hashlib.sha1(b"blob %d\0" % stat.st_size)
        with source.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
        sha256 = digest.hexdigest()
    if not lfs:
        return HubFile(rel, source, stat.st_size, stat.st_mtime_ns, sha256)
    # Git stores an LFS file as a pointer: the tree's `oid` is that pointer's blob sha1.
    pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\n"
               f"size {stat.st_size}\n").encode()
    blob_id = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
    return HubFile(rel, source, stat.st_size, stat.st_mtime_ns, blob_id, sha256,
                   len(pointer))


def _scan(folder: Path, known: Mapping[str, str] | None = None) -> dict[str, HubFile]:
    files: dict[str, HubFile] = {}
    chains: dict[str, frozenset[str]] = {}  # directory -> real paths of it and its parents
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        real, above = os.path.realpath(dirpath), chains.get(os.path.dirname(dirpath), frozenset())
        rel_dir = Path(dirpath).relative_to(folder).as_posix()
        # A symlink back to a parent would loop forever; the folders skipped are never repo files.
        if real in above or any(f"{rel_dir}/".startswith(f"{d}/") for d in _SKIPPED_DIRS):
            dirnames[:] = []
            continue
        chains[dirpath] = above | {real}
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if (Path(dirpath) / name).is_file():
                files[rel] = _hash_file(Path(dirpath) / name, rel, (known or {}).get(rel))
    return files


def _commit_sha(files: dict[str, HubFile]) -> str:
    # Only paths and contents count, so the same folder always gives the same commit.
    digest = hashlib.sha1(b"servefleet-hub-commit\n")
    for path in sorted(files):
        digest.update(f"{path}\0{files[path].etag}\n".encode())
    return digest.hexdigest()


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """``(start, end exclusive)`` of a single ``bytes=`` range; None to ignore it (the whole
    file is then sent, as HTTP allows); ``(-1, -1)`` when it cannot be satisfied."""
    unit, _, spec = value.partition("=")
    first, dash, last = spec.strip().partition("-")
    if unit.strip() != "bytes" or "," in spec or not dash:
        return None
    try:
        if not first:  # suffix range: the last N bytes
            return (max(size - int(last), 0), size) if int(last) > 0 else (-1, -1)
        start, end = int(first), (int(last) + 1 if last else size)
    except ValueError:
        return None
    return (start, min(end, size)) if start < size and start < end else (-1, -1)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1: the client keeps connections alive, so every answer carries Content-Length.
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self._handle(body=True)

    def do_HEAD(self) -> None:
        self._handle(body=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # test output stays quiet; `LocalHub.requests` is the log

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def _handle(self, body: bool) -> None:
        self._status, hub, auth = 0, self.server.hub, self.headers.get("Authorization")
        came = time.monotonic()
        try:
            if hub.refusing:
                # Down, as far as any client can tell: every request fails (and is logged).
                self._error(503, None, "the hub is down (LocalHub.refuse)")
            elif urlsplit(self.path).path == "/api/agent-harnesses":
                # Public on the Hub; the client asks for it (agent detection) with no token.
                self._json({"standardEnvVars": [], "harnesses": {}})
            elif hub._token is None or self._authorized(auth, hub._token):
                self._route(hub, body)
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away mid-answer
        finally:
            token = auth.removeprefix("Bearer ").strip() if auth is not None else None
            hub.requests.append(HubRequest(
                self.command, self.path, self.headers.get("Range"), auth is not None,
                hashlib.sha256(token.encode()).hexdigest() if token is not None else None,
                self._status, came))

    def _authorized(self, auth: str | None, token: str) -> bool:
        if auth is not None and hmac.compare_digest(auth.encode(), f"Bearer {token}".encode()):
            return True
        if auth is None:  # what the Hub answers to anonymous access to a private repo
            self._error(401, "RepoNotFound", "Invalid username or password.")
        else:
            self._error(401, None, "Invalid credentials in Authorization header")
        return False

    def _route(self, hub: LocalHub, body: bool) -> None:
        url = urlsplit(self.path)
        # Split before unquoting: a revision like "refs/pr/1" comes as one %2F-quoted segment.
        parts = url.path.strip("/").split("/")
        api = parts[:2] == ["api", "models"]
        rest = parts[2:] if api else parts
        name = next((n for n in ("/".join(rest[:2]), "/".join(rest[:1])) if n in hub._repos), None)
        if name is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        repo, rest = hub._repos[name], rest[name.count("/") + 1:] or ["revision", "main"]
        if len(rest) < 2 or rest[0] not in (("revision", "tree") if api else ("resolve",)):
            return self._error(404, None, "Not found")
        revision = unquote(rest[1])
        commit = repo.refs.get(revision) or (revision if revision in repo.commits else None)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        files, path = repo.commits[commit], unquote("/".join(rest[2:]))
        if rest[0] == "revision":
            return self._json(self._info(name, repo, commit, files, url.query))
        if rest[0] == "tree":
            return self._tree(files, path, commit, url.query)
        if path not in files:
            return self._error(404, "EntryNotFound", f"{path} does not exist", commit)
        self._file(files[path], commit, body)

    def _info(self, name: str, repo: _Repo, commit: str, files: dict[str, HubFile],
              query: str) -> dict[str, Any]:
        blobs = parse_qs(query).get("blobs", [""])[0].lower() == "true"
        siblings = [{"rfilename": f.path} | ({"size": f.size, "blobId": f.blob_id} if blobs else {})
                    | ({"lfs": {"size": f.size, "sha256": f.sha256, "pointerSize": f.pointer_size}}
                       if blobs and f.sha256 else {})
                    for f in sorted(files.values(), key=lambda f: f.path)]
        return {"_id": commit[:24], "id": name, "modelId": name, "author": name.split("/")[0],
                "sha": commit, "lastModified": repo.modified, "createdAt": repo.modified,
                "private": self.server.hub._token is not None, "gated": False, "disabled": False,
                "downloads": 0, "likes": 0, "tags": [], "siblings": siblings}

    def _tree(self, files: dict[str, HubFile], path: str, commit: str, query: str) -> None:
        params = {k: v[0] for k, v in parse_qs(query).items()}
        recursive = params.get("recursive", "").lower() == "true"
        prefix = f"{path}/" if path else ""
        dirs: dict[str, list[str]] = {}  # directory -> files below it, for a stable tree oid
        entries: list[dict[str, Any]] = []
        for f in (f for f in files.values() if f.path.startswith(prefix)):
            below = f.path[len(prefix):].split("/")
            if recursive or len(below) == 1:
                entries.append(f.tree_entry())
            for depth in range(1, len(below) if recursive else min(len(below), 2)):
                dirs.setdefault(prefix + "/".join(below[:depth]), []).append(f"{f.path} {f.etag}")
        if path and not entries and not dirs:
            return self._error(404, "EntryNotFound", f"{path} does not exist", commit)
        entries += [{"type": "directory", "path": d, "size": 0,
                     "oid": hashlib.sha1("\n".join(sorted(below)).encode()).hexdigest()}
                    for d, below in dirs.items()]
        entries.sort(key=lambda e: e["path"])
        # Pages linked by a `Link: <…>; rel="next"` header (absolute: the client follows it as is).
        cursor, size = int(params.get("cursor", "0")), self.server.hub.tree_page_size
        headers = {}
        if cursor + size < len(entries):
            query = urlencode({**params, "cursor": cursor + size})
            next_url = f"http://{self.headers['Host']}{urlsplit(self.path).path}?{query}"
            headers["Link"] = f'<{next_url}>; rel="next"'
        self._json(entries[cursor:cursor + size], headers)

    def _file(self, f: HubFile, commit: str, body: bool) -> None:
        try:
            stat = f.source.stat()
            changed = (stat.st_size, stat.st_mtime_ns) != (f.size, f.mtime_ns)
        except OSError:
            changed = True
        if changed:  # refuse rather than serve bytes that differ from the published hashes
            return self._error(500, None, f"{f.path} changed on disk since add_repo")
        wanted = self.headers.get("Range")
        span = _parse_range(wanted, f.size) if wanted else None
        if span == (-1, -1):
            return self._send(416, {"Content-Range": f"bytes */{f.size}"}, b"", body)
        start, end = span or (0, f.size)
        self.send_response(206 if span else 200)
        headers = {"Content-Type": "application/octet-stream", "Content-Length": end - start,
                   "Accept-Ranges": "bytes", "ETag": f'"{f.etag}"', "X-Repo-Commit": commit}
        if f.sha256 is not None:
            headers |= {"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": f.size}
        if span:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        for key, value in headers.items():
            self.send_header(key, str(value))
        self.end_headers()
        if body:
            faults = self.server.hub._faults
            self._stream(f, start, end, faults.get(f.path) or faults.get(None) or _Fault())

    def _stream(self, f: HubFile, start: int, end: int, fault: _Fault) -> None:
        # Each answer's body is cut after `cut_after` bytes, so resuming clients advance.
        stop = min(end, start + fault.cut_after) if fault.cut_after is not None else end
        rate, pos, began = fault.bytes_per_second, start, time.monotonic()
        chunk = max(1, min(_CHUNK, rate // 20)) if rate else _CHUNK  # ~50 ms steps when slow
        with f.source.open("rb") as stream:
            stream.seek(start)
            while pos < stop and (data := stream.read(min(chunk, stop - pos))):
                if fault.corrupt_at is not None and pos <= fault.corrupt_at < pos + len(data):
                    flipped = bytearray(data)
                    flipped[fault.corrupt_at - pos] ^= 0xFF
                    data = bytes(flipped)
                self.wfile.write(data)
                pos += len(data)
                if rate and (ahead := (pos - start) / rate - (time.monotonic() - began)) > 0:
                    time.sleep(ahead)
        if pos < end:
            # Close mid-body: the client sees fewer bytes than Content-Length announced.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _error(self, status: int, code: str | None, message: str, commit: str | None = None
               ) -> None:
        # Header values must be latin-1; a path in the message may not be.
        headers = {"X-Error-Message": message.encode("ascii", "replace").decode()}
        headers |= ({"X-Error-Code": code} if code else {}) | (
            {"X-Repo-Commit": commit} if commit else {})
        self._json({"error": message}, headers, status)

    def _json(self, data: Any, headers: dict[str, str] | None = None, status: int = 200
              ) -> None:
        self._send(status, {"Content-Type": "application/json", **(headers or {})},
                   json.dumps(data).encode(), self.command != "HEAD")

    def _send(self, status: int, headers: dict[str, str], payload: bytes, body: bool) -> None:
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(payload))}.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hub: LocalHub, address: tuple[str, int]) -> None:
        self.hub = hub
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client dropping its connection (or one we cut) is routine here, not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class LocalHub:
    """A Hub-compatible HTTP endpoint in a background thread; a context manager.

    ``token``: when set, every request must carry ``Authorization: Bearer <token>`` (else 401),
    which proves a token reaches the client's environment. ``tree_page_size``: entries per
    page of the tree listing (lower it to exercise the client's pagination).

    :attr:`requests` logs every request once answered, with the time it came; while
    :attr:`refusing` (see :meth:`refuse`) every request is answered 503 and still logged, so
    a test can take the hub away from a client and see whether the client asked it anything
    (:meth:`requests_since`).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None
                 ) -> None:
        self.host, self.port = host, port
        self.requests: list[HubRequest] = []
        self.tree_page_size = 1000
        self.refusing = False
        self._token = token
        self._repos: dict[str, _Repo] = {}
        self._faults: dict[str | None, _Fault] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> LocalHub:
        """Bind and serve; ``port`` is then the bound port."""
        if self._server is None:
            self._server = _Server(self, (self.host, self.port))
            self.port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever,
                                            args=(0.05,),
                                            name=f"local-hub:{self.port}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, host: str | None = None) -> str:
        """``http://{host}:{port}``: ``host`` defaults to the bound one (a wildcard bind gives
        127.0.0.1, since 0.0.0.0 is no destination); pass the address a client should use."""
        host = host or (self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def add_repo(self, repo_id: str, folder: Path, *, branch: str = "main",
                 known_sha256: Mapping[str, str] | None = None) -> str:
        """Serve ``folder`` (recursively, symlinks followed) as model repo ``repo_id`` and point
        ``branch`` at it; the commit sha, which depends only on the files' paths and contents.
        Earlier commits of the repo stay downloadable by their sha.

        ``known_sha256``: repo path → the sha256 to publish for that LFS file instead of
        hashing it: for sparse stand-ins of a real checkpoint's shards, whose published
        sizes matter and whose bytes are never downloaded (a client that downloads one
        finds the hash wrong, as it should)."""
        if not Path(folder).is_dir():
            raise NotADirectoryError(f"add_repo {repo_id}: {folder} is not a directory")
        files = _scan(Path(folder), known_sha256)
        commit = _commit_sha(files)
        repo = self._repos.get(repo_id) or _Repo()
        repo.commits[commit] = files
        repo.refs[branch] = commit
        repo.modified = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        self._repos[repo_id] = repo  # published last: a request sees a whole repo or none
        return commit

    @contextlib.contextmanager
    def refuse(self) -> Iterator[float]:
        """While the block runs, answer every request with 503 (the hub is down as far as
        clients can tell; each request is still logged). Yields the time it began (for
        :meth:`requests_since`)."""
        self.refusing = True
        try:
            yield time.monotonic()
        finally:
            self.refusing = False

    def requests_since(self, since: float) -> list[HubRequest]:
        """The requests that came at or after ``since`` (a ``time.monotonic()`` value),
        answered so far."""
        return [r for r in list(self.requests) if r.at >= since]

    def fault(self, path: str | None = None, *, bytes_per_second: int | None = None,
              cut_after: int | None = None, corrupt_at: int | None = None) -> None:
        """Fault the GET of file content for ``path`` (repo-relative; None: every file not
        given its own fault). ``bytes_per_second``: throttle. ``cut_after``: close the
        connection after N bytes of each answer's body (a ranged request gets N more).
        ``corrupt_at``: flip the byte at file offset N (the hashes the API publishes stay
        those of the real file). ``fault()`` alone clears every fault."""
        if (path, bytes_per_second, cut_after, corrupt_at) == (None, None, None, None):
            self._faults = {}
        else:  # a new dict, not a mutation: handlers read it without a lock
            self._faults = {**self._faults, path: _Fault(bytes_per_second, cut_after, corrupt_at)}

    @contextlib.contextmanager
    def faulted(self, path: str | None = None, *, bytes_per_second: int | None = None,
                cut_after: int | None = None, corrupt_at: int | None = None) -> Iterator[None]:
        """:meth:`fault` while the block runs, every fault cleared after it."""
        self.fault(path, bytes_per_second=bytes_per_second, cut_after=cut_after,
                   corrupt_at=corrupt_at)
        try:
            yield
        finally:
            self.fault()


def main(argv: list[str] | None = None) -> int:
    """``python -m servefleet.sim.hub --repo ORG/NAME=FOLDER …``: serve until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m servefleet.sim.hub",
        description="Serve local folders as Hugging Face Hub model repositories.")
    parser.add_argument("--repo", action="append", required=True, metavar="ORG/NAME=FOLDER")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", help="require `Authorization: Bearer TOKEN`")
    args = parser.parse_args(argv)
    hub = LocalHub(args.host, args.port, token=args.token)
    commits = {}
    for spec in args.repo:
        repo_id, sep, folder = spec.partition("=")
        if not (sep and repo_id and folder):
            parser.error(f"--repo {spec!r}: expected ORG/NAME=FOLDER")
        commits[repo_id] = hub.add_repo(repo_id, Path(folder))
    with hub:
        print(f"HF_ENDPOINT={hub.url()}", flush=True)
        for repo_id, commit in commits.items():
            print(f"{repo_id} {commit}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

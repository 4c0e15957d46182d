"""Drift collector that runs on a node and prints one JSON object: everything the nightly
drift check compares, read in one round trip.

servefleet sends this file on the stdin of a small bootstrap (``python3 -S -c …``, see
:data:`servefleet.adapters.drift_collect.BOOTSTRAP`), which keeps it as a module in the SSH
user's ``~/.cache/servefleet`` so it is compiled once, followed by the request (and the GPU
probe's source) as Python literals and a call of :func:`main`. It must stay self-contained:
standard library only, no servefleet imports, syntax that Python 3.7 still accepts. Nothing it
prints contains a secret value: container environment values are hashed here, on the node,
and only variables the control machine named as non-secret are sent in clear.

It reads, per deployment of the request:

- ``<base>/<deployment>/current`` and every file of that release, hashed (``engine.env`` in
  its published form, names only, by :func:`servefleet.core.envdigest.hashed_env_text`, whose
  source is appended to this one when it is sent), the release's manifest, and the digests
  of the ``engine.env`` values (compared on the control machine, never written);
- the compose project's containers through the ``docker`` CLI: ``docker inspect`` of the
  engine container (state, restarts, command, environment, labels, image), ``docker image
  inspect`` of its image and of the reference it names (a tag that moved), the overlay
  marker from inside the container (``docker cp``, which needs no shell in the image), and
  the log of the latest boot (from the container's last start up to the ready line,
  zlib-compressed) for the control side's boot-log parser;
and, once per node, the baselines files the request names (under the base directory) and
the GPU probe's :func:`probe`, in a thread beside the docker calls.

It is run once per node per check, so start-up cost is kept low: bytecode cached on the
node, ``-S`` (``site`` is loaded only for the GPU probe, which may need pynvml from
site-packages), no ``typing``, ``subprocess`` or ``threading`` import (children are started
with ``os.posix_spawnp`` and run in parallel as processes), the C halves of ``hashlib`` and
``json``, ``tarfile`` only when a marker is found.
"""

from __future__ import annotations

import _thread
import binascii
import os
import sys
import zlib

MYPY = False
if MYPY:  # for the type checker only: importing typing costs ~10 ms per run
    from typing import Any, ClassVar

SCHEMA_VERSION = 1
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
PROJECT_PREFIX = "servefleet-"
NEVER_STARTED = "0001-01-01T00:00:00Z"
MAX_FILE_BYTES = 64 * 1024 * 1024
READ_BYTES = 65536


# --------------------------------------------------------------------------- start-up cost
# ``hashlib`` loads OpenSSL and ``json`` compiles regular expressions at import: together
# about two thirds of this script's start-up. The C modules underneath do the same work;
# the public modules remain the fallback wherever those are missing or differ.


def _sha256_type() -> Any:
    for module in ("_sha2", "_sha256"):  # CPython 3.12+, older
        try:
            return __import__(module).sha256
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256


class _ScanContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float


def _json_codec() -> tuple[Any, Any]:
    """``(loads, dumps)`` built on ``_json`` (sorted keys, ASCII), else on ``json``."""
    try:
        import _json

        scan = _json.make_scanner(_ScanContext())  # type: ignore[arg-type]
        encode = _json.make_encoder(None, None,  # type: ignore[arg-type]
                                    _json.encode_basestring_ascii, None, ": ", ", ", True,
                                    False, True)
        if scan("[1]", 0) != ([1], 3) or "".join(encode({"a": [None]}, 0)) != '{"a": [null]}':
            raise ValueError("unexpected _json behaviour")
    except Exception:
        import json

        return json.loads, lambda value: json.dumps(value, sort_keys=True)

    def loads(text: str) -> Any:
        text = text.strip()
        try:
            value, end = scan(text, 0)
        except StopIteration:
            raise ValueError("not JSON") from None
        if end != len(text):
            raise ValueError("extra data after JSON")
        return value

    return loads, lambda value: "".join(encode(value, 0))


_SHA256 = _sha256_type()
json_loads, json_dumps = _json_codec()


# --------------------------------------------------------------------------- pure helpers


def sha256_hex(data: bytes) -> str:
    """sha256 hex digest."""
    return str(_SHA256(data).hexdigest())


def value_digest(value: str) -> str:
    """``sha256:<hex>`` of a value: how secrets are compared and shown."""
    return "sha256:" + sha256_hex(value.encode("utf-8", "surrogateescape"))


def env_digests(content: bytes) -> dict[str, str]:
    """``NAME`` → ``sha256:`` digest of its value, for each assignment of an env file: the
    answer to the control machine, which compares it with the secret it holds and shows
    only "differs"; unlike the file hashes it is never written to a manifest or an output."""
    digests = {}
    for line in content.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition("=")
        if line.startswith("#") or not sep:
            continue
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        digests[name.strip()] = value_digest(value)
    return digests


def hashed_env_list(env: list[str] | None, plain: set[str]) -> dict[str, dict[str, str]]:
    """A container's ``Config.Env`` with every value hashed; names in ``plain`` keep theirs."""
    result: dict[str, dict[str, str]] = {}
    for entry in env or []:
        name, _, value = entry.partition("=")
        item = {"sha256": value_digest(value)}
        if name in plain:
            item["value"] = value
        result[name] = item
    return result


def pick_container(inspected: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The container that serves: a running one, else the most recently created."""
    if not inspected:
        return None
    running = [c for c in inspected if (c.get("State") or {}).get("Status") == "running"]
    pool = running or inspected
    return sorted(pool, key=lambda c: str(c.get("Created") or ""))[-1]


def container_facts(raw: dict[str, Any], plain: set[str]) -> dict[str, Any]:
    """The fields of one ``docker inspect`` object that drift compares (env hashed)."""
    state = raw.get("State") or {}
    config = raw.get("Config") or {}
    cmd = config.get("Cmd")
    return {
        "id": raw.get("Id") or "",
        "name": str(raw.get("Name") or "").lstrip("/"),
        "status": state.get("Status") or "unknown",
        "exit_code": int(state.get("ExitCode") or 0),
        "oom_killed": bool(state.get("OOMKilled")),
        "restart_count": int(raw.get("RestartCount") or 0),
        "started_at": state.get("StartedAt") or None,
        "health": (state.get("Health") or {}).get("Status") or None,
        "command": list(cmd) if isinstance(cmd, list) else None,
        "env": hashed_env_list(config.get("Env"), plain),
        "labels": config.get("Labels") or {},
        "image_ref": config.get("Image") or None,
        "image_id": raw.get("Image") or None,
    }


def _short_ref(ref: str) -> str:
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


def resolve_ref(ref: str, images: list[dict[str, Any]]) -> str | None:
    """The ID of the image ``ref`` names among ``images`` (``docker image inspect``
    objects): by digest for ``name@sha256:…``, by tag otherwise (``:latest`` implied)."""
    if ref.startswith("sha256:"):
        return ref if any(i.get("Id") == ref for i in images) else None
    _, at, digest = ref.partition("@")
    if at:
        for image in images:
            if any(str(d).endswith("@" + digest) for d in image.get("RepoDigests") or []):
                return image.get("Id")
        return None
    tagged = ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"
    wanted = {_short_ref(tagged), tagged}
    for image in images:
        if wanted & {_short_ref(str(t)) for t in image.get("RepoTags") or []}:
            return image.get("Id")
    return None


# --------------------------------------------------------------------------- children


class Deadline(Exception):
    """The request's deadline passed (raised by the alarm in the main thread)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Deadline()


def _spawn(argv: list[str], out_fd: int, err_fd: int) -> int:
    """Start ``argv`` (looked up on PATH) with stdin from /dev/null; its pid."""
    if hasattr(os, "posix_spawnp"):  # Python 3.8+
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_DUP2, out_fd, 1), (os.POSIX_SPAWN_DUP2, err_fd, 2)]
        return os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)
    import subprocess

    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_fd,
                            stderr=err_fd).pid


class Child:
    """A command started with its stdout (and stderr) on pipes; runs until :meth:`finish`."""

    live: ClassVar[dict[int, Child]] = {}
    """Children started and not yet reaped, by pid."""

    def __init__(self, argv: list[str], *, merge_stderr: bool = False) -> None:
        self.argv = argv
        self.pid = 0
        self.error = ""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self.pid = _spawn(argv, out_w, out_w if merge_stderr else err_w)
        except FileNotFoundError:
            self.error = f"{argv[0]}: command not found"
        except OSError as error:
            self.error = f"{argv[0]}: {error.strerror or error}"
        finally:
            os.close(out_w)
            os.close(err_w)
        self.out_fd, self.err_fd = out_r, err_r
        if self.pid:
            Child.live[self.pid] = self

    def finish(self, stop: list[bytes] | None = None,
               limit: int | None = None) -> tuple[int, bytes, str]:
        """``(status, stdout, last stderr line)``; 127 when it could not start. With
        ``stop``/``limit`` the child is killed once a marker was read or ``limit`` bytes."""
        chunks: list[bytes] = []
        size = 0
        cut = False
        try:
            if not self.pid:
                return 127, b"", self.error
            tail = b""
            while True:
                data = os.read(self.out_fd, READ_BYTES)
                if not data:
                    break
                chunks.append(data)
                size += len(data)
                window = tail + data
                if stop and any(marker in window for marker in stop):
                    cut = True
                    break
                if limit is not None and size >= limit:
                    cut = True
                    break
                tail = window[-256:]
            if cut:
                self.kill()
            err = b"" if cut else os.read(self.err_fd, READ_BYTES)
            _, status = os.waitpid(self.pid, 0)
            Child.live.pop(self.pid, None)
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            lines = err.decode("utf-8", "replace").strip().splitlines()
            return (0 if cut else code), b"".join(chunks), lines[-1] if lines else ""
        finally:
            os.close(self.out_fd)
            os.close(self.err_fd)

    def kill(self) -> None:
        """Stop the child (it is reaped by :meth:`finish`)."""
        try:
            os.kill(self.pid, 9)
        except OSError:
            return  # already gone

    @classmethod
    def kill_all(cls) -> None:
        """Stop every child still running (the deadline passed)."""
        for child in list(cls.live.values()):
            child.kill()


def run(argv: list[str]) -> tuple[int, bytes, str]:
    """Run a command to its end; ``(status, stdout, last stderr line)``."""
    return Child(argv).finish()


def _json(data: bytes) -> Any:
    try:
        return json_loads(data.decode("utf-8") or "null")
    except ValueError:
        return None


# --------------------------------------------------------------------------- reads


def read_release(deployment_dir: str, env_file: str, manifest_file: str) -> dict[str, Any]:
    """``current``, the manifest, and the hash of every file of the current release."""
    result: dict[str, Any] = {"present": os.path.isdir(deployment_dir), "current": None,
                              "manifest": None, "manifest_error": None, "files": {},
                              "secret_digests": {}, "errors": []}
    if not result["present"]:
        return result
    # The gate mark (``release=<id> started=<StartedAt> at=<time>``): which engine passed.
    try:
        with open(deployment_dir + "/gated", encoding="utf-8", errors="replace") as handle:
            result["gated"] = handle.read(4096)
    except OSError:
        result["gated"] = None
    try:
        target = os.readlink(deployment_dir + "/current")
    except OSError:
        return result
    result["current"] = target.rstrip("/").rsplit("/", 1)[-1]
    release = target if target.startswith("/") else deployment_dir + "/" + target
    files: dict[str, str] = {}
    for folder, dirs, names in os.walk(release):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, release)
            if os.path.islink(path) or not os.path.isfile(path):
                files[rel] = "not-a-regular-file"
                continue
            if os.path.getsize(path) > MAX_FILE_BYTES:
                files[rel] = "too-large"
                continue
            with open(path, "rb") as handle:
                content = handle.read()
            if rel == manifest_file:
                manifest = _json(content)
                if isinstance(manifest, dict):
                    result["manifest"] = manifest
                else:
                    result["manifest_error"] = f"{rel} is not a JSON object"
                continue
            if rel == env_file:
                result["secret_digests"] = env_digests(content)
                try:
                    content = hashed_env_text(content)
                except UnicodeDecodeError:
                    result["errors"].append(f"{rel} is not UTF-8: hashed as it is")
            files[rel] = sha256_hex(content)
    result["files"] = files
    return result


def read_json_file(path: str) -> Any:
    """A JSON file's content, or None when it is absent or unreadable."""
    try:
        with open(path, "rb") as handle:
            return _json(handle.read())
    except OSError:
        return None


def marker_result(found: tuple[int, bytes, str]) -> dict[str, Any]:
    """sha256 of the file in a ``docker cp CONTAINER:PATH -`` tar stream."""
    status, out, err = found
    if status != 0:
        missing = "could not find" in err.lower() or "no such" in err.lower()
        return {"checked": missing, "sha256": None, "error": None if missing else err}
    import io
    import tarfile

    try:
        with tarfile.open(fileobj=io.BytesIO(out)) as archive:
            for member in archive:
                handle = archive.extractfile(member) if member.isfile() else None
                if handle is not None:
                    return {"checked": True, "sha256": sha256_hex(handle.read()), "error": None}
    except tarfile.TarError as error:
        return {"checked": False, "sha256": None, "error": f"marker archive: {error}"}
    return {"checked": True, "sha256": None, "error": None}


def boot_log_result(found: tuple[int, bytes, str], markers: list[bytes]) -> dict[str, Any]:
    """The latest boot's log, zlib-compressed and base64-encoded."""
    status, out, err = found
    if status != 0 and not out:
        return {"error": err or f"docker logs failed (exit {status})"}
    ready = any(marker in out for marker in markers)
    # Level 1: a boot log shrinks ~10x all the same, for a third of level 6's time.
    return {"gz": binascii.b2a_base64(zlib.compress(out, 1), newline=False).decode("ascii"),
            "bytes": len(out), "ready_seen": ready, "error": None}


def run_probe(probe_source: str, box: dict[str, Any], done: Any) -> None:
    """The GPU probe in this interpreter (a thread), with ``site`` loaded first: pynvml
    usually lives in site-packages, which ``-S`` left out."""
    try:
        if "site" not in sys.modules:
            import site

            site.main()
        namespace: dict[str, Any] = {"__name__": "servefleet_gpu_probe"}
        exec(compile(probe_source, "servefleet-gpu-probe", "exec"), namespace)
        box["result"] = namespace["probe"]()
    except Exception as error:  # reported as data, never as a traceback
        box["error"] = f"GPU probe failed: {type(error).__name__}: {error}"
    finally:
        done.release()


def collect_docker(request: dict[str, Any]) -> dict[str, Any]:
    """Containers of every requested deployment: facts, image, marker, boot log."""
    docker = list(request.get("docker") or ["docker"])
    names = [d["name"] for d in request["deployments"]]
    status, out, err = run([*docker, "ps", "-a", "--no-trunc", "--filter",
                            "label=" + COMPOSE_PROJECT_LABEL, "--format",
                            '{{.ID}}\t{{.Label "' + COMPOSE_PROJECT_LABEL + '"}}'])
    if status != 0:
        return {"error": err or f"docker ps failed (exit {status})", "deployments": {}}
    ids: dict[str, list[str]] = {name: [] for name in names}
    for line in out.decode("utf-8", "replace").splitlines():
        cid, _, project = line.partition("\t")
        # servefleet's compose projects are servefleet-<deployment> (remote.PROJECT_PREFIX);
        # an operator's own project named after a deployment is not ours.
        name = project[len(PROJECT_PREFIX):] if project.startswith(PROJECT_PREFIX) else None
        if name in ids and cid:
            ids[name].append(cid)
    wanted = [cid for name in names for cid in ids[name]]
    inspected: dict[str, dict[str, Any]] = {}
    if wanted:
        status, out, err = run([*docker, "inspect", *wanted])
        found = _json(out)
        if not isinstance(found, list):
            return {"error": err or "docker inspect printed no JSON", "deployments": {}}
        inspected = {str(raw.get("Id")): raw for raw in found}
    chosen: dict[str, dict[str, Any]] = {}
    result: dict[str, Any] = {"error": None, "deployments": {}}
    for spec in request["deployments"]:
        name = spec["name"]
        raws = [inspected[c] for c in ids[name] if c in inspected]
        raw = pick_container(raws)
        entry: dict[str, Any] = {"container": None, "others": max(0, len(raws) - 1)}
        if raw is not None:
            entry["container"] = container_facts(raw, set(spec.get("plain_env") or ()))
            chosen[name] = entry["container"]
        result["deployments"][name] = entry
    if not chosen:
        return result

    # Everything else runs side by side: one image inspect (the running images and the
    # references they were created from), and per container the marker and the boot log.
    keys = sorted({c[k] for c in chosen.values() for k in ("image_id", "image_ref") if c.get(k)})
    images = Child([*docker, "image", "inspect", *keys])
    markers = [m.encode() for m in request.get("ready_markers") or []]
    children = {}
    for spec in request["deployments"]:
        container = chosen.get(spec["name"])
        if container is None:
            continue
        marker = Child([*docker, "cp", container["id"] + ":" + spec["marker"], "-"]) \
            if spec.get("marker") else None
        log = None
        if container["status"] == "running" and request.get("boot_log", True):
            since = container.get("started_at")
            argv = [*docker, "logs"]
            if since and since != NEVER_STARTED:
                argv += ["--since", since]
            # uvicorn's "Application startup complete" goes to stderr: read both, merged.
            log = Child([*argv, container["id"]], merge_stderr=True)
        children[spec["name"]] = (marker, log)

    found = _json(images.finish()[1])
    known = [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []
    by_id = {str(i.get("Id")): i for i in known}
    limit = int(request.get("log_max_bytes") or 4 * 1024 * 1024)
    for name, container in chosen.items():
        running = by_id.get(container.get("image_id") or "") or {}
        config = running.get("Config") or {}
        container["repo_digests"] = list(running.get("RepoDigests") or [])
        container["image_env"] = {k: v["sha256"] for k, v in
                                  hashed_env_list(config.get("Env"), set()).items()}
        container["image_labels"] = config.get("Labels") or {}
        ref = container.get("image_ref")
        container["ref_image_id"] = resolve_ref(ref, known) if ref else None
        marker, log = children[name]
        if marker is not None:
            checked = marker_result(marker.finish())
            container["patch_marker_checked"] = checked["checked"]
            container["patch_marker_sha256"] = checked["sha256"]
        result["deployments"][name]["boot_log"] = \
            boot_log_result(log.finish(stop=markers, limit=limit), markers) \
            if log is not None else None
    return result


def main(request: dict[str, Any], probe_source: str | None = None) -> int:
    """Read everything ``request`` asks for (and run the GPU probe when its source is
    given) and print one JSON object."""
    base = str(request["base_dir"]).rstrip("/")
    answer: dict[str, Any] = {"schema": SCHEMA_VERSION, "deployments": {}, "docker_error": None,
                              "gpu": None, "gpu_error": None, "errors": [],
                              "baselines": {name: read_json_file(base + "/" + name)
                                            for name in request.get("baseline_files") or []}}
    probe_box: dict[str, Any] = {}
    probe_done = _thread.allocate_lock()
    if probe_source:
        probe_done.acquire()
        _thread.start_new_thread(run_probe, (probe_source, probe_box, probe_done))
    deadline = float(request.get("deadline_seconds") or 0)
    if deadline > 0:
        import _signal

        _signal.signal(_signal.SIGALRM, _on_alarm)
        _signal.alarm(max(1, int(deadline)))
    try:
        for spec in request["deployments"]:
            folder = base + "/" + spec["name"]
            entry = read_release(folder, request.get("env_file", "engine.env"),
                                 request.get("manifest_file", "manifest.json"))
            answer["deployments"][spec["name"]] = entry
        if request.get("docker_checks", True):
            try:
                docker = collect_docker(request)
            except Deadline:
                raise
            except Exception as error:  # data, not a traceback
                docker = {"error": f"{type(error).__name__}: {error}", "deployments": {}}
            answer["docker_error"] = docker["error"]
            for name, entry in docker["deployments"].items():
                answer["deployments"][name].update(entry)
        if probe_source:
            probe_done.acquire()
            answer["gpu"], answer["gpu_error"] = probe_box.get("result"), probe_box.get("error")
    except Deadline:
        Child.kill_all()
        answer["errors"].append(f"the node did not answer within {deadline:.0f} s "
                                "(docker or the GPU probe hung); what was read is reported")
        if probe_source and "result" not in probe_box:
            answer["gpu_error"] = "the GPU probe did not finish in time"
        else:
            answer["gpu"] = probe_box.get("result")
    sys.stdout.write(json_dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


# The env-file hasher is servefleet.core.envdigest, one copy for the renderer and the node:
# collector_source() appends its source here when the collector is sent; imported on the
# control machine (tests load this file as a module).
try:  # noqa: SIM105 (importing contextlib would cost start-up time on the node)
    from servefleet.core.envdigest import hashed_env_text
except ImportError:
    pass  # on the node: the appended source defines it

"""The drift collector's reads (release files, docker, the GPU probe) and its entry point,
:func:`main`: the last part of the program sent to a node, after
:mod:`servefleet.adapters.drift_collect.collector_pure` (whose docstring describes the
program) and :mod:`servefleet.adapters.drift_collect.collector_children`. Imported here, this
module gives every name of the program."""

from __future__ import annotations

from typing import Any

from servefleet.adapters.drift_collect.collector_children import (
    READ_BYTES,
    Child,
    Deadline,
    _on_alarm,
    run,
)
from servefleet.adapters.drift_collect.collector_pure import (
    _json,
    compose_service_facts,
    container_facts,
    env_digests,
    hashed_env_list,
    json_dumps,
    json_loads,
    pick_container,
    resolve_ref,
    sha256_hex,
    value_digest,
)

__all__ = [  # the program's names
    "ADOPTED_SUFFIX",
    "COMPOSE_PROJECT_LABEL",
    "MAX_FILE_BYTES",
    "NEVER_STARTED",
    "PROJECT_PREFIX",
    "READ_BYTES",
    "SCHEMA_VERSION",
    "Child",
    "Deadline",
    "boot_log_result",
    "collect_docker",
    "compose_service",
    "compose_service_facts",
    "container_facts",
    "env_digests",
    "hashed_env_list",
    "hashed_env_text",
    "json_dumps",
    "json_loads",
    "keyed_value_digests",
    "link_release",
    "main",
    "marker_result",
    "pick_container",
    "read_json_file",
    "read_release",
    "read_text",
    "resolve_ref",
    "run",
    "run_probe",
    "sha256_hex",
    "value_digest",
]

# isort: split
# ---- node script part: the node gets the lines below, those above stay here ----
import _thread
import binascii
import os
import sys
import zlib

SCHEMA_VERSION = 1
COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
PROJECT_PREFIX = "servefleet-"
ADOPTED_SUFFIX = "-adopted"
NEVER_STARTED = "0001-01-01T00:00:00Z"
MAX_FILE_BYTES = 64 * 1024 * 1024


# --------------------------------------------------------------------------- reads


def weights_facts(weights: Any) -> dict[str, Any] | None:
    """What the node holds of a release's staged weights (its manifest's ``weights``):
    ``present`` (the pinned snapshot or file is there), ``verified`` (the fetcher's record
    of a passed verification) and, for a snapshot, the commits the cache holds."""
    if not isinstance(weights, dict) or not isinstance(weights.get("host_folder"), str):
        return None
    folder = weights["host_folder"].rstrip("/")
    if weights.get("kind") == "snapshot":
        repo_dir = folder + "/hub/models--" + str(weights.get("repo")).replace("/", "--")
        revision = str(weights.get("revision"))
        try:
            revisions = sorted(os.listdir(repo_dir + "/snapshots"))
        except OSError:
            revisions = []
        record = folder + "/servefleet/verified/" + repo_dir.rsplit("/", 1)[-1] + "@" + \
            revision + ".json"
        return {"present": revision in revisions, "verified": os.path.isfile(record),
                "revisions": revisions}
    name = str(weights.get("file_name"))
    path = folder + "/" + name
    try:
        with open(folder + "/.servefleet/" + name + ".verified", encoding="utf-8") as handle:
            record = handle.read(200).split()
    except OSError:
        record = []
    present = os.path.isfile(path)
    verified = present and record == [str(weights.get("sha256")), str(os.path.getsize(path))]
    return {"present": present, "verified": verified, "revisions": []}


def link_release(path: str) -> str | None:
    """The release a ``current``/``previous``/``last-good`` link names: the last part of
    its target when that is a folder under ``releases/``; ``None`` without the link."""
    try:
        target = os.readlink(path).rstrip("/")
    except OSError:
        return None
    parent, _, name = target.rpartition("/")
    return name or None if parent.rpartition("/")[2] == "releases" else None


def read_release(deployment_dir: str, env_file: str, manifest_file: str,
                 observe_key: str = "") -> dict[str, Any]:
    """``current``, ``previous``, ``last-good``, the release folders, the gate mark and the
    adopted record, the manifest, and the hash of every file of the current release; with
    ``observe_key`` also the keyed digests of the current ``engine.env``'s values."""
    result: dict[str, Any] = {"present": os.path.isdir(deployment_dir), "current": None,
                              "manifest": None, "manifest_error": None, "files": {},
                              "secret_digests": {}, "errors": []}
    if not result["present"]:
        return result
    try:
        result["releases"] = sorted(os.listdir(deployment_dir + "/releases"))
    except OSError:
        result["releases"] = []
    result["previous"] = link_release(deployment_dir + "/previous")
    result["last_good"] = link_release(deployment_dir + "/last-good")
    # The gate mark (``release=<id> started=<StartedAt> at=<time>``): which engine passed.
    # The adopted record (``release=<id> container=<id> name=<name>``), when one was.
    for record in ("gated", "adopted"):
        result[record] = read_text(deployment_dir + "/" + record)
    try:
        target = os.readlink(deployment_dir + "/current")
    except OSError:
        return result
    result["current"] = link_release(deployment_dir + "/current")
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
                    result["weights"] = weights_facts(manifest.get("weights"))
                else:
                    result["manifest_error"] = f"{rel} is not a JSON object"
                continue
            if rel == env_file:
                result["secret_digests"] = env_digests(content)
                if observe_key:
                    # Worthless without the key, which only the observing controller holds.
                    result["keyed_digests"] = dict(keyed_value_digests(
                        content, observe_key.encode("utf-8")))
                try:
                    content = hashed_env_text(content)
                except UnicodeDecodeError:
                    result["errors"].append(f"{rel} is not UTF-8: hashed as it is")
            files[rel] = sha256_hex(content)
    result["files"] = files
    return result


def compose_service(compose: list[str], folder: str, project: str, files: list[str],
                    env_file: str, secret_names: Any = ()) -> dict[str, Any]:
    """The engine service as ``docker compose config`` merges the release in ``folder``
    (``files`` in ``-f`` order, the folder as the project directory, as the rollout runs
    it), or ``{"error": …}``. Env files stay unresolved, and ``secret_names`` are left out
    of the environment (an override may set one from the shell): their values may be
    secrets, which never leave the node."""
    argv = [*compose, "-p", project, "--project-directory", folder]
    for name in files:
        argv += ["-f", name if name.startswith("/") else folder + "/" + name]
    status, out, err = run([*argv, "config", "--format", "json", "--no-env-resolution"])
    hidden = set(secret_names)
    if status != 0:
        # Compose before 2.35 has no such flag (its error names it on a line before the
        # last) and resolves env files into the environment: the names the release's env
        # file sets are dropped, on the node. Any other failure fails again, and says why.
        status, out, err = run([*argv, "config", "--format", "json"])
        hidden |= set(env_digests(read_text(folder + "/" + env_file).encode("utf-8")))
    if status != 0:
        return {"error": (err or "exit " + str(status))[-300:]}
    return compose_service_facts(_json(out), "engine", hidden)


def read_text(path: str) -> str:
    """A small text file's content; empty when it is absent or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(65536)
    except OSError:
        return ""


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


def collect_docker(request: dict[str, Any], without_current: set[str]) -> dict[str, Any]:
    """Containers of every requested deployment: facts, image, marker, boot log (the last
    three only with ``container_extras``); a deployment in ``without_current`` also gets
    its adopt candidate's facts."""
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
    # An adopted container (started by hand) is found by the name it was given.
    status, out, err = run([*docker, "ps", "-a", "--no-trunc", "--filter",
                            "name=" + ADOPTED_SUFFIX, "--format", "{{.ID}}\t{{.Names}}"])
    if status != 0:
        return {"error": err or f"docker ps failed (exit {status})", "deployments": {}}
    for line in out.decode("utf-8", "replace").splitlines():
        cid, _, cname = line.partition("\t")
        name = cname[len(PROJECT_PREFIX):-len(ADOPTED_SUFFIX)] \
            if cname.startswith(PROJECT_PREFIX) and cname.endswith(ADOPTED_SUFFIX) else None
        if name in ids and cid:
            ids[name].append(cid)
    wanted = [cid for name in names for cid in ids[name]]
    # A container the stack adopts, looked at while its deployment has no current release.
    candidates = [spec["candidate"] for spec in request["deployments"]
                  if spec.get("candidate") and spec["name"] in without_current]
    inspected: dict[str, dict[str, Any]] = {}
    if wanted:
        status, out, err = run([*docker, "inspect", *wanted])
        found = _json(out)
        if not isinstance(found, list):
            return {"error": err or "docker inspect printed no JSON", "deployments": {}}
        inspected = {str(raw.get("Id")): raw for raw in found}
    by_name: dict[str, dict[str, Any]] = {}
    if candidates:
        # One at a time: a name that matches no container fails the whole inspect.
        for candidate in candidates:
            found = _json(run([*docker, "inspect", candidate])[1])
            if isinstance(found, list) and found and isinstance(found[0], dict):
                by_name[candidate] = found[0]
    chosen: dict[str, dict[str, Any]] = {}
    result: dict[str, Any] = {"error": None, "deployments": {}}
    for spec in request["deployments"]:
        name = spec["name"]
        plain = set(spec.get("plain_env") or ())
        raws = [inspected[c] for c in ids[name] if c in inspected]
        raw = pick_container(raws)
        facts = [container_facts(r, plain) for r in raws]
        entry: dict[str, Any] = {"container": None, "others": max(0, len(raws) - 1),
                                 "containers": facts}
        if raw is not None:
            # The chosen one is one of them, read once.
            entry["container"] = chosen[name] = facts[raws.index(raw)]
        if spec.get("candidate") in by_name:
            entry["candidate"] = container_facts(by_name[spec["candidate"]], set())
        result["deployments"][name] = entry
    if not chosen or not request.get("container_extras", True):
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
    if request.get("lock_dir"):
        # The node lock's owner and state lines, as the lock command wrote them.
        answer["lock"] = "".join(read_text(base + "/" + request["lock_dir"] + "/" + part)
                                 for part in ("owner", "state")) or None
    try:
        for spec in request["deployments"]:
            folder = base + "/" + spec["name"]
            entry = read_release(folder, request.get("env_file", "engine.env"),
                                 request.get("manifest_file", "manifest.json"),
                                 str(request.get("observe_key") or ""))
            answer["deployments"][spec["name"]] = entry
            files = (entry["manifest"] or {}).get("compose_files")
            if request.get("compose") and entry["current"] and isinstance(files, list):
                service = compose_service(
                    list(request["compose"]), folder + "/releases/" + entry["current"],
                    PROJECT_PREFIX + spec["name"], [str(f) for f in files],
                    request.get("env_file", "engine.env"), spec.get("secret_env") or ())
                entry["compose_service"] = service
                # What the compose files set is not secret: the profile's secrets are
                # already left out of the service's environment, and their values stay hashed.
                spec["plain_env"] = sorted(set(spec.get("plain_env") or ())
                                           | set(service.get("environment") or ()))
        if request.get("docker_checks", True):
            try:
                docker = collect_docker(request, {
                    name for name, entry in answer["deployments"].items()
                    if entry["current"] is None})
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
    from servefleet.core.envdigest import hashed_env_text, keyed_value_digests
except ImportError:
    pass  # on the node: the appended source defines it

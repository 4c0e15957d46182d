"""Drift collector that runs on a node and prints one JSON object: everything the nightly
drift check compares, read in one round trip.

servefleet sends it on the stdin of a small bootstrap (``python3 -S -c …``, see
:data:`servefleet.adapters.drift_collect.BOOTSTRAP`), which keeps it as a module in the SSH
user's ``~/.cache/servefleet`` so it is compiled once, followed by the request (and the GPU
probe's source) as Python literals and a call of :func:`main`. It is sent as one program,
the parts joined in the order of ``COLLECTOR_PARTS`` (:mod:`servefleet.adapters.node_script`):
this module (start-up cost, pure helpers), :mod:`.collector_children` (child processes) and
:mod:`.collector_script` (the reads and :func:`main`). It must stay self-contained: standard
library only, no servefleet imports (but the later parts' imports of earlier ones, which stay
on this machine), syntax that Python 3.7 still accepts. Nothing it
prints contains a secret value: container environment values are hashed here, on the node,
and only variables the control machine named as non-secret are sent in clear.

It reads, per deployment of the request:

- ``<base>/<deployment>/current`` and every file of that release, hashed (``engine.env`` in
  its published form, names only, by :func:`servefleet.core.envdigest.hashed_env_text`, whose
  source is appended to this one when it is sent), the release's manifest, and the digests
  of the ``engine.env`` values (compared on the control machine, never written);
- when asked (drift), the engine service as ``docker compose config`` merges the current
  release: Compose's own answer for image, command, environment and labels, with env
  files left unresolved (:func:`compose_service_facts`);
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

MYPY = False
if MYPY:  # for the type checker only: importing typing costs ~10 ms per run
    from typing import Any


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


def _json(data: bytes) -> Any:
    try:
        return json_loads(data.decode("utf-8") or "null")
    except ValueError:
        return None


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


def _env_value(value: Any) -> str:
    # Compose prints a variable set without a value (``- NAME``) as null.
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def compose_service_facts(config: Any, service: str, hidden: set[str]) -> dict[str, Any]:
    """The fields drift compares of ``service`` in ``docker compose config --format json``'s
    answer (the release's compose files merged, interpolated, ``!reset``/``!override``
    applied: Compose's own truth): ``image``, ``command``, ``environment`` and ``labels``.
    Names in ``hidden`` (the profile's secrets, and those an env file set where Compose
    resolved env files into the environment) are left out: their values may be secrets,
    compared by digest instead."""
    spec = ((config if isinstance(config, dict) else {}).get("services") or {}).get(service)
    if not isinstance(spec, dict):
        return {"error": "docker compose config names no service " + repr(service)}
    command = spec.get("command")
    return {
        "image": spec.get("image"),
        "command": [str(a) for a in command] if isinstance(command, list) else None,
        "environment": {str(k): _env_value(v) for k, v in
                        (spec.get("environment") or {}).items() if k not in hidden},
        "labels": {str(k): _env_value(v) for k, v in (spec.get("labels") or {}).items()},
    }


"""``docker inspect`` JSON of a container (and ``docker image inspect`` of its image) read
into a :class:`~servefleet.core.adopt.running.RunningEngine`.

The documents are those the Docker CLI prints (one object of the array each): ``Name``,
``Id``, ``Path``, ``Args``, ``State.Status``, ``Config.{Image,Env,Labels}``,
``HostConfig.{NetworkMode,PortBindings,DeviceRequests,RestartPolicy}``, ``Mounts``; of the
image, ``Id``, ``RepoDigests``, ``Config.{Env,Labels}``. Anything missing reads as unknown.

Secret values are dropped here too: a variable whose name looks secret (or is listed)
keeps only its name, and the value of a flag whose name looks secret, or any argument
holding a secret variable's value, is replaced by :data:`SECRET_VALUE`. The import reads a
node through a template that does the same on the node (:mod:`servefleet.adapters.importer`),
so there a secret variable comes as its name alone and a masked argument as
:data:`SECRET_VALUE`, which is read as masked.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from servefleet.core.adopt.entrypoint import recognise
from servefleet.core.adopt.running import Mount, RunningEngine
from servefleet.core.models.profile import version_tuple

SECRET_VALUE = "<secret: not read>"
"""What stands in an argv for a secret value."""
SECRET_NAME_RE = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
"""Variable names whose values are secrets (any name containing one of the words)."""
SECRET_FLAG_RE = re.compile(r"(^|-)(token|key|secret|password|passwd|credentials?)(-|$)")
"""Flag names whose values are secrets, word by word (``--api-key``, ``--hf-token``, not
``--max-num-batched-tokens``)."""
COMPOSE = "com.docker.compose."
PROFILE_LABEL = "io.servefleet.profile"

# A simulated node's container carries the facts of the node and of the version it stands
# for in these variables (servefleet/sim/compose-override.yaml.j2); they are not the
# operator's. STANDIN_ENGINE_VERSION is the engine version of the profile it runs.
SIM_ENV_PREFIXES = ("STANDIN_", "SIM_")
SIM_VERSION_ENV = "STANDIN_ENGINE_VERSION"


def is_secret_name(name: str, listed: Collection[str] = ()) -> bool:
    """Whether a variable or flag called ``name`` holds a secret."""
    return name in listed or bool(SECRET_NAME_RE.search(name))


def is_secret_flag(flag: str) -> bool:
    """Whether the value of ``flag`` (``--api-key``) is a secret."""
    return bool(SECRET_FLAG_RE.search(flag.lstrip("-").lower().replace("_", "-")))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _env_pairs(items: Any) -> list[tuple[str, str]]:
    pairs = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, str):
            name, _, value = item.partition("=")
            pairs.append((name, value))
    return pairs


def _mask_argv(argv: Sequence[str], secret_values: Collection[str]) -> tuple[list[str], list[str]]:
    """``argv`` with secret values replaced, and the flags whose values were."""
    out: list[str] = []
    masked: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(SECRET_VALUE)
            hide_next = False
            continue
        if arg == SECRET_VALUE or any(value and value in arg for value in secret_values):
            out.append(SECRET_VALUE)
            masked.append(out[-2] if len(out) > 1 and out[-2].startswith("-") else "argument")
            continue
        flag, sep, _ = arg.partition("=")
        if flag.startswith("-") and is_secret_flag(flag):
            masked.append(flag)
            if sep:
                out.append(f"{flag}={SECRET_VALUE}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out, masked


def repository(ref: str) -> str:
    """``registry/repo:tag@sha256:…`` → ``registry/repo`` (a registry port kept)."""
    ref = ref.split("@", 1)[0]
    head, _, last = ref.rpartition("/")
    name = last.split(":", 1)[0]
    return f"{head}/{name}" if head else name


def _normal_repo(repo: str) -> str:
    for prefix in ("docker.io/library/", "docker.io/", "library/"):
        if repo.startswith(prefix):
            return repo[len(prefix):]
    return repo


def repo_digest(ref: str, image: Mapping[str, Any] | None) -> str | None:
    """The digest of ``ref``'s repository among the image's RepoDigests (or in ``ref``)."""
    if "@sha256:" in ref:
        return ref.split("@", 1)[1]
    wanted = _normal_repo(repository(ref))
    for entry in (image or {}).get("RepoDigests") or []:
        repo, _, digest = str(entry).partition("@")
        if _normal_repo(repo) == wanted and digest.startswith("sha256:"):
            return digest
    return None


def version_from_image(ref: str, image: Mapping[str, Any] | None,
                       engine: str | None = "vllm") -> str | None:
    """The engine version an image reference's tag (``v0.21.0``, ``server-cuda-b8680``)
    states, else (vLLM only) its ``org.opencontainers.image.version`` label, else ``None``.
    llama.cpp's images carry the base OS's label (``22.04``): only a build number counts."""
    tag = ref.split("@", 1)[0].rpartition("/")[2].partition(":")[2]
    build = re.search(r"(?:^|-)(b\d+)$", tag)
    if build:
        return build.group(1)
    if engine == "llama.cpp":
        return None
    if re.match(r"^v?\d+\.\d+(\.\d+)?([.+-]?[A-Za-z0-9.]+)?$", tag) and version_tuple(tag):
        return tag.removeprefix("v")
    label = _dict(_dict((image or {}).get("Config")).get("Labels")).get(
        "org.opencontainers.image.version")
    if isinstance(label, str) and version_tuple(label):
        return label.removeprefix("v")
    return None


def _gpus(host: Mapping[str, Any]) -> tuple[int | None, tuple[str, ...]]:
    count: int | None = 0
    ids: list[str] = []
    for request in host.get("DeviceRequests") or []:
        caps = [c for group in request.get("Capabilities") or [] for c in group or []]
        if "gpu" not in caps and request.get("Driver") != "nvidia":
            continue
        ids += [str(i) for i in request.get("DeviceIDs") or []]
        wanted = request.get("Count")
        if wanted == -1:
            count = -1
        elif isinstance(wanted, int) and count != -1:
            count = (count or 0) + wanted
    if ids and not count:
        count = len(ids)
    return count, tuple(ids)


def _published(host: Mapping[str, Any]) -> dict[int, int]:
    ports: dict[int, int] = {}
    for key, bindings in _dict(host.get("PortBindings")).items():
        port, _, proto = str(key).partition("/")
        if proto not in ("", "tcp") or not port.isdigit():
            continue
        for binding in bindings or []:
            host_port = str(_dict(binding).get("HostPort") or "")
            if host_port.isdigit():
                ports[int(port)] = int(host_port)
    return ports


def _restart(host: Mapping[str, Any]) -> str:
    policy = _dict(host.get("RestartPolicy"))
    name = str(policy.get("Name") or "no")
    retries = policy.get("MaximumRetryCount") or 0
    return f"{name}:{retries}" if name == "on-failure" and retries else name


def running_engine(container: Mapping[str, Any], image: Mapping[str, Any] | None = None, *,
                   secret_names: Collection[str] = (),
                   sim_env: Collection[str] = ()) -> RunningEngine:
    """Read one container's ``docker inspect`` object (and its image's).

    ``secret_names``: variables to treat as secret whatever their name (the stack's secrets).
    ``sim_env``: variables a simulated node's engine sets for itself, left out of the env of
    a simulated container only.
    """
    config = _dict(container.get("Config"))
    host = _dict(container.get("HostConfig"))
    labels = {str(k): str(v) for k, v in _dict(config.get("Labels")).items()}
    image_env = set(_env_pairs(_dict(_dict(image).get("Config")).get("Env")))
    env: dict[str, str] = {}
    secrets: list[str] = []
    secret_values: list[str] = []
    for name, value in _env_pairs(config.get("Env")):
        if is_secret_name(name, secret_names):
            secrets.append(name)
            secret_values.append(value)
        elif (name, value) not in image_env:
            env[name] = value
    path = str(container.get("Path") or "")
    found = recognise([*([path] if path else []), *(str(a) for a in container.get("Args") or [])])
    argv, masked = _mask_argv(found.argv, [v for v in secret_values if len(v) >= 4])
    del secret_values  # the values go no further than masking
    notes = [f"the value of {flag} is a secret: it was not read" for flag in masked]
    ref = str(config.get("Image") or "")
    version = version_from_image(ref, image, found.engine)
    if found.simulated:
        version = env.get(SIM_VERSION_ENV) or None
        env = {k: v for k, v in env.items()
               if not k.startswith(SIM_ENV_PREFIXES) and k not in sim_env}
    mounts = tuple(
        Mount(source=str(m.get("Source") or m.get("Name") or ""),
              target=str(m.get("Destination") or ""), read_only=not m.get("RW", True))
        for m in container.get("Mounts") or [] if isinstance(m, dict))
    count, ids = _gpus(host)
    files = labels.get(COMPOSE + "project.config_files", "")
    return RunningEngine(
        container=str(container.get("Name") or "").lstrip("/"),
        container_id=str(container.get("Id") or ""),
        engine=found.engine, argv=tuple(argv), other_engine=found.other_engine,
        state=str(_dict(container.get("State")).get("Status") or "unknown"),
        image=ref, image_digest=None if found.simulated else repo_digest(ref, image),
        engine_version=version, simulated=found.simulated, env=env,
        secret_env=tuple(secrets), mounts=mounts,
        host_network=host.get("NetworkMode") == "host", published_ports=_published(host),
        gpu_count=count, gpu_ids=ids, restart_policy=_restart(host),
        compose_project=labels.get(COMPOSE + "project"),
        compose_service=labels.get(COMPOSE + "service"),
        compose_dir=labels.get(COMPOSE + "project.working_dir"),
        compose_files=tuple(f for f in files.split(",") if f),
        servefleet_profile=labels.get(PROFILE_LABEL), notes=tuple(notes))


def running_engines(containers: Sequence[Mapping[str, Any]],
                    images: Sequence[Mapping[str, Any]], *,
                    secret_names: Collection[str] = (),
                    sim_env: Collection[str] = ()) -> list[RunningEngine]:
    """Every container of ``docker inspect`` that runs an inference engine (servefleet's
    or another), with its image from ``docker image inspect`` (matched by id), by name."""
    by_id = {str(i.get("Id")): i for i in images if isinstance(i, dict)}
    found = [running_engine(c, by_id.get(str(c.get("Image"))), secret_names=secret_names,
                            sim_env=sim_env)
             for c in containers if isinstance(c, dict)]
    return sorted((e for e in found if e.engine or e.other_engine), key=lambda e: e.container)

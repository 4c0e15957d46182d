"""Render one deployment into the files of a release, and name the release by their hash.

A release is the folder a node runs a deployment from: ``compose.yaml`` (plus the node's
override files), ``.env`` (compose interpolation variables), ``engine.env`` (secrets, mode
0600), and when the profile builds an overlay image a ``Dockerfile``, ``patches/`` and
``patches.json``. Everything is rendered in memory; writing it anywhere is the caller's job.

The release id is a short sha256 over the rendered files (path, mode and content) rendered
with an empty id, then the files are rendered again with the id in them (labels, ``.env``,
the overlay image tag). ``engine.env`` enters the id, the manifest and every published hash
in the form :func:`servefleet.core.envdigest.hashed_env_text` makes: secret names, never
anything computed from a value. Identical inputs give byte-identical files and the same id,
and no secret reaches anything but ``engine.env``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import jinja2

from servefleet.core.envdigest import hashed_env_text
from servefleet.core.errors import RenderError
from servefleet.core.models import Deployment, Node, PatchOverlay, Profile
from servefleet.core.project import PROFILES_DIR, SECRET_KEYS, Project, profile_identity
from servefleet.core.readfile import FileRefused, read_regular_file
from servefleet.core.render.engine_args import engine_command
from servefleet.core.render.templating import (
    TEMPLATE_FILES,
    env_value,
    render_override,
    template_environment,
)

COMPOSE_FILE = "compose.yaml"
"""The rendered compose file; always the first ``-f``."""
OVERRIDE_FILE = "compose.override.{n}.yaml"
"""Node-local overrides, numbered from 1 in inventory order."""
DOCKERFILE = "Dockerfile"
"""The overlay image's Dockerfile (only when the profile builds an image)."""
PATCH_MARKER = "patches.json"
"""What the overlay carries; copied to :data:`IMAGE_PATCH_MARKER` in the image."""
IMAGE_PATCH_MARKER = "/etc/servefleet/patches.json"
"""Where a running overlay container proves which patches it has."""
PATCHES_DIR = "patches"
"""Folder of the patch files inside a release."""
DOTENV_FILE = ".env"
"""Compose interpolation variables (non-secret)."""
ENV_FILE = "engine.env"
"""The engine's secret environment, referenced from compose by ``env_file``."""

FILE_MODE = 0o644
SECRET_FILE_MODE = 0o600
RELEASE_ID_LENGTH = 12
MAX_PATCH_BYTES = 16 * 1024 * 1024
MAX_OVERRIDE_BYTES = 1024 * 1024

HF_CACHE_TARGET = "/root/.cache/huggingface"
"""The official images run as root and look for the Hugging Face cache here."""
MODELS_TARGET = "/models"
"""Where a node's ``models_dir`` appears inside the container (read-only)."""
LOG_MAX_SIZE = "100m"
LOG_MAX_FILE = "5"
HEALTH_INTERVAL = "15s"
HEALTH_TIMEOUT = "10s"
HEALTH_RETRIES = 3
STOP_GRACE_PERIOD = "60s"
LABEL_PREFIX = "io.servefleet."

_PROJECT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_PACKAGE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SLUG_RE = re.compile(r"[^a-z0-9]+")


class RenderFieldError(RenderError):
    """A render refusal caused by one field of one file: ``validate`` reports it as a
    finding with that file and field before any render is attempted for real."""

    def __init__(self, where: str, file: str, field: str, reason: str, fix: str) -> None:
        self.file = file
        self.field = field
        self.reason = reason
        self.fix = fix
        super().__init__(f"{where}: {file}: {field}: {reason}; {fix}")


@dataclass(frozen=True)
class RenderedRelease:
    """The files of one deployment's release, in memory, and what identifies them.

    ``files`` holds the real ``engine.env`` (secret values, when given): it is left out of
    ``repr`` and must only ever be written to the node with its mode. Everything else here
    is safe to print.
    """

    node: str
    """Node the release is for."""
    deployment: str
    """Deployment name (also the compose project name)."""
    profile: str
    """Profile rendered."""
    profile_identity: str
    """sha256 of the resolved profile (:func:`servefleet.core.project.profile_identity`)."""
    release_id: str
    """12 hex digits of sha256 over the files rendered with an empty id."""
    port: int
    """Port the engine listens on."""
    engine: str
    """``vllm`` or ``llama.cpp``."""
    engine_version: str
    """Engine version the profile pins."""
    base_image: str
    """Pinned base image ``ref@sha256:…``."""
    image: str
    """What the container runs: ``base_image``, or the overlay tag when ``builds_image``."""
    builds_image: bool
    """Whether the release builds an overlay image (``docker compose build`` first)."""
    engine_argv: tuple[str, ...]
    """Arguments after the image's ENTRYPOINT (the compose ``command:``)."""
    compose_files: tuple[str, ...]
    """Compose files in ``-f`` order: ``compose.yaml`` then the node's overrides."""
    files: dict[str, bytes] = field(repr=False)
    """Relative path → content. ``engine.env`` holds secret values when rendered with them."""
    modes: dict[str, int]
    """Relative path → file mode (``engine.env`` 0o600, everything else 0o644)."""
    file_hashes: dict[str, str]
    """Relative path → sha256 hex. For ``engine.env`` the hash is over its published form
    (:func:`servefleet.core.envdigest.hashed_env_text`: names only), so it can be shown."""
    secret_names: tuple[str, ...]
    """Secret variables the engine gets from ``engine.env`` (names only)."""
    secrets_rendered: bool
    """False when some secret was written as an empty placeholder (preview renders)."""

    @property
    def key(self) -> str:
        """``node/deployment``."""
        return f"{self.node}/{self.deployment}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _slug(value: str) -> str:
    """Lower-case letters and digits joined by single dashes (safe in image names)."""
    return _SLUG_RE.sub("-", value.lower()).strip("-")


def overlay_image_name(node: str, deployment: str, release_id: str) -> str:
    """Tag of a locally built overlay image: ``servefleet/<node>-<deployment>:<release id>``."""
    return f"servefleet/{_slug(node)}-{_slug(deployment)}:{release_id}"


def release_id_of(files: Mapping[str, bytes], modes: Mapping[str, int]) -> str:
    """Short sha256 over ``path``, mode and content hash of every file, in path order.

    ``engine.env`` must already be in its secret-hashed form.
    """
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path}\0{modes[path]:o}\0{_sha256(files[path])}\n".encode())
    return digest.hexdigest()[:RELEASE_ID_LENGTH]


@dataclass(frozen=True)
class _PatchFile:
    """One patch as it lands in the release (and in the Dockerfile)."""

    release_path: str
    overlay: PatchOverlay
    content: bytes | None  # None for URL patches, fetched at build time


def _declaring_file(project: Project, profile: Profile, key: str) -> str:
    """The profile file that sets ``key``, following ``extends`` (for error messages)."""
    name: str | None = profile.name
    seen: set[str] = set()
    while name is not None and name not in seen and name in project.raw_profiles:
        seen.add(name)
        if key in project.raw_profiles[name]:
            return project.profile_files.get(name, f"{PROFILES_DIR}/{name}.yaml")
        parent = project.raw_profiles[name].get("extends")
        name = parent if isinstance(parent, str) else None
    return project.profile_files.get(profile.name, f"{PROFILES_DIR}/{profile.name}.yaml")


def _patch_files(project: Project, profile: Profile, where: str) -> list[_PatchFile]:
    profile_file = _declaring_file(project, profile, "patches")
    profiles_dir = (project.root / PROFILES_DIR).resolve()
    result: list[_PatchFile] = []
    for number, overlay in enumerate(profile.patches, start=1):
        field = f"patches[{number - 1}]"
        if not _PACKAGE_RE.match(overlay.target):
            raise RenderFieldError(where, profile_file, f"{field}.target",
                                   f"{overlay.target!r} is not an importable package name",
                                   "name the installed Python package, e.g. vllm")
        if overlay.file is not None:
            stem = PurePosixPath(overlay.file).name
            for suffix in (".diff", ".patch"):
                stem = stem.removesuffix(suffix)
        else:
            stem = f"pr{overlay.pr}" if overlay.pr else "url"
        release_path = f"{PATCHES_DIR}/{number:02d}-{_slug(stem) or 'patch'}.diff"
        content: bytes | None = None
        if overlay.file is not None:
            content = _patch_content(profiles_dir, overlay, f"{where}: profile {profile.name}",
                                     profile_file, field)
        result.append(_PatchFile(release_path=release_path, overlay=overlay, content=content))
    return result


def _patch_content(profiles_dir: Path, overlay: PatchOverlay, where: str, profile_file: str,
                   field: str) -> bytes:
    """The patch file's bytes, checked: inside ``profiles/`` with no symlink anywhere on the
    way (a symlinked patch could change under the pinned sha256's nose or lead out), a
    regular file, bounded, and matching the pinned sha256."""
    assert overlay.file is not None
    shown = f"{PROFILES_DIR}/{overlay.file}"
    source = profiles_dir / overlay.file
    if _has_symlink(profiles_dir, source):
        raise RenderFieldError(where, profile_file, f"{field}.file",
                               f"{shown} is (or passes through) a symbolic link",
                               "put the diff itself under profiles/")
    if not source.resolve().is_relative_to(profiles_dir):
        raise RenderFieldError(where, profile_file, f"{field}.file",
                               f"{shown} is outside {PROFILES_DIR}/",
                               "put the diff under profiles/")
    if not source.exists():
        raise RenderFieldError(where, profile_file, f"{field}.file",
                               f"patch file {shown} does not exist",
                               "add the file or fix the path")
    try:
        content = read_regular_file(source, MAX_PATCH_BYTES)
    except FileRefused as error:
        raise RenderFieldError(where, profile_file, f"{field}.file", f"{shown}: {error}",
                               "point it at the diff file") from None
    actual = _sha256(content)
    if actual != overlay.sha256:
        raise RenderFieldError(
            where, profile_file, f"{field}.sha256",
            f"patch file {shown} has sha256 {actual} but the profile pins {overlay.sha256}",
            f"if the new diff is intended, set {field}.sha256 to {actual}, otherwise restore "
            "the file")
    return content


def _has_symlink(root: Path, path: Path) -> bool:
    """Whether ``path`` or any folder between ``root`` and it is a symbolic link."""
    current = path
    while current != root and current != current.parent:
        if current.is_symlink():
            return True
        current = current.parent
    return False


def _secret_hint(name: str) -> str:
    for key, env in SECRET_KEYS.items():
        if env == name:
            return f"pulumi config set --secret servefleet:{key} …"
    return f"pulumi config set --secret servefleet:secretEnv.{name} …"


def _secret_values(profile: Profile, secrets: Mapping[str, str] | None, require: bool,
                   where: str) -> tuple[list[tuple[str, str | None]], bool]:
    """``(name, value or None)`` for each secret the profile names; never shows a value."""
    entries: list[tuple[str, str | None]] = []
    complete = True
    missing: list[str] = []
    for name in profile.secret_env:
        value = None if secrets is None else secrets.get(name)
        if value is None:
            missing.append(name)
            complete = False
        else:
            try:
                env_value(value)
            except ValueError as error:
                raise RenderError(f"{where}: secret {name}: {error}") from None
        entries.append((name, value))
    if missing and require:
        hints = "; ".join(f"{n}: {_secret_hint(n)}" for n in missing)
        raise RenderError(f"{where}: profile {profile.name} needs secret "
                          f"{', '.join(missing)} but no value was given ({hints})")
    return entries, complete


def _override_sources(project: Project, node: Node,
                      where: str) -> list[tuple[str, str, bytes]]:
    """``(entry, file name, content)`` of each node-local override: inside the project, no
    symlink on the way, a regular file, bounded. Everything else is refused, because the
    content is copied into the release (0644) and shipped to the node."""
    node_file = project.node_files.get(node.name, f"nodes/{node.name}.yaml")
    root = project.root.resolve()
    sources: list[tuple[str, str, bytes]] = []
    for index, entry in enumerate(node.compose_overrides):
        field = f"compose_overrides[{index}]"
        relative = PurePosixPath(entry)
        if relative.is_absolute() or ".." in relative.parts or entry.startswith("~"):
            raise RenderFieldError(where, node_file, field,
                                   f"{entry!r} is not a path inside the project folder",
                                   "move the file into the project and give its relative path")
        path = root / entry
        if _has_symlink(root, path):
            target = path.resolve()
            reason = ("points outside the project folder" if not target.is_relative_to(root)
                      else "is (or passes through) a symbolic link")
            raise RenderFieldError(where, node_file, field, f"{entry!r} {reason}",
                                   "put the override file itself in the project")
        if not path.exists():
            raise RenderFieldError(where, node_file, field, f"{entry!r} does not exist",
                                   "create the file or fix the path")
        try:
            content = read_regular_file(path, MAX_OVERRIDE_BYTES)
        except FileRefused as error:
            raise RenderFieldError(where, node_file, field, f"{entry!r}: {error}",
                                   "point it at a compose override file") from None
        sources.append((entry, path.name, content))
    return sources


def _healthcheck(profile: Profile, port: int) -> list[str]:
    """Exec-form test: python3 in vLLM images (no curl guaranteed), curl in llama.cpp's."""
    if profile.engine == "vllm":
        url = f"http://127.0.0.1:{port}/health"
        code = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"
        return ["CMD", "python3", "-c", code]
    assert profile.llamacpp is not None
    host = profile.llamacpp.host.split(",")[0]
    if host in ("0.0.0.0", "::", "") or host.endswith(".sock"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return ["CMD", "curl", "-fsS", "-o", "/dev/null", f"http://{host}:{port}/health"]


def _labels(node: Node, deployment: str, profile: Profile, identity: str,
            release_id: str) -> dict[str, str]:
    labels = {
        f"{LABEL_PREFIX}deployment": deployment,
        f"{LABEL_PREFIX}engine": profile.engine,
        f"{LABEL_PREFIX}engine-version": profile.engine_version,
        f"{LABEL_PREFIX}node": node.name,
        f"{LABEL_PREFIX}profile": profile.name,
        f"{LABEL_PREFIX}profile-identity": identity,
        f"{LABEL_PREFIX}release": release_id,
    }
    for key, value in node.labels.items():
        labels[f"{LABEL_PREFIX}node-label.{key}"] = value
    return dict(sorted(labels.items()))


@dataclass(frozen=True)
class RankExtras:
    """What one rank of an engine spanning nodes adds to a release
    (:mod:`servefleet.core.render.ranks` fills it)."""

    argv: tuple[str, ...]
    """Arguments appended to the engine command (``--nnodes``, ``--node-rank``…)."""
    environment: dict[str, str]
    """Variables added to the container's environment (``VLLM_HOST_IP``, ``NCCL_*``…)."""
    devices: tuple[str, ...] = ()
    """Host devices passed in (``/dev/infiniband``)."""
    cap_add: tuple[str, ...] = ()
    """Capabilities added (``IPC_LOCK`` for RDMA memory registration)."""
    labels: dict[str, str] = field(default_factory=dict)
    """Labels added (rank, nodes)."""
    serves_api: bool = True
    """False for a headless rank: no API, so no HTTP healthcheck."""


@dataclass(frozen=True)
class _Inputs:
    """Everything the templates need, gathered and checked once per render."""

    node: Node
    deployment: str
    profile: Profile
    identity: str
    port: int
    argv: list[str]
    patches: list[_PatchFile]
    secrets: list[tuple[str, str | None]]
    overrides: list[tuple[str, str, bytes]]
    node_file: str
    templates: jinja2.Environment
    where: str
    rank: RankExtras | None = None
    secrets_complete: bool = True


def _render_files(inputs: _Inputs, release_id: str) -> dict[str, bytes]:
    """All files of the release with ``release_id`` in them."""
    profile, node, port = inputs.profile, inputs.node, inputs.port
    base_image = profile.image.pinned
    builds = profile.builds_image
    image = overlay_image_name(node.name, inputs.deployment, release_id) if builds else base_image
    compose_files = [COMPOSE_FILE] + [OVERRIDE_FILE.format(n=i + 1)
                                      for i in range(len(inputs.overrides))]

    volumes = [{"source": node.hf_cache, "target": HF_CACHE_TARGET, "read_only": False,
                "create": True}]
    if node.models_dir is not None:
        # Not created when missing: a node without its model files should fail loudly.
        volumes.append({"source": node.models_dir, "target": MODELS_TARGET, "read_only": True,
                        "create": False})
    tensor_parallel = profile.vllm.tensor_parallel_size if profile.vllm else None
    common: dict[str, Any] = {
        "profile_name": profile.name,
        "node_name": node.name,
        "deployment": inputs.deployment,
        "release_id": release_id,
        "engine": profile.engine,
        "engine_version": profile.engine_version,
        "port": port,
        "compose_files": compose_files,
        "base_image": base_image,
    }
    compose_context = {
        **common,
        # servefleet-<deployment>, as adapters.remote.compose_project names it: an
        # operator's own compose project called after the deployment is never touched.
        "project_name": f"servefleet-{inputs.deployment}",
        "image": image,
        "build": {"base_image": base_image} if builds else None,
        "command": inputs.argv,
        "shm_size": profile.shm_size,
        "gpu_count": tensor_parallel if tensor_parallel else "all",
        "volumes": volumes,
        "environment": dict(sorted({**profile.env,
                                    **(inputs.rank.environment if inputs.rank else {})}.items())),
        "devices": list(inputs.rank.devices) if inputs.rank else [],
        "cap_add": list(inputs.rank.cap_add) if inputs.rank else [],
        "healthcheck": {
            # A headless rank has no API to ask; Docker's NONE turns the check off.
            "test": _healthcheck(profile, port) if inputs.rank is None or
            inputs.rank.serves_api else ["NONE"],
            "interval": HEALTH_INTERVAL,
            "timeout": HEALTH_TIMEOUT,
            "retries": HEALTH_RETRIES,
            "start_period": f"{profile.health.boot_deadline_seconds}s",
        },
        "stop_grace_period": STOP_GRACE_PERIOD,
        "log_max_size": LOG_MAX_SIZE,
        "log_max_file": LOG_MAX_FILE,
        "labels": dict(sorted({**_labels(node, inputs.deployment, profile, inputs.identity,
                                          release_id),
                               **(inputs.rank.labels if inputs.rank else {})}.items())),
    }
    env = inputs.templates
    files: dict[str, bytes] = {}

    def render(template: str, context: Mapping[str, Any]) -> bytes:
        try:
            return env.get_template(template).render(context).encode("utf-8")
        except jinja2.TemplateError as error:
            raise RenderError(f"{inputs.where}: template {template}: {error}") from None

    files[COMPOSE_FILE] = render(TEMPLATE_FILES["compose"], compose_context)
    override_vars = {
        "engine": profile.engine,
        "engine_version": profile.engine_version,
        "builds_image": builds,
        "deployment": inputs.deployment,
        "port": port,
        "node_name": node.name,
    }
    for number, (entry, name, content) in enumerate(inputs.overrides, start=1):
        try:
            files[OVERRIDE_FILE.format(n=number)] = render_override(
                Path(name), override_vars, f"compose override {entry}", content)
        except RenderError as error:
            raise RenderFieldError(
                inputs.where, inputs.node_file, f"compose_overrides[{number - 1}]", str(error),
                "fix the override template: it may use only engine, engine_version, "
                "builds_image, deployment, port and node_name, and no attributes of them"
            ) from None

    if builds:
        patch_context = [
            {
                "path": f"/tmp/servefleet-patches/{PurePosixPath(p.release_path).name}",
                "url": p.overlay.url,
                "sha256": p.overlay.sha256,
                "target": p.overlay.target,
                "include": f"{p.overlay.target}/*",
                "strip": p.overlay.strip,
            }
            for p in inputs.patches
        ]
        targets = list(dict.fromkeys(p.overlay.target for p in inputs.patches))
        files[DOCKERFILE] = render(TEMPLATE_FILES["dockerfile"], {
            **common,
            "patches": patch_context,
            "has_patch_files": any(p.content is not None for p in inputs.patches),
            "patch_targets": targets,
            "pip_packages": list(profile.pip_packages),
        })
        for patch in inputs.patches:
            if patch.content is not None:  # URL patches are fetched at build time
                files[patch.release_path] = patch.content
        files[PATCH_MARKER] = _patch_marker(profile, inputs.patches)

    files[DOTENV_FILE] = render(TEMPLATE_FILES["dotenv"], common)
    entries = [{"name": name, "value": value} for name, value in inputs.secrets]
    files[ENV_FILE] = render(TEMPLATE_FILES["env"], {**common, "entries": entries})
    return dict(sorted(files.items()))


def _patch_marker(profile: Profile, patches: list[_PatchFile]) -> bytes:
    marker = {
        "base_image": profile.image.pinned,
        "patches": [
            {
                "file": p.release_path,
                "source": p.overlay.url or f"{PROFILES_DIR}/{p.overlay.file}",
                "sha256": p.overlay.sha256,
                "target": p.overlay.target,
                "strip": p.overlay.strip,
                "pr": p.overlay.pr,
                "provides": list(p.overlay.provides),
            }
            for p in patches
        ],
        "pip_packages": list(profile.pip_packages),
    }
    return (json.dumps(marker, indent=2, sort_keys=True) + "\n").encode()


def _shown(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """The files with ``engine.env`` in its secret-hashed form (safe to hash and show)."""
    return {path: hashed_env_text(content) if path == ENV_FILE else content
            for path, content in files.items()}


def _modes(files: Mapping[str, bytes]) -> dict[str, int]:
    return {path: SECRET_FILE_MODE if path == ENV_FILE else FILE_MODE for path in files}


def render_release(
    project: Project,
    deployment: Deployment,
    secrets: Mapping[str, str] | None = None,
    *,
    require_secrets: bool = True,
    templates_dir: Path | None = None,
) -> RenderedRelease:
    """Render ``deployment``'s release from ``project``, entirely in memory.

    ``secrets`` maps variable names to values; only the profile's ``secret_env`` names are
    used. With ``require_secrets`` a missing one is a :class:`RenderError` naming it;
    without, it is written as an empty ``NAME=`` placeholder (for previews) and
    ``secrets_rendered`` is False. ``templates_dir`` defaults to the project's
    ``templates/`` (see :func:`servefleet.core.render.templating.templates_dir_for`).
    """
    inputs = prepare_inputs(project, deployment, secrets, require_secrets=require_secrets,
                            templates_dir=templates_dir)
    draft = draft_files(inputs)
    return assemble_release(inputs, release_id_of(draft, _modes(draft)))


def prepare_inputs(
    project: Project,
    deployment: Deployment,
    secrets: Mapping[str, str] | None = None,
    *,
    require_secrets: bool = True,
    templates_dir: Path | None = None,
    rank: RankExtras | None = None,
) -> _Inputs:
    """Gather and check everything a render of ``deployment`` needs (``rank``: one rank of
    an engine spanning nodes); refusals are :class:`RenderError`."""
    where = deployment.key
    node = project.nodes.get(deployment.node)
    if node is None:
        raise RenderError(f"{where}: no node {deployment.node!r} in the inventory")
    profile = project.profiles.get(deployment.profile)
    if profile is None:
        raise RenderError(f"{where}: no profile {deployment.profile!r}")
    if not _PROJECT_NAME_RE.match(deployment.name):
        raise RenderError(f"{where}: deployment name {deployment.name!r} cannot be a compose "
                          "project name (lower-case letters, digits, '-' and '_' only)")
    for req in profile.pip_packages:
        if "==" not in req:
            raise RenderError(f"{where}: profile {profile.name}: pip package {req!r} is not "
                              "pinned; write it as 'name==version' so the image is reproducible")
    port = project.port_of(deployment)
    secret_entries, secrets_complete = _secret_values(profile, secrets, require_secrets, where)
    argv = engine_command(profile, port) + (list(rank.argv) if rank else [])
    return _Inputs(
        node=node,
        deployment=deployment.name,
        profile=profile,
        identity=profile_identity(profile),
        port=port,
        argv=argv,
        patches=_patch_files(project, profile, where) if profile.builds_image else [],
        secrets=secret_entries,
        overrides=_override_sources(project, node, where),
        node_file=project.node_files.get(node.name, f"nodes/{node.name}.yaml"),
        templates=template_environment(templates_dir, project.root),
        where=where,
        rank=rank,
        secrets_complete=secrets_complete,
    )


def draft_files(inputs: _Inputs) -> dict[str, bytes]:
    """The release's files rendered with an empty id, ``engine.env`` in its published form:
    what the release id is computed over."""
    return _shown(_render_files(inputs, ""))


def assemble_release(inputs: _Inputs, release_id: str) -> RenderedRelease:
    """Render the files with ``release_id`` in them and describe the release."""
    files = _render_files(inputs, release_id)
    profile, node, deployment = inputs.profile, inputs.node, inputs.deployment
    port = inputs.port
    builds = profile.builds_image
    return RenderedRelease(
        node=node.name,
        deployment=deployment,
        profile=profile.name,
        profile_identity=inputs.identity,
        release_id=release_id,
        port=port,
        engine=profile.engine,
        engine_version=profile.engine_version,
        base_image=profile.image.pinned,
        image=overlay_image_name(node.name, deployment, release_id) if builds
        else profile.image.pinned,
        builds_image=builds,
        engine_argv=tuple(inputs.argv),
        compose_files=(COMPOSE_FILE, *(OVERRIDE_FILE.format(n=i + 1)
                                       for i in range(len(inputs.overrides)))),
        files=files,
        modes=_modes(files),
        file_hashes={path: _sha256(content) for path, content in _shown(files).items()},
        secret_names=tuple(profile.secret_env),
        secrets_rendered=inputs.secrets_complete,
    )


def render_deployments(
    project: Project,
    deployments: list[Deployment],
    secrets: Mapping[str, str] | None = None,
    *,
    require_secrets: bool = True,
    templates_dir: Path | None = None,
) -> list[RenderedRelease]:
    """Render several deployments; every problem is collected into one :class:`RenderError`
    (one line each), so nothing is written unless all of them render."""
    releases: list[RenderedRelease] = []
    problems: list[str] = []
    for deployment in deployments:
        try:
            releases.append(render_release(project, deployment, secrets,
                                           require_secrets=require_secrets,
                                           templates_dir=templates_dir))
        except RenderError as error:
            problems.append(str(error))
    if problems:
        raise RenderError("\n".join(problems))
    return releases


def manifest_for(rendered: RenderedRelease, deployment: Deployment, *,
                 created_at: datetime | str, created_by: str) -> dict[str, Any]:
    """The ``manifest.json`` content a deploy adds next to the release files.

    Time and author are not part of the release id: the same inputs deployed twice are the
    same release. Secrets appear by name only.
    """
    if (deployment.node, deployment.name) != (rendered.node, rendered.deployment):
        raise RenderError(f"{deployment.key}: manifest for a release of {rendered.key}")
    when = created_at.isoformat() if isinstance(created_at, datetime) else created_at
    return {
        "schema": 1,
        "release_id": rendered.release_id,
        "node": rendered.node,
        "deployment": rendered.deployment,
        "port": rendered.port,
        "profile": rendered.profile,
        "profile_identity": rendered.profile_identity,
        "engine": rendered.engine,
        "engine_version": rendered.engine_version,
        "base_image": rendered.base_image,
        "image": rendered.image,
        "builds_image": rendered.builds_image,
        "engine_argv": list(rendered.engine_argv),
        "compose_files": list(rendered.compose_files),
        "files": {path: {"sha256": digest, "mode": f"{rendered.modes[path]:04o}"}
                  for path, digest in sorted(rendered.file_hashes.items())},
        "secret_env": list(rendered.secret_names),
        "secrets_rendered": rendered.secrets_rendered,
        "created_at": when,
        "created_by": created_by,
    }

"""Gather and check everything a render needs, before anything is rendered.

The deployment's node and profile, its secrets (by name; values only into ``engine.env``),
the profile's patch files and the node's compose overrides, read from the project with no
symbolic link on the way and bounded in size. Refusals are :class:`RenderError`, or
:class:`RenderFieldError` when one field of one file is to blame.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import jinja2

from servefleet.core.errors import RenderError
from servefleet.core.models import Deployment, Node, PatchOverlay, Profile
from servefleet.core.project import PROFILES_DIR, SECRET_KEYS, Project, profile_identity
from servefleet.core.readfile import FileRefused, read_regular_file
from servefleet.core.render.engine_args import engine_command
from servefleet.core.render.layout import PATCHES_DIR, sha256_hex, slug
from servefleet.core.render.templating import env_value, template_environment

MAX_PATCH_BYTES = 16 * 1024 * 1024
MAX_OVERRIDE_BYTES = 1024 * 1024

_PROJECT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_PACKAGE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
class RenderInputs:
    """Everything the templates need, gathered and checked once per render."""

    node: Node
    deployment: str
    profile: Profile
    identity: str
    port: int
    argv: list[str]
    patches: list[PatchFile]
    secrets: list[tuple[str, str | None]]
    overrides: list[tuple[str, str, bytes]]
    node_file: str
    templates: jinja2.Environment
    where: str
    rank: RankExtras | None = None
    secrets_complete: bool = True


@dataclass(frozen=True)
class PatchFile:
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


def _patch_files(project: Project, profile: Profile, where: str) -> list[PatchFile]:
    profile_file = _declaring_file(project, profile, "patches")
    profiles_dir = (project.root / PROFILES_DIR).resolve()
    result: list[PatchFile] = []
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
        release_path = f"{PATCHES_DIR}/{number:02d}-{slug(stem) or 'patch'}.diff"
        content: bytes | None = None
        if overlay.file is not None:
            content = _patch_content(profiles_dir, overlay, f"{where}: profile {profile.name}",
                                     profile_file, field)
        result.append(PatchFile(release_path=release_path, overlay=overlay, content=content))
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
    actual = sha256_hex(content)
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


def prepare_inputs(
    project: Project,
    deployment: Deployment,
    secrets: Mapping[str, str] | None = None,
    *,
    require_secrets: bool = True,
    templates_dir: Path | None = None,
    rank: RankExtras | None = None,
) -> RenderInputs:
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
    return RenderInputs(
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

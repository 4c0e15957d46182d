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

The inputs are gathered and checked in :mod:`~servefleet.core.render.inputs`, the files
rendered in :mod:`~servefleet.core.render.files`; names, modes and paths are in
:mod:`~servefleet.core.render.layout` (also importable from here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from servefleet.core.envdigest import hashed_env_text
from servefleet.core.errors import RenderError
from servefleet.core.models import Deployment
from servefleet.core.project import Project
from servefleet.core.render.files import render_files
from servefleet.core.render.inputs import (
    MAX_OVERRIDE_BYTES,
    MAX_PATCH_BYTES,
    RankExtras,
    RenderFieldError,
    RenderInputs,
    prepare_inputs,
)
from servefleet.core.render.layout import (
    COMPOSE_FILE,
    DOCKERFILE,
    DOTENV_FILE,
    ENV_FILE,
    FILE_MODE,
    HEALTH_INTERVAL,
    HEALTH_RETRIES,
    HEALTH_TIMEOUT,
    HF_CACHE_TARGET,
    IMAGE_PATCH_MARKER,
    LABEL_PREFIX,
    LOG_MAX_FILE,
    LOG_MAX_SIZE,
    MODELS_TARGET,
    OVERRIDE_FILE,
    PATCH_MARKER,
    PATCHES_DIR,
    SECRET_FILE_MODE,
    STOP_GRACE_PERIOD,
    overlay_image_name,
    sha256_hex,
)
from servefleet.core.render.weights import WeightsSpec, weights_for

__all__ = [
    "COMPOSE_FILE",
    "DOCKERFILE",
    "DOTENV_FILE",
    "ENV_FILE",
    "FILE_MODE",
    "HEALTH_INTERVAL",
    "HEALTH_RETRIES",
    "HEALTH_TIMEOUT",
    "HF_CACHE_TARGET",
    "IMAGE_PATCH_MARKER",
    "LABEL_PREFIX",
    "LOG_MAX_FILE",
    "LOG_MAX_SIZE",
    "MAX_OVERRIDE_BYTES",
    "MAX_PATCH_BYTES",
    "MODELS_TARGET",
    "OVERRIDE_FILE",
    "PATCHES_DIR",
    "PATCH_MARKER",
    "RELEASE_ID_LENGTH",
    "SECRET_FILE_MODE",
    "STOP_GRACE_PERIOD",
    "RankExtras",
    "RenderFieldError",
    "RenderedRelease",
    "assemble_release",
    "draft_files",
    "hashed_env_text",
    "manifest_for",
    "overlay_image_name",
    "prepare_inputs",
    "release_id_of",
    "render_deployments",
    "render_release",
]

RELEASE_ID_LENGTH = 12


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
    weights: WeightsSpec | None = None
    """The weights a deploy stages before the stop (``model.source``); ``None``: none."""

    @property
    def key(self) -> str:
        """``node/deployment``."""
        return f"{self.node}/{self.deployment}"


def release_id_of(files: Mapping[str, bytes], modes: Mapping[str, int]) -> str:
    """Short sha256 over ``path``, mode and content hash of every file, in path order.

    ``engine.env`` must already be in its secret-hashed form.
    """
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path}\0{modes[path]:o}\0{sha256_hex(files[path])}\n".encode())
    return digest.hexdigest()[:RELEASE_ID_LENGTH]


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


def draft_files(inputs: RenderInputs) -> dict[str, bytes]:
    """The release's files rendered with an empty id, ``engine.env`` in its published form:
    what the release id is computed over."""
    return _shown(render_files(inputs, ""))


def assemble_release(inputs: RenderInputs, release_id: str) -> RenderedRelease:
    """Render the files with ``release_id`` in them and describe the release."""
    files = render_files(inputs, release_id)
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
        file_hashes={path: sha256_hex(content) for path, content in _shown(files).items()},
        secret_names=tuple(profile.secret_env),
        secrets_rendered=inputs.secrets_complete,
        weights=weights_for(profile, node) if inputs.rank is None else None,
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
        **({"weights": rendered.weights.to_json()} if rendered.weights else {}),
        "created_at": when,
        "created_by": created_by,
    }

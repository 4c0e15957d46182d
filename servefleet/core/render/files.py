"""Render a release's files from checked inputs: the compose file and the node's overrides,
``.env``, ``engine.env`` and, when the profile builds an overlay image, the ``Dockerfile``,
the patch files and ``patches.json``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import jinja2

from servefleet.core.engines import engine_of
from servefleet.core.errors import RenderError
from servefleet.core.expectations import sim_engine_for
from servefleet.core.models import Node, Profile
from servefleet.core.project import PROFILES_DIR
from servefleet.core.render.inputs import PatchFile, RenderFieldError, RenderInputs
from servefleet.core.render.layout import (
    COMPOSE_FILE,
    DOCKERFILE,
    DOTENV_FILE,
    ENV_FILE,
    HEALTH_INTERVAL,
    HEALTH_RETRIES,
    HEALTH_TIMEOUT,
    HF_CACHE_TARGET,
    LABEL_PREFIX,
    LOG_MAX_FILE,
    LOG_MAX_SIZE,
    MODELS_TARGET,
    OVERRIDE_FILE,
    PATCH_MARKER,
    STOP_GRACE_PERIOD,
    overlay_image_name,
)
from servefleet.core.render.templating import TEMPLATE_FILES, render_override
from servefleet.core.render.weights import (
    ENTRYPOINTS,
    OFFLINE_ENV,
    WEIGHTS_SERVICE,
    WeightsSpec,
    weights_for,
)


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


def _weights_service(weights: WeightsSpec | None) -> dict[str, Any] | None:
    """The compose ``weights`` service's values (see :mod:`servefleet.core.weights`)."""
    if weights is None:
        return None
    return {
        "name": WEIGHTS_SERVICE,
        "entrypoint": list(ENTRYPOINTS[weights.tool]),
        "volume": {"source": weights.host_folder, "target": weights.container_folder},
        "environment": weights.environment(),
        "pin": weights.pin,
        "role_label": f"{LABEL_PREFIX}role",
    }


def render_files(inputs: RenderInputs, release_id: str) -> dict[str, bytes]:
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
    engine = engine_of(profile)
    gpu_count = engine.gpu_count(profile)
    # A release spanning nodes (ranks) is staged by hand for now: its engines may fetch.
    weights = weights_for(profile, node) if inputs.rank is None else None
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
        "gpu_count": gpu_count if gpu_count else "all",
        "volumes": volumes,
        "environment": dict(sorted({**profile.env,
                                    **(inputs.rank.environment if inputs.rank else {}),
                                    **(OFFLINE_ENV if weights else {})}.items())),
        "weights": _weights_service(weights),
        "devices": list(inputs.rank.devices) if inputs.rank else [],
        "cap_add": list(inputs.rank.cap_add) if inputs.rank else [],
        "healthcheck": {
            # A headless rank has no API to ask; Docker's NONE turns the check off.
            # Exec form: python3 in vLLM images (no curl guaranteed), curl in llama.cpp's.
            "test": engine.healthcheck(profile, port) if inputs.rank is None or
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
        "stages_weights": weights is not None,
        # What the health gate expects and what the override runs come from the same fact
        # of the node file: a simulated node's engine runs for real only where it says so.
        "sim_real_engine": sim_engine_for(profile, node) is not None,
    }
    for number, (entry, name, content) in enumerate(inputs.overrides, start=1):
        try:
            files[OVERRIDE_FILE.format(n=number)] = render_override(
                Path(name), override_vars, f"compose override {entry}", content)
        except RenderError as error:
            raise RenderFieldError(
                inputs.where, inputs.node_file, f"compose_overrides[{number - 1}]", str(error),
                "fix the override template: it may use only engine, engine_version, "
                "builds_image, deployment, port, node_name, stages_weights and "
                "sim_real_engine, and no "
                "attributes of them"
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


def _patch_marker(profile: Profile, patches: list[PatchFile]) -> bytes:
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

"""Where things are in a release and in its container: file names and modes, mount targets,
compose settings, the label prefix, and the overlay image's name."""

from __future__ import annotations

import hashlib
import re

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

_SLUG_RE = re.compile(r"[^a-z0-9]+")


def sha256_hex(data: bytes) -> str:
    """sha256 of ``data`` as hex: what the release's file hashes and its id are made of."""
    return hashlib.sha256(data).hexdigest()


def slug(value: str) -> str:
    """Lower-case letters and digits joined by single dashes (safe in image names)."""
    return _SLUG_RE.sub("-", value.lower()).strip("-")


def overlay_image_name(node: str, deployment: str, release_id: str) -> str:
    """Tag of a locally built overlay image: ``servefleet/<node>-<deployment>:<release id>``."""
    return f"servefleet/{slug(node)}-{slug(deployment)}:{release_id}"

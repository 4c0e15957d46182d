"""Rendering: engine command lines, compose files, Dockerfile overlays and env files.

Pure: templates and profile files are read, nothing is run and nothing is written.
"""

from servefleet.core.render.engine_args import (
    FlagDiff,
    diff_flags,
    engine_command,
    engine_flags,
)
from servefleet.core.render.release import (
    RenderedRelease,
    hashed_env_text,
    manifest_for,
    render_deployments,
    render_release,
)

__all__ = [
    "FlagDiff",
    "RenderedRelease",
    "diff_flags",
    "engine_command",
    "engine_flags",
    "hashed_env_text",
    "manifest_for",
    "render_deployments",
    "render_release",
]

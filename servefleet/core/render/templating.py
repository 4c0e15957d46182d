"""The Jinja2 side of rendering: where templates live, the environment, and the filters that
make every value safe for the file it lands in.

No value is spliced raw: YAML scalars go through ``yq`` (a JSON string is a valid YAML
double-quoted scalar; ``$`` is doubled so compose does not interpolate it), env-file values
through ``envq`` (single-quoted, which compose's env-file parser takes literally), and shell
words in the Dockerfile through ``shq`` (:func:`shlex.quote`).
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox

from servefleet.core.errors import RenderError
from servefleet.core.resources import shipped_dir

TEMPLATES_DIR = "templates"
"""The project's template folder (top level of the project)."""
BUILTIN_TEMPLATES = shipped_dir(TEMPLATES_DIR)
"""The templates shipped with servefleet (the checkout's ``templates/``, or the wheel's
copy), used when a project has none of its own."""
TEMPLATE_FILES = {
    "compose": "compose.yaml.j2",
    "dockerfile": "Dockerfile.j2",
    "env": "engine.env.j2",
    "dotenv": "dotenv.j2",
}
"""Template file of each rendered file."""


def yaml_scalar(value: Any) -> str:
    """A YAML-safe scalar for a compose file: strings double-quoted (JSON) with ``$``
    escaped as ``$$``; numbers and booleans as YAML spells them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value.replace("$", "$$"), ensure_ascii=True)
    raise TypeError(f"cannot render {type(value).__name__} as a YAML scalar")


def env_value(value: str) -> str:
    """A value for a compose env file: single-quoted, so taken literally (no ``$``
    interpolation, no escapes). Raises ValueError, without showing the value, for what a
    single-quoted value cannot carry."""
    if any(c in value for c in "'\n\r\0"):
        raise ValueError("its value contains a single quote, a line break or NUL, which an "
                         "env file cannot carry safely")
    if value.endswith("\\"):
        raise ValueError("its value ends with a backslash, which an env file cannot carry "
                         "safely")
    return f"'{value}'"


def _env_filter(value: Any) -> str:
    try:
        return env_value(str(value))
    except ValueError as error:
        raise RenderError(str(error)) from None


def templates_dir_for(project_root: Path) -> Path:
    """The project's ``templates/`` when it holds the compose template, else the built-in
    templates shipped with servefleet."""
    own = project_root / TEMPLATES_DIR
    if (own / TEMPLATE_FILES["compose"]).is_file():
        return own
    return BUILTIN_TEMPLATES


def _settings() -> dict[str, Any]:
    return {
        "undefined": jinja2.StrictUndefined,
        "autoescape": False,
        "keep_trailing_newline": True,
        "trim_blocks": True,
        "lstrip_blocks": True,
    }


def template_environment(templates_dir: Path | None, project_root: Path) -> jinja2.Environment:
    """The environment over ``templates_dir`` (default: :func:`templates_dir_for`).

    One per folder for the life of the process: compiling the templates is most of a
    render's time, and a deploy renders every release more than once (rules, plan,
    rollout). Jinja checks each template file's modification time when it is used, so an
    edited template is still compiled afresh.
    """
    folder = templates_dir or templates_dir_for(project_root)
    missing = [name for name in TEMPLATE_FILES.values() if not (folder / name).is_file()]
    if missing:
        raise RenderError(f"{folder}: template {', '.join(missing)} missing")
    return _environment(str(folder.resolve()))


def folder_environment(folder: Path) -> jinja2.Environment:
    """The environment (filters, strict undefined) over any template folder, such as the
    gateway's ``templates/gateway``."""
    return _environment(str(folder.resolve()))


@functools.lru_cache(maxsize=16)
def _environment(folder: str) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder), **_settings())
    env.filters["yq"] = yaml_scalar
    env.filters["envq"] = _env_filter
    env.filters["shq"] = lambda value: shlex.quote(str(value))
    return env


@functools.lru_cache(maxsize=64)
def _override_template(text: str) -> jinja2.Template:
    """A node-local override's template, compiled once per distinct text."""
    env = jinja2.sandbox.SandboxedEnvironment(**_settings())
    env.filters["yq"] = yaml_scalar
    return env.from_string(text)


def render_override(path: Path, variables: Mapping[str, Any], where: str,
                    content: bytes | None = None) -> bytes:
    """A node-local compose override: ``.j2`` files are rendered (StrictUndefined, sandboxed,
    exactly ``variables``), anything else is copied byte for byte. ``content``: the file's
    bytes when the caller has already read them (bounded, checked), else ``path`` is read."""
    raw = path.read_bytes() if content is None else content
    if path.suffix != ".j2":
        return raw
    try:
        return _override_template(raw.decode("utf-8")).render(dict(variables)).encode("utf-8")
    except UnicodeDecodeError:
        raise RenderError(f"{where}: not UTF-8 text") from None
    except jinja2.TemplateError as error:
        raise RenderError(f"{where}: {error}") from None

"""Write a new node file into the project: validated first, by the loader ``validate``
uses, then put in place without replacing anything unless told to.

A file that does not validate, or a node file that exists (without ``force``), leaves the
project exactly as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from servefleet.core.errors import ConfigError
from servefleet.core.project import NODES_DIR, load_nodes


def node_path(project_dir: Path, name: str) -> Path:
    """``<project>/nodes/<name>.yaml``."""
    return project_dir / NODES_DIR / f"{name}.yaml"


def refuse_existing(project_dir: Path, name: str, force: bool) -> None:
    """A :class:`ConfigError` when the node's file exists and ``force`` is not given."""
    path = node_path(project_dir, name)
    if path.exists() and not force:
        raise ConfigError(f"node add {name}: {NODES_DIR}/{name}.yaml exists; nothing was "
                          f"changed (`servefleet probe {name}` compares it with the node; "
                          "pass --force to replace it)")


def check_loads(name: str, text: str, files: Mapping[str, str]) -> None:
    """Load ``text`` as ``nodes/<name>.yaml`` (with ``files`` beside it) in a scratch
    project through :func:`~servefleet.core.project.load_nodes`; a :class:`ConfigError`
    with its problems when it does not load."""
    with tempfile.TemporaryDirectory(prefix="servefleet-node-add-") as scratch:
        root = Path(scratch)
        for relative, content in {**files, f"{NODES_DIR}/{name}.yaml": text}.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(content)
        nodes, _files, problems = load_nodes(root)
    if problems or name not in nodes:
        raise ConfigError([f"node add {name}: the node file would not validate, so nothing "
                           "was written:", *problems])


def _place(path: Path, text: str, replace: bool) -> None:
    """Write ``text`` to ``path`` whole (a partial file renamed, or linked when nothing may
    be replaced, which fails if the path exists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(partial, 0o644)
        if replace:
            os.replace(partial, path)
        else:
            os.link(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)


def write_node_files(project_dir: Path, name: str, text: str,
                     files: Mapping[str, str] | None = None, *, force: bool = False) -> Path:
    """Validate, then write ``nodes/<name>.yaml`` and ``files`` (project-relative paths);
    returns the node file's path. Without ``force`` an existing node file is refused."""
    files = dict(files or {})
    refuse_existing(project_dir, name, force)
    check_loads(name, text, files)
    for relative, content in files.items():
        _place(project_dir / relative, content, replace=True)
    path = node_path(project_dir, name)
    try:
        _place(path, text, replace=force)
    except FileExistsError:
        refuse_existing(project_dir, name, force)  # written meanwhile: the same refusal
        raise
    return path

"""The file side of ``servefleet init``: read the shipped profiles, write the new repository
without ever replacing a file that exists (:mod:`servefleet.core.scaffold` builds the
contents)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from servefleet.core.errors import ConfigError
from servefleet.core.project import PROFILES_DIR
from servefleet.core.resources import shipped_dir
from servefleet.core.scaffold import ScaffoldFile


def shipped_profiles() -> dict[str, bytes]:
    """Every file under servefleet's own ``profiles/`` (the checkout's, or the wheel's copy),
    by ``/``-separated path below it; hidden files and caches left out."""
    root = shipped_dir(PROFILES_DIR)
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
            continue
        found[rel.as_posix()] = path.read_bytes()
    return found


def write_new(root: Path, file: ScaffoldFile) -> bool:
    """Write ``file`` under ``root`` unless something is already at its path: ``True`` when
    written. The bytes go to a temporary file first, linked into place (which fails when the
    path exists), so a file is never replaced, nor left half written."""
    target = root / file.path
    if target.exists() or target.is_symlink():
        return False
    if not target.parent.is_dir():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"{target.parent}: cannot create the folder "
                              f"({error.strerror or error})") from None
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".servefleet-init-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(file.content)
            os.chmod(temporary, 0o644)
            try:
                os.link(temporary, target)
            except FileExistsError:
                return False
            except OSError:  # a file system without hard links: exclusive create instead
                with open(target, "xb") as handle:
                    handle.write(file.content)
        finally:
            os.unlink(temporary)
    except FileExistsError:
        return False
    except OSError as error:
        raise ConfigError(f"{target}: cannot write ({error.strerror or error})") from None
    return True


def write_all(root: Path, files: Iterable[ScaffoldFile]) -> list[tuple[str, bool]]:
    """Write every file that is not there yet: ``(path, written)`` per file, in order."""
    return [(file.path, write_new(root, file)) for file in files]


def shipped_seeds() -> bytes:
    """servefleet's own ``scenarios/seeds.yaml`` (the checkout's, or the wheel's copy)."""
    return (shipped_dir("scenarios") / "seeds.yaml").read_bytes()

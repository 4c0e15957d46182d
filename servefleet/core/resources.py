"""Where the data folders servefleet ships (``templates/``, ``healthchecks/``, ``profiles/``)
are.

In a checkout they are top-level folders of the repository; in an installed wheel the build
(``setup.py``) has copied them into the package as ``servefleet/_data/<name>``. The packaged
copy wins when it exists, so an installed servefleet never reads a stray folder beside
site-packages.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""The ``servefleet`` package folder."""


def shipped_dir(name: str) -> Path:
    """The shipped data folder ``name`` (``templates``, ``healthchecks`` or ``profiles``)."""
    packaged = PACKAGE_DIR / "_data" / name
    if packaged.is_dir():
        return packaged
    return PACKAGE_DIR.parent / name

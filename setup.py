"""Build hook: the wheel carries ``templates/``, ``healthchecks/``, ``profiles/`` and
``scenarios/`` (``servefleet init`` copies ``scenarios/seeds.yaml``, which ``bench`` reads).

The folders stay at the top of the repository (one copy in git, where operators look for
them); building copies them into the package as ``servefleet/_data/<folder>``, which
:mod:`servefleet.core.resources` finds in an installed wheel (``servefleet init`` copies the
profiles, with the ``models/`` and ``patches/`` files they name, into a new config repo; it
writes ``schemas/`` from the installed models). Everything else is configured
in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_FOLDERS = ("templates", "healthchecks", "profiles", "scenarios")


class BuildWithData(build_py):
    """``build_py`` that also copies :data:`DATA_FOLDERS` into ``servefleet/_data``."""

    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for folder in DATA_FOLDERS:
            target = Path(self.build_lib) / "servefleet" / "_data" / folder
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(root / folder, target,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithData})

"""Find the project folder the way git finds its root: from the current folder up to the
first one holding ``Pulumi.yaml`` or a stack file (``Pulumi.<stack>.yaml``).

Light on purpose (pathlib only): the CLI resolves the folder before any heavy import.
"""

from __future__ import annotations

from pathlib import Path

from servefleet.core.errors import ConfigError

MARKERS = ("Pulumi.yaml", "Pulumi.*.yaml")
"""A folder holding either of these is a project folder."""


def is_project_root(folder: Path) -> bool:
    """``folder`` holds ``Pulumi.yaml`` or a ``Pulumi.<stack>.yaml``."""
    try:
        return (folder / "Pulumi.yaml").is_file() or any(
            path.is_file() for path in folder.glob("Pulumi.*.yaml"))
    except OSError:  # an unreadable folder on the way up: not a project folder
        return False


def find_project_root(start: Path) -> Path:
    """The nearest folder from ``start`` up that is a project folder; a
    :class:`ConfigError` naming every folder looked in when there is none."""
    start = start.resolve()
    looked = [start, *start.parents]
    for folder in looked:
        if is_project_root(folder):
            return folder
    raise ConfigError(
        f"no servefleet project found: none of {', '.join(str(f) for f in looked)} holds "
        "Pulumi.yaml or a Pulumi.<stack>.yaml; run servefleet inside your config repo, or "
        "pass --project DIR (or set SERVEFLEET_PROJECT)")


FALLBACK_STACK = "sim"
"""The stack when ``--stack`` is not given and the folder does not hold exactly one."""


def stacks_in(folder: Path) -> list[str]:
    """The stacks whose ``Pulumi.<name>.yaml`` is in ``folder``, sorted."""
    try:
        return sorted(path.name[len("Pulumi."):-len(".yaml")]
                      for path in folder.glob("Pulumi.*.yaml") if path.is_file())
    except OSError:
        return []


def default_stack(folder: Path) -> str:
    """The stack a command uses without ``--stack`` (or ``SERVEFLEET_STACK``): the only one
    when ``folder`` holds exactly one stack file (an operator's folder from ``servefleet
    init``), else :data:`FALLBACK_STACK` (this repository's simulated fleet)."""
    found = stacks_in(folder)
    return found[0] if len(found) == 1 else FALLBACK_STACK

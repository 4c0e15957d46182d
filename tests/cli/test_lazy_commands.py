"""The lazy ``servefleet`` group: help lists every command in ``ALL`` order without importing
paramiko, pydantic or rich; every registry entry resolves to the command of its name."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import click
from click.testing import Result

from servefleet.cli import commands
from servefleet.cli.main import build_cli

HEAVY = ("paramiko", "pydantic", "rich", "yaml", "jinja2", "pulumi", "docker",
         "servefleet.adapters", "servefleet.sim", "servefleet.core.project")

_PROBE = """
import sys
from servefleet.cli.main import main
sys.argv = ["servefleet", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
heavy = [m for m in {heavy!r} if m in sys.modules]
print("HEAVY", heavy)
"""


def _heavy_after(*args: str) -> str:
    done = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY), *args],
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip().splitlines()[-1]


def test_help_imports_nothing_heavy() -> None:
    assert _heavy_after("--help") == "HEAVY []"
    assert _heavy_after("validate", "--help") == "HEAVY []"
    assert _heavy_after("logs", "--help") == "HEAVY []"


def _sections(output: str) -> dict[str, list[str]]:
    """Heading → the commands listed under it, after the options."""
    found: dict[str, list[str]] = {}
    heading = None
    for line in output.split("--help ")[-1].splitlines()[1:]:
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            found[heading] = []
        elif heading is not None and line.startswith("  ") and line.split():
            found[heading].append(line.split()[0])
    return found


def test_help_groups_every_command_once(run_cli: Callable[..., Result]) -> None:
    result = run_cli("--help")
    sections = _sections(result.output)
    assert list(sections) == ["Set up", "Deploy", "Observe", "Tune", "Fleet services",
                              "Test bed"]
    assert sections == {title: list(names) for title, names in commands.SECTIONS.items()}
    listed = [name for names in sections.values() for name in names]
    assert sorted(listed) == sorted(commands.ALL) and len(listed) == len(set(listed))
    # One column for every section's descriptions.
    starts = {line.index(line.split()[1]) for line in result.output.split("Set up:")[1]
              .splitlines() if line.startswith("  ") and len(line.split()) > 1}
    assert len(starts) == 1


def test_every_entry_resolves_to_its_command() -> None:
    group = build_cli()
    ctx = click.Context(group)
    for name in commands.ALL:
        command = group.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name


def test_unknown_command_is_a_usage_error(run_cli: Callable[..., Result]) -> None:
    result = run_cli("valdate", catch_exceptions=True)
    assert result.exit_code == 2
    assert "No such command 'valdate'" in result.output


def test_constants_spelled_out_for_help_match_their_sources() -> None:
    from servefleet.adapters import drift_collect
    from servefleet.cli import drift, logs, sim
    from servefleet.core.bootlog import ENGINE_CHOICES
    from servefleet.sim import spec

    assert set(logs.ENGINE_CHOICES) == set(ENGINE_CHOICES)
    assert drift.DEFAULT_TIMEOUT_SECONDS == drift_collect.DEFAULT_TIMEOUT_SECONDS
    assert sim.MAX_NODES == spec.MAX_NODES

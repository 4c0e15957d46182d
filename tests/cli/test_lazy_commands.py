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


def test_help_lists_every_command_in_registry_order(run_cli: Callable[..., Result]) -> None:
    result = run_cli("--help")
    listed = [line.split()[0] for line in result.output.split("Commands:")[1].splitlines()
              if line.startswith("  ") and line.split()]
    assert listed == list(commands.ALL)


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

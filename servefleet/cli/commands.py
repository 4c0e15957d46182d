"""The sub-commands of ``servefleet``, in the order ``--help`` lists them."""

from __future__ import annotations

import click

from servefleet.cli.deploy import (
    deploy_command,
    merge_logs_group,
    plan_command,
    releases_command,
    rollback_command,
    unlock_command,
)
from servefleet.cli.drift import drift_command, nightly_group
from servefleet.cli.health import health_command
from servefleet.cli.logs import logs_group
from servefleet.cli.nodes import keyscan_command, probe_command
from servefleet.cli.render import diff_profiles_command, render_command, show_command
from servefleet.cli.sim import sim
from servefleet.cli.tune import tune_command
from servefleet.cli.validate import validate_command

ALL: list[click.Command] = [
    validate_command,
    show_command,
    diff_profiles_command,
    render_command,
    plan_command,
    deploy_command,
    rollback_command,
    unlock_command,
    releases_command,
    merge_logs_group(logs_group),
    health_command,
    drift_command,
    nightly_group,
    probe_command,
    keyscan_command,
    tune_command,
    sim,
]

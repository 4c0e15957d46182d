"""The list of sub-commands; each module exposes one click command or group."""

from __future__ import annotations

import click

ALL: list[click.Command] = []

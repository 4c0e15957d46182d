"""Fixtures of the gateway's adapter tests: the real HAProxy, found or required."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def haproxy(need_program: Callable[[str], str]) -> str:
    """The HAProxy binary (Debian's; ``scripts/bootstrap`` installs it)."""
    return need_program("haproxy")

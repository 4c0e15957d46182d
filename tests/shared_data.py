"""Where the real fixtures (``../shared``: engine boot logs, an NVML reading) are, and the
one rule for their absence: a test that needs them fails under ``CI=true``, as it does for
any other real component, and is skipped with the reason elsewhere."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
"""``../shared`` beside the checkout."""
BOOT_LOGS = SHARED / "fixtures" / "boot-logs"
"""Recorded engine boot logs."""
NVML_FIXTURES = SHARED / "fixtures" / "nvml"
"""Recorded NVML readings."""


def shared_missing(reason: str) -> NoReturn:
    """``reason`` (a fixture not found): fail in CI, skip elsewhere."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} (CI=true: the shared fixtures must be beside the checkout)",
                    pytrace=False)
    pytest.skip(reason)

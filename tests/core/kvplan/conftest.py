"""The pinned Qwen3.6-35B-A3B config every planner test reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.kvplan import ModelFacts, load_pinned

ROOT = Path(__file__).resolve().parents[3]
CONFIG = "models/qwen3.6-35b-a3b.config.json"
SHA = "3ac357d5a0e00f3c87e4b008c4ac1d38d062f7c286558a9d7eba4cb1618b90db"


@pytest.fixture(scope="session")
def qwen36() -> ModelFacts:
    """The shipped profiles' pinned Qwen3.6-35B-A3B ``config.json``, parsed."""
    return load_pinned(ROOT / "profiles", CONFIG, SHA)

"""The pinned Qwen3.6-35B-A3B config every planner test reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.kvplan import ModelFacts, load_pinned

ROOT = Path(__file__).resolve().parents[3]
CONFIG = "models/qwen3.6-35b-a3b.config.json"
SHA = "a24b96956f06a5055ab1e73006159adfe90cb8d6fb02f33459166f6ed8a40879"


@pytest.fixture(scope="session")
def qwen36() -> ModelFacts:
    """The shipped profiles' pinned Qwen3.6-35B-A3B ``config.json``, parsed."""
    return load_pinned(ROOT / "profiles", CONFIG, SHA)

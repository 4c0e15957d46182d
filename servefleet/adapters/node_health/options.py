"""How ``servefleet health`` checks (:class:`HealthOptions`), and the API key the probes
send."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from servefleet.adapters.probes import API_KEY_SECRETS, Send
from servefleet.core.models import Profile


@dataclass(frozen=True)
class HealthOptions:
    """How ``servefleet health`` checks."""

    determinism: bool | None = None
    """Run the determinism probe: ``None`` = as the profile says (``health.determinism.probe``)."""
    chat: bool | None = None
    """Send the chat probe: ``None`` = as the profile says (``health.chat_probe``)."""
    wait: bool = False
    """Follow a boot in progress until it is ready (or the profile's deadline) instead of
    reporting it as booting."""
    wait_seconds: float | None = None
    """With ``wait``: follow at most this long (``None``: until the profile's deadline); a
    boot still in progress then, inside its deadline, is reported as booting."""
    record_baselines: bool = True
    """Record the KV pool of a healthy deployment that has no baseline (or a changed
    profile) on the node."""
    rebaseline: bool = False
    """Record the current pool as the baseline even when one exists (the operator accepts
    the new pool)."""
    secrets: Mapping[str, str] = field(default_factory=dict)
    """Secret values by name: API keys for the probes; all of them are masked."""
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    """Wall-clock time of recorded baselines."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic clock for deadlines."""
    sleep: Callable[[float], None] = time.sleep
    """Wait (before re-reading a log)."""
    http_send: Send | None = None
    """How probes send requests (default: urllib)."""


def api_key_for(profile: Profile, secrets: Mapping[str, str]) -> str | None:
    """The API key the engine of ``profile`` expects, when its secrets include one."""
    return next((secrets[name] for name in API_KEY_SECRETS
                 if name in profile.secret_env and secrets.get(name)), None)

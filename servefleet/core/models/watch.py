"""``servefleet:watch``: how ``servefleet watch`` samples engines and recovers them.

Every field has a safe default, so a stack without the block is watched with them::

    config:
      servefleet:watch:
        intervalSeconds: 15
        wedgeIntervals: 4
        recovery: {maxRestarts: 2, windowSeconds: 3600}

The signals and thresholds, with the evidence behind each, are in ``docs/watch.md``.
"""

from __future__ import annotations

from pydantic import Field

from servefleet.core.models.common import StrictModel


class RecoveryPolicy(StrictModel):
    """What the watcher does about a wedged, crash-looping or down engine."""

    enabled: bool = True
    """Act at all; ``false`` only reports and alerts."""
    max_restarts: int = Field(2, ge=0, le=20)
    """Restarts (through the boot gate) within ``window_seconds`` before falling back to
    the last-known-good release."""
    window_seconds: float = Field(3600, ge=60, le=7 * 86400)
    """The window ``max_restarts`` counts over."""
    backoff_seconds: float = Field(60, ge=0, le=3600)
    """Wait after an action before the next one; doubled for each restart in the window."""
    uma_free_wait_seconds: float = Field(300, ge=0, le=3600)
    """On a unified-memory node, how long a restart waits after stopping the engine for the
    node's free memory to be back above what the profile needs (a restart storm on GB10
    leaks unified memory: spark-vllm-docker issue 257). Past it the restart is not made and
    the watcher alerts."""


class WatchConfig(StrictModel):
    """Sampling, wedge detection and recovery of ``servefleet watch``."""

    interval_seconds: float = Field(15, ge=1, le=3600)
    """Seconds between two samples of a node."""
    wedge_intervals: int = Field(4, ge=2, le=100)
    """Consecutive intervals with requests held and every progress counter flat (tokens
    generated, prompt tokens, KV usage) before a stall counts, when the GPU is at idle
    power. Without a power reading twice as many are needed."""
    idle_power_watts: float = Field(30, ge=0, le=2000)
    """At or below this draw a GPU counts as idle: a wedged GB10 sits at 16-27 W while a
    long prefill draws about 46 W (spark-vllm-docker issue 260)."""
    canary: bool = True
    """Send a one-token completion every interval; ``/health`` stays 200 on a wedged
    engine (vLLM issue 39863)."""
    canary_timeout_seconds: float = Field(30, ge=1, le=600)
    """Seconds the canary may take."""
    canary_failures: int = Field(2, ge=1, le=20)
    """Consecutive canary timeouts, while ``/health`` answers 200, that make an engine
    wedged."""
    crash_restarts: int = Field(2, ge=1, le=20)
    """Container restarts seen within ``wedge_intervals`` samples that make it
    crash-looping."""
    recovery: RecoveryPolicy = Field(default_factory=RecoveryPolicy)
    """What to do about it."""

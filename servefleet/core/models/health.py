"""What a healthy engine looks like, per profile: the boot's expectations, the
determinism probe and the canaries (``health:`` in a profile)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from servefleet.core.models.common import StrictModel

CudaGraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


class Canary(StrictModel):
    """A prompt whose answer shows a quality loss the benchmarks miss (the operators' Czech
    discount comparison caught an FP8-embedding regression): sent at temperature 0 with
    thinking off, its answer checked by regular expressions (case-insensitive)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    """Short name for tables."""
    prompt: str = Field(min_length=1, max_length=8000)
    """The user message."""
    expect: str | None = Field(None, max_length=500)
    """A regular expression the answer must contain (``\\bB\\b``, ``Seoul|서울``)."""
    refuse: str | None = Field(None, max_length=500)
    """A regular expression the answer must not contain (the known wrong answer)."""
    max_tokens: int = Field(256, ge=1, le=8192)
    """Tokens the answer may take."""

    @model_validator(mode="after")
    def _checkable(self) -> Canary:
        if self.expect is None and self.refuse is None:
            raise ValueError("give 'expect' (a pattern the answer must contain), 'refuse' "
                             "(one it must not), or both: a canary needs a check")
        for field in ("expect", "refuse"):
            pattern = getattr(self, field)
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as error:
                    raise ValueError(f"'{field}' is not a regular expression ({error}); "
                                     "put a backslash before a special character") from None
        return self


class DeterminismSettings(StrictModel):
    """The opt-in determinism probe."""

    wanted: bool = False
    """The operator needs identical outputs for identical temperature-0 requests."""
    probe: bool = False
    """Run the n=3 determinism probe after boot."""


class HealthExpectations(StrictModel):
    """What a healthy boot of this profile looks like."""

    min_kv_cache_tokens: int | None = Field(None, ge=0)
    """Smallest acceptable KV pool (``GPU KV cache size``)."""
    cudagraph_mode: CudaGraphMode | None = None
    """Expected final CUDA-graph mode; derived when empty (see the rules)."""
    boot_deadline_seconds: int = Field(900, ge=10, le=7200)
    """Give up on a boot after this long (a 42-shard load takes ~5 minutes)."""
    kv_tolerance: float = Field(0.05, ge=0, le=1)
    """Relative change of the KV pool against the node's baseline that is flagged."""
    kv_prediction_tolerance: float = Field(0.25, ge=0, le=1, exclude=True)
    """How far below the planner's predicted KV pool a boot may land before the gate fails
    (left out of the profile identity: it judges a boot, it does not change one)."""
    chat_probe: bool = True
    """Send one short chat completion (thinking off) and require content."""
    determinism: DeterminismSettings = Field(default_factory=DeterminismSettings)
    """Determinism wishes and probe."""
    canaries: list[Canary] = Field(default_factory=list, max_length=32)
    """Canaries the gate sends after the other probes; one that fails fails the gate
    (left out of the profile identity: they judge an engine, they do not change one)."""

"""``bench --repeat N``: the same scenario and seed N times at temperature 0, and per
prompt whether every run answered it alike (the operators' n=3: vLLM with MTP stable on 4
of 12, llama-server on 12 of 12).

The node keeps a digest of each answer, never the text: identical answers have identical
digests, and nothing a model wrote leaves the node's records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from servefleet.core.bench.record import BenchRecord

DIGEST_CHARS = 16


def answer_digests(texts: Sequence[str]) -> list[str]:
    """A short sha256 per answer, in prompt order."""
    return [hashlib.sha256(t.encode()).hexdigest()[:DIGEST_CHARS] for t in texts]


@dataclass(frozen=True)
class Stability:
    """One scenario's repeats."""

    scenario: str
    runs: int
    prompts: int
    unstable: tuple[int, ...]
    """0-based indexes of the prompts whose answers differed between runs."""

    @property
    def stable(self) -> int:
        """Prompts answered alike by every run."""
        return self.prompts - len(self.unstable)

    def text(self) -> str:
        """``4/4 prompts stable over 3 runs``."""
        return f"{self.stable}/{self.prompts} prompts stable over {self.runs} runs"


def stability(records: Sequence[BenchRecord]) -> Stability:
    """Compare the answers of one scenario's repeated runs, prompt by prompt (a prompt a
    run did not answer counts as unstable)."""
    runs = [list(r.figures.get("answers") or []) for r in records]
    prompts = max((len(r) for r in runs), default=0)
    unstable = tuple(i for i in range(prompts)
                     if len({r[i] if i < len(r) else None for r in runs}) > 1)
    return Stability(records[0].scenario if records else "", len(runs), prompts, unstable)

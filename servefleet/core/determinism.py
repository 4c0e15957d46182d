"""The determinism probe's verdict: are identical temperature-0 requests answered alike? (pure)

The probe sends the same prompt n times (3 by default) at temperature 0 with a fixed seed
and compares the answers. Some configurations are known to differ from run to run, and then
an unstable result is *expected*, not a failure:

* speculative decoding (MTP and the rest): drafted tokens are accepted differently from run
  to run; the operators saw vLLM + MTP stable on 4 of 12 tasks, and stable with MTP off;
* llama.cpp with more than one slot or with the prompt cache on: the batch composition
  changes the floating-point order (server README ``cache_prompt``; PR #6950, #22224).

Verdicts: stable → pass. Unstable → **fail** when the profile wants determinism
(``health.determinism.wanted``), *expected* (``info``) when the configuration explains it,
``warn`` otherwise. The differing answers are always shown.
"""

from __future__ import annotations

from collections.abc import Sequence

from servefleet.core.engines import engine_of
from servefleet.core.health_table import CheckRow, Verdict
from servefleet.core.models import Profile

SHOWN_CHARS = 160
"""Characters of each differing answer shown as evidence."""


def instability_reason(profile: Profile) -> str | None:
    """Why this profile's outputs are expected to differ between identical requests, or
    ``None`` when nothing in its configuration explains it."""
    return engine_of(profile).instability(profile)


def distinct_outputs(outputs: Sequence[str]) -> list[tuple[tuple[int, ...], str]]:
    """Each different answer with the (1-based) runs that gave it, first seen first."""
    groups: dict[str, list[int]] = {}
    for run, text in enumerate(outputs, start=1):
        groups.setdefault(text, []).append(run)
    return [(tuple(runs), text) for text, runs in groups.items()]


def _shown(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= SHOWN_CHARS else flat[:SHOWN_CHARS] + "…")


def judge_determinism(outputs: Sequence[str], profile: Profile) -> CheckRow:
    """The determinism row for the answers of n identical requests."""
    wanted = profile.health.determinism.wanted
    reason = instability_reason(profile)
    n = len(outputs)
    groups = distinct_outputs(outputs)
    if wanted:
        expected = f"identical x{n} (determinism.wanted)"
    elif reason is not None:
        expected = "may differ (expected)"
    else:
        expected = f"identical x{n}"
    if len(groups) <= 1:
        return CheckRow("determinism (temperature 0)", expected, f"stable: {n}/{n} identical",
                        "pass")
    evidence = [f"run {', '.join(map(str, runs))}: {_shown(text)}" for runs, text in groups]
    observed = f"unstable: {len(groups)} different answers in {n} runs"
    verdict: Verdict
    if wanted:
        verdict = "fail"
        if reason is not None:
            evidence.append(f"cause: {reason}")
    elif reason is not None:
        verdict = "info"
        observed += " (expected)"
        evidence.append(f"expected: {reason}")
    else:
        verdict = "warn"
    return CheckRow("determinism (temperature 0)", expected, observed, verdict, tuple(evidence))

"""Engine features by version: a model architecture or a speculative method the profile's
pinned vLLM does not have yet (or no longer has) is an error naming the version needed.

The versions are data (:data:`~servefleet.core.rules.facts.ARCHITECTURE_SINCE`,
:data:`~servefleet.core.rules.facts.SPEC_METHOD_SINCE`), each with its source; KV-cache
dtypes and flags have their own tables and rules (``kvcache``, ``flags``).
"""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines.vllm import VLLM
from servefleet.core.rules.base import Issue, ProfileContext, Severity, profile_rule
from servefleet.core.rules.facts import (
    ARCHITECTURE_SINCE,
    SPEC_METHOD_SINCE,
    FeatureFact,
    dotted,
    version_known,
)

VERSION_FIX = "image.ref, image.digest and engine_version"


def _missing(fact: FeatureFact, version: tuple[int, ...]) -> str | None:
    """Why ``version`` lacks the feature, or ``None`` when it has it."""
    if version < fact.since:
        return f"first in vLLM {dotted(fact.since)}"
    if fact.removed is not None and version >= fact.removed:
        return f"removed in vLLM {dotted(fact.removed)}"
    return None


@profile_rule("architecture-not-in-version", Severity.ERROR, engines=(VLLM.name,))
def architecture_not_in_version(ctx: ProfileContext) -> Iterator[Issue]:
    """The model's architecture is newer than the profile's vLLM."""
    profile = ctx.profile
    arch = profile.model.architecture
    if not version_known(profile) or arch not in ARCHITECTURE_SINCE:
        return
    fact = ARCHITECTURE_SINCE[arch]
    if _missing(fact, profile.version) is None:
        return
    yield Issue(
        field="model.architecture", value=arch,
        message=(f"{arch} is not served by vLLM {profile.engine_version}: it is first in vLLM "
                 f"{dotted(fact.since)}; vLLM stops with 'Model architectures ['{arch}'] are "
                 "not supported for now'"),
        why=fact.source,
        fix=f"use an image of vLLM ≥ {dotted(fact.since)} ({VERSION_FIX})",
    )


@profile_rule("speculative-method-not-in-version", Severity.ERROR, engines=(VLLM.name,))
def speculative_method_not_in_version(ctx: ProfileContext) -> Iterator[Issue]:
    """The speculative method is not a choice of the profile's vLLM."""
    profile = ctx.profile
    spec = profile.speculative
    if spec is None or not version_known(profile):
        return
    fact = SPEC_METHOD_SINCE.get(spec.method)
    if fact is None:
        return
    missing = _missing(fact, profile.version)
    if missing is None:
        return
    others = sorted(m for m, f in SPEC_METHOD_SINCE.items()
                    if _missing(f, profile.version) is None and m != spec.method)
    instead = f"; this version has {', '.join(others)}" if others else ""
    needed = (f"an image of vLLM ≥ {dotted(fact.since)}" if profile.version < fact.since
              else f"an image of vLLM < {dotted(fact.removed or ())}")
    yield Issue(
        field="vllm.speculative.method", value=spec.method,
        message=(f"{spec.method} is not a speculative method of vLLM {profile.engine_version} "
                 f"({missing}); vLLM rejects the --speculative-config at startup"),
        why=fact.source,
        fix=f"use {needed} ({VERSION_FIX}), or another method{instead}",
    )

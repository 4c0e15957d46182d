"""A whole probe run: every probe of the profile's engine, in order."""

from __future__ import annotations

import re
from collections.abc import Sequence

from servefleet.adapters.probes.client import EngineClient
from servefleet.adapters.probes.engines import ENGINE_PROBES, ProbeCall, Step
from servefleet.adapters.probes.shared import (
    ProbeResults,
    probe_canaries,
    probe_chat,
    probe_determinism,
    probe_health,
    probe_models,
)
from servefleet.core.engines import engine_of
from servefleet.core.expectations import ExpectedHealth
from servefleet.core.health_table import CheckRow
from servefleet.core.models import Profile


def _down(rows: Sequence[CheckRow]) -> bool:
    """A row shows the engine gone: nothing answered, or a 5xx on a request."""
    return any(r.verdict == "fail" and ("no answer (" in r.observed or
                                        re.search(r"\bHTTP 5\d\d\b", r.observed))
               for r in rows)


def run_probes(client: EngineClient, profile: Profile, *, chat: bool | None = None,
               determinism: bool | None = None, basic: bool = True,
               expected: ExpectedHealth | None = None) -> ProbeResults:
    """Every probe of the profile's engine, in order; stops when nothing answers any more.

    ``chat`` and ``determinism`` override the profile's ``health.chat_probe`` and
    ``health.determinism.probe``; ``basic=False`` leaves out ``/health`` and ``/v1/models``
    (for a caller that has checked them already). ``expected`` (the node's
    :class:`ExpectedHealth`) says what the engine should report where it differs from the
    profile: its version and KV dtype on a simulated node's CPU build. The
    continuation-prefill probe (TurboQuant KV) runs last: on an engine that has the bug it
    kills the engine.
    """
    results = ProbeResults()
    rows = results.rows
    chat = profile.health.chat_probe if chat is None else chat
    determinism = profile.health.determinism.probe if determinism is None else determinism
    if basic:
        health = probe_health(client, profile.engine)
        rows.append(health)
        if health.verdict == "fail" and "no answer (" in health.observed:
            results.engine_down = True
            return results
    served = profile.model.served_name
    engine = engine_of(profile)
    version = expected.engine_version if expected is not None else profile.engine_version
    kv_dtype = expected.kv_cache_dtype if expected is not None \
        else engine.kv_cache_dtype(profile)
    own = ENGINE_PROBES[engine.name]
    call = ProbeCall(client=client, profile=profile, version=version, kv_dtype=kv_dtype,
                     results=results)
    steps: list[Step] = []
    if basic:
        max_len = engine.max_model_len(profile)
        steps.append(lambda: probe_models(client, served, max_len))
    steps += own.identity(call)
    if chat:
        steps.append(lambda: [probe_chat(client, served, results)])
    if determinism:
        steps.append(lambda: [probe_determinism(client, profile, results)])
    if profile.health.canaries:
        # After the chat probe (the engine answers at all), before the metrics' probes,
        # the last of which may kill an engine that has the bug it looks for.
        steps.append(lambda: probe_canaries(client, served, profile.health.canaries))
    steps += own.metrics(call)
    for step in steps:
        found = step()
        rows.extend(found)
        if _down(found):
            results.engine_down = True
            break
    return results

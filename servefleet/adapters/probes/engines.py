"""Each engine's own HTTP probes, registered by the engine names of
:data:`servefleet.core.engines.ENGINES`: what identifies the engine (``/version``;
``/props`` and ``/slots``) and what its ``/metrics`` page must show. :func:`run_probes`
(:mod:`.run`) puts them around the probes every engine answers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from servefleet.adapters.probes.client import EngineClient
from servefleet.adapters.probes.llamacpp import probe_llamacpp_metrics, probe_props, probe_slots
from servefleet.adapters.probes.shared import ProbeResults
from servefleet.adapters.probes.vllm import probe_long_prompt, probe_version, probe_vllm_metrics
from servefleet.core.health_table import CheckRow
from servefleet.core.models import Profile

Step = Callable[[], list[CheckRow]]
"""One probe, ready to run: its rows."""


@dataclass(frozen=True)
class ProbeCall:
    """What an engine's probes are run with."""

    client: EngineClient
    profile: Profile
    version: str
    """The version the engine should report."""
    kv_dtype: str | None
    """The KV cache dtype the engine should report; ``None``: not checked."""
    results: ProbeResults
    """Where facts found along the way go (``/props``)."""


@dataclass(frozen=True)
class EngineProbes:
    """The probes of one engine, as steps in order."""

    name: str
    """The engine's name in :data:`servefleet.core.engines.ENGINES`."""
    identity: Callable[[ProbeCall], list[Step]]
    """After ``/v1/models``: the engine's version and serving shape."""
    metrics: Callable[[ProbeCall], list[Step]]
    """After chat and determinism: ``/metrics`` and, last, any probe that may kill it."""


def _vllm_identity(call: ProbeCall) -> list[Step]:
    return [lambda: [probe_version(call.client, call.version)]]


def _vllm_metrics(call: ProbeCall) -> list[Step]:
    def long_prompt() -> list[CheckRow]:
        row = probe_long_prompt(call.client, call.profile)
        return [] if row is None else [row]

    # The continuation-prefill probe (TurboQuant KV) runs last: on an engine that has the
    # bug it kills the engine.
    return [lambda: probe_vllm_metrics(call.client, call.profile, call.kv_dtype), long_prompt]


def _llamacpp_identity(call: ProbeCall) -> list[Step]:
    slots: list[int | None] = [None]

    def props() -> list[CheckRow]:
        found, slots[0] = probe_props(call.client, call.profile, call.version,
                                      call.results.facts)
        return found

    return [props, lambda: [probe_slots(call.client, slots[0])]]


def _llamacpp_metrics(call: ProbeCall) -> list[Step]:
    return [lambda: probe_llamacpp_metrics(call.client, call.profile)]


ENGINE_PROBES: Mapping[str, EngineProbes] = MappingProxyType({
    p.name: p for p in (
        EngineProbes("vllm", _vllm_identity, _vllm_metrics),
        EngineProbes("llama.cpp", _llamacpp_identity, _llamacpp_metrics),
    )
})
"""Every engine's probes, by engine name (the keys of
:data:`servefleet.core.engines.ENGINES`)."""

"""The inference engines, one module each, registered by name.

    engine_of(profile).healthcheck(profile, port)

Callers ask the engine of a profile instead of branching on ``profile.engine``; a new engine
is a new module here plus its entry in :data:`ENGINES` (and, for its HTTP probes, in
:mod:`servefleet.adapters.engines`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from servefleet.core.engines.base import EngineExpectations, EngineSpec, FlagField, FlagPairs
from servefleet.core.engines.llamacpp import LLAMACPP
from servefleet.core.engines.vllm import VLLM
from servefleet.core.models import Profile

ENGINES: Mapping[str, EngineSpec] = MappingProxyType({e.name: e for e in (VLLM, LLAMACPP)})
"""Every engine, by its profile name (``engine:``)."""


def engine_named(name: str) -> EngineSpec:
    """The engine called ``name``; ``KeyError`` naming the known ones if there is none."""
    try:
        return ENGINES[name]
    except KeyError:
        raise KeyError(f"no engine {name!r}; known: {', '.join(ENGINES)}") from None


def engine_of(profile: Profile) -> EngineSpec:
    """The engine ``profile`` runs."""
    return ENGINES[profile.engine]


__all__ = ["ENGINES", "EngineExpectations", "EngineSpec", "FlagField", "FlagPairs", "engine_named",
           "engine_of"]

"""Every engine of the core registry has its HTTP probes registered under the same name."""

from __future__ import annotations

from servefleet.adapters.probes.engines import ENGINE_PROBES
from servefleet.core.engines import ENGINES


def test_every_engine_has_its_probes() -> None:
    assert set(ENGINE_PROBES) == set(ENGINES)
    for name, probes in ENGINE_PROBES.items():
        assert probes.name == name

"""The planner's prediction as the health gate's expectation: a KV pool far below what the
profile's own ``config.json`` and the node's memory give (below ``predicted × (1 −
health.kv_prediction_tolerance)``, 25% by default) fails the gate with both numbers, e.g.
``KV pool 210,000 tokens is 42% below the predicted 362,000 (estimated from config.json;
tolerance 25%)``: something holds memory the engine should have had. Not on a simulated
node's CPU build, whose pool is its KV space (``sim.engines`` lists it as unshown). Pure
apart from reading the pinned config file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from servefleet.core.baselines import BaselineBook, kv_pool
from servefleet.core.bootlog.model import BootFacts
from servefleet.core.engines import engine_of
from servefleet.core.errors import ServefleetError
from servefleet.core.expectations import ExpectedHealth, derive_expectations
from servefleet.core.health_table import CheckRow
from servefleet.core.kvplan.modelconfig import facts_for_profile
from servefleet.core.kvplan.predict import predict
from servefleet.core.kvplan.preview import calibration_from_book
from servefleet.core.models import Node, Profile

FACT = "KV pool vs prediction"


def expectations_with_prediction(profiles_dir: Path | None, profile: Profile, node: Node,
                                 book: BaselineBook | None = None,
                                 profiles: Mapping[str, Profile] | None = None,
                                 ) -> ExpectedHealth:
    """:func:`derive_expectations` with the planner's pool for ``profile`` on ``node``
    (calibrated on the node's baselines when they hold a measured boot); without one when
    the profile pins no model config, is not vLLM, or ``profiles_dir`` is unknown."""
    plain = derive_expectations(profile, node)
    if profiles_dir is None or not engine_of(profile).kv_planned \
            or profile.model.config is None:
        return plain
    try:
        facts = facts_for_profile(profiles_dir, profile)
        if facts is None:
            return plain
        calibration = calibration_from_book(book, profiles or {}, profile, node)
        found = predict(facts, profile, node, calibration)
    except ServefleetError:
        return plain  # the plan and validate say why; the gate keeps its other checks
    basis = (f"calibrated on {calibration.source}" if calibration is not None
             else "estimated from config.json")
    return derive_expectations(profile, node, predicted_kv=found.pool.kv_cache_tokens,
                               predicted_basis=basis)


def check_against_prediction(expected: ExpectedHealth, facts: BootFacts) -> CheckRow | None:
    """The boot's pool against the prediction; ``None`` when either is missing."""
    predicted = expected.predicted_kv_cache_tokens
    measured = kv_pool(facts)
    if not predicted or measured is None or measured[1] != "tokens":
        return None
    tokens = int(measured[0])
    tolerance = expected.kv_prediction_tolerance
    floor = predicted * (1 - tolerance)
    shown = (f"≥ {floor:,.0f} tokens (predicted {predicted:,}, "
             f"{expected.predicted_kv_basis}; tolerance {tolerance:.0%})")
    below = (predicted - tokens) / predicted
    if tokens >= floor:
        return CheckRow(FACT, shown, f"{tokens:,} tokens ({-below:+.0%})", "pass")
    return CheckRow(FACT, shown,
                    f"KV pool {tokens:,} tokens is {below:.0%} below the predicted "
                    f"{predicted:,} ({expected.predicted_kv_basis}; tolerance "
                    f"{tolerance:.0%})", "fail",
                    ("something else holds memory the engine expected (another process on "
                     "the GPU, a larger activation peak), or the prediction is off: see "
                     "`servefleet plan` and docs/planner.md",))

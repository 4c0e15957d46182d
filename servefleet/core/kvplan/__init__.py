"""Know before you boot: a vLLM profile's KV pool, concurrency and memory on a node, from
the checkpoint's own config.json and vLLM's sizing rules, calibrated on a measured run when
the node has one. Pure apart from reading the pinned config file."""

from servefleet.core.kvplan.modelconfig import ModelFacts, facts_from_config, load_pinned
from servefleet.core.kvplan.pool import PoolFigures, PoolLayout, figures, layout
from servefleet.core.kvplan.predict import (
    Calibration,
    Prediction,
    predict,
    profile_layout,
    solve_utilization,
    with_settings,
)

__all__ = [
    "Calibration", "ModelFacts", "PoolFigures", "PoolLayout", "Prediction", "facts_from_config",
    "figures", "layout", "load_pinned", "predict", "profile_layout", "solve_utilization",
    "with_settings",
]

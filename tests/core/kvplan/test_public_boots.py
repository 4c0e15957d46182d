"""The KV planner against public logs of other people's vLLM boots (``data/public-logs``,
:data:`servefleet.core.kvplan.boots.PUBLIC_BOOTS`): other families, releases (0.11–0.19)
and GPUs (GB10, four L40S) than the H200 rows, none used to fit a constant.

The layout is arithmetic and must reproduce every printed pool; the cold budget is scored,
and the rows it misses are named with the reason, on the side they miss.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.kvplan.accuracy import TOLERANCE
from servefleet.core.kvplan.boots import PUBLIC_BOOTS, Boot, plan_boot
from servefleet.core.kvplan.pool import GIB, figures

DATA = Path(__file__).parent / "data" / "public-logs"
COLD_NOT_MODELLED = {
    "qwen25-14b-fp8-gb10": "a GB10 boot of 0.13.0 that reserved 3.0 GiB in all",
    "qwen3-30b-a3b-fp8-gb10": "a GB10 boot of 0.13.0 that reserved 3.4 GiB in all (a 4 GiB "
                              "pool, where every GiB of the base is 25%)",
}
"""Rows whose cold budget is off by more than the tolerance: the GB10's base is what the
host holds while vLLM profiles (3.0–5.8 GiB seen), which no config can tell. The planner
errs low on both (it promises less pool than the boot got), and its reserve says so."""


@pytest.mark.parametrize("boot", PUBLIC_BOOTS, ids=lambda b: b.name)
def test_the_layout_reproduces_each_public_pool(boot: Boot) -> None:
    layout = plan_boot(boot, DATA).layout
    low, high = (figures(layout, (boot.available_gib + d) * GIB, boot.max_model_len,
                         boot.version_tuple) for d in (-0.005, 0.005))
    assert low.kv_cache_tokens <= boot.tokens <= high.kv_cache_tokens, layout.describe()
    assert round(low.max_concurrency, 2) <= boot.concurrency <= round(high.max_concurrency, 2)


@pytest.mark.parametrize("boot", PUBLIC_BOOTS, ids=lambda b: b.name)
def test_the_cold_budget_of_each_public_boot(boot: Boot) -> None:
    planned = plan_boot(boot, DATA)
    error = planned.available_kv_gib / boot.available_gib - 1
    if boot.name in COLD_NOT_MODELLED:
        assert error < -TOLERANCE, (boot.name, error)
        assert planned.reserve is not None
        assert "real GB10 boots have reserved 3.0 to 5.8 GiB" in planned.reserve.describe()
    else:
        assert abs(error) <= 2 * TOLERANCE, (boot.name, error, planned.how)


def test_the_public_rows_name_their_sources() -> None:
    assert all(boot.source.startswith("github.com/") for boot in PUBLIC_BOOTS)
    assert {b.node for b in PUBLIC_BOOTS} == {"gb10", "l40s"}

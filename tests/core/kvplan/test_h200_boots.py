"""The KV planner against six real vLLM 0.26.0 boots of full-size models on an NVIDIA H200
(``data/real-logs/vllm-0.26.0-h200``: dense, MoE, Gated-DeltaNet hybrid, two
sliding-window models and multi-head latent attention, none of which the planner was fitted
on).

Each boot is planned the way ``servefleet plan`` plans a profile: a profile with the
model's ``config.json``, its printed weights and vLLM's defaults, on an H200 node file that
names only the GPU. Two claims per boot:

- **layout** (arithmetic, nothing fitted): given the KV memory the boot printed, the planner
  reproduces its ``GPU KV cache size`` and ``Maximum concurrency`` (within the rounding of
  the printed GiB);
- **budget** (cold: nothing measured on the node): the KV memory the planner expects is within
  :data:`~servefleet.core.kvplan.accuracy.TOLERANCE` of the printed one, and the planner
  agrees with the log on whether CUDA graphs were taken out of the budget.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from servefleet.core.bootlog import VllmExtra, parse_text
from servefleet.core.kvplan import facts_from_config, figures
from servefleet.core.kvplan.accuracy import TOLERANCE
from servefleet.core.kvplan.pool import GIB
from servefleet.core.kvplan.predict import Prediction, predict
from servefleet.core.models import Node, Profile

DATA = Path(__file__).parent / "data" / "real-logs" / "vllm-0.26.0-h200"
VERSION = "0.26.0"
MAX_MODEL_LEN = 32768


@dataclass(frozen=True)
class Boot:
    """What one boot printed (hard-coded here, and read from its log by the test)."""

    name: str
    weights_gib: float
    available_gib: float
    tokens: int
    concurrency: float
    model: str = ""
    """The ``<model>.config.json`` it served (default: :attr:`name`)."""
    vllm: tuple[tuple[str, object], ...] = ()
    """The profile's ``vllm:`` settings besides ``max_model_len`` (its extra flags)."""


BOOTS = (
    Boot("qwen36-text-next", 64.61, 59.01, 2_911_744, 88.86),
    Boot("qwen3-30b-a3b", 56.88, 68.18, 744_672, 22.73),
    Boot("llama31-8b", 15.0, 112.28, 919_824, 28.07),
    Boot("gemma3-27b-text", 50.74, 74.86, 234_148, 7.15),
    Boot("qwen3-32b", 61.03, 65.75, 269_312, 8.22),
    Boot("gpt-oss-20b-bf16", 39.15, 85.31, 2_477_616, 75.61),
    Boot("deepseek-v2-lite", 29.34, 97.96, 3_381_536, 103.20),
    Boot("qwen36-text-next-u80-b2048", 64.61, 45.71, 2_255_360, 68.83, "qwen36-text-next",
         (("gpu_memory_utilization", 0.80), ("max_num_batched_tokens", 2048),
          ("max_num_seqs", 64))),
    Boot("llama31-8b-fp8kv-s128", 15.04, 112.25, 1_839_136, 56.13, "llama31-8b",
         (("kv_cache_dtype", "fp8"), ("max_num_seqs", 128))),
)

H200 = Node.model_validate({
    "name": "h200", "address": "h200.lan", "ssh": {"agent": True}, "arch": "x86_64",
    "gpus": [{"name": "NVIDIA H200", "memory_gib": 141, "compute_capability": "9.0"}]})
"""An operator's node file for the machine: the GPU by name, nothing measured."""


def budget_line(log: str) -> tuple[float, float]:
    """(total GiB, utilization) from vLLM's closing memory line, which the boot-log reader
    does not read: ``Free memory on device (139.29/139.8 GiB) on startup. Desired GPU memory
    utilization is (0.92, 128.62 GiB)``."""
    total = re.search(r"Free memory on device \([\d.]+/([\d.]+) GiB\)", log)
    util = re.search(r"Desired GPU memory utilization is \(([\d.]+),", log)
    assert total and util, "no closing memory line in the log"
    return float(total.group(1)), float(util.group(1))


def plan(boot: Boot) -> Prediction:
    """The planner's cold prediction for the boot's model and settings on :data:`H200`."""
    model = boot.model or boot.name
    config = json.loads((DATA / f"{model}.config.json").read_text())
    facts = facts_from_config(config, f"{model}.config.json")
    profile = Profile.model_validate({
        "name": boot.name, "engine": "vllm", "engine_version": VERSION,
        "image": {"ref": f"vllm/vllm-openai:v{VERSION}", "digest": "sha256:" + "ab" * 32},
        "model": {"id": f"example/{boot.name}", "served_name": boot.name,
                  "weights_gib": boot.weights_gib},
        "vllm": {"max_model_len": MAX_MODEL_LEN, **dict(boot.vllm)}})
    return predict(facts, profile, H200)


@pytest.fixture(scope="module", params=BOOTS, ids=lambda boot: boot.name)
def boot(request: pytest.FixtureRequest) -> tuple[Boot, str]:
    item: Boot = request.param
    return item, (DATA / f"{item.name}.log").read_text(encoding="utf-8", errors="replace")


def test_the_logs_print_the_figures_the_rows_hold(boot: tuple[Boot, str]) -> None:
    row, log = boot
    facts = parse_text(log)  # the project's own boot-log reader
    assert (facts.engine, facts.engine_version, facts.outcome) == ("vllm", VERSION, "ready")
    assert isinstance(facts.extra, VllmExtra)
    assert (facts.model_load_gib, facts.extra.available_kv_cache_gib, facts.kv_cache_tokens,
            facts.max_concurrency, facts.max_concurrency_at_tokens) == (
        row.weights_gib, row.available_gib, row.tokens, row.concurrency, MAX_MODEL_LEN)
    assert "load_format=dummy" in log  # the engine's config line: full-size, random weights


def test_the_node_and_defaults_are_the_boots_own(boot: tuple[Boot, str]) -> None:
    row, log = boot
    planned = plan(row)
    assert (planned.total_gib, planned.utilization) == budget_line(log)
    assert planned.reserve is not None
    # "Chunked prefill is enabled with max_num_batched_tokens=N" when vLLM chose it; the
    # non-default args line when the flag set it.
    batched = planned.reserve.inputs.max_num_batched_tokens
    assert (f"max_num_batched_tokens={batched}" in log
            or f"'max_num_batched_tokens': {batched}" in log)


def test_the_layout_reproduces_each_printed_pool(boot: tuple[Boot, str]) -> None:
    row, _ = boot
    layout = plan(row).layout
    # vLLM prints the GiB to two decimals: the pool lies within ±0.005 GiB of it.
    low, mid, high = (figures(layout, (row.available_gib + d) * GIB, MAX_MODEL_LEN,
                              (0, 26)) for d in (-0.005, 0.0, 0.005))
    assert low.kv_cache_tokens <= row.tokens <= high.kv_cache_tokens, (mid, layout.describe())
    assert abs(mid.kv_cache_tokens - row.tokens) / row.tokens < 0.001, layout.describe()
    assert round(low.max_concurrency, 2) <= row.concurrency <= round(high.max_concurrency, 2)


def test_the_cold_budget_is_within_tolerance(boot: tuple[Boot, str]) -> None:
    row, _ = boot
    planned = plan(row)
    error = planned.available_kv_gib / row.available_gib - 1
    print(f"{row.name}: planned {planned.available_kv_gib:.2f} GiB KV, printed "
          f"{row.available_gib} GiB ({error:+.1%}); {planned.how}")
    assert abs(error) <= TOLERANCE, planned.how


def test_graphs_are_in_the_budget_exactly_when_the_log_profiles_them(
        boot: tuple[Boot, str]) -> None:
    row, log = boot
    planned = plan(row)
    assert planned.reserve is not None
    profiled = "Profiling CUDA graph memory" in log
    v2_runner = "Using V2 Model Runner" in log
    assert profiled != v2_runner
    assert planned.reserve.inputs.graph_profiling == profiled, planned.reserve.describe()
    assert planned.reserve.inputs.v2_runner == v2_runner


def test_hybrid_prefix_caching_is_off_by_default_in_0_26(boot: tuple[Boot, str]) -> None:
    row, log = boot
    layout = plan(row).layout
    on = re.search(r"enable_prefix_caching=(True|False)", log)
    assert on is not None
    if layout.state_layers:
        assert on.group(1) == "False" and layout.mamba_mode == "none"
        assert f"Setting attention block size to {layout.block_size} tokens" in log

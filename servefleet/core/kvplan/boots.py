"""Real vLLM 0.26.0 boots of full-size models on one NVIDIA H200, and the planner's cold plan of
each: the rows the datacenter reserve (:data:`~servefleet.core.kvplan.reserve.DATACENTER`) was
fitted on, and the rows booted after it, scored the same way.

The boots' logs and ``config.json`` files live with the tests
(``tests/core/kvplan/data/real-logs/vllm-0.26.0-h200``, whose README says how each was made);
:func:`plan_boot` takes that folder. ``bench/bench_kvplan.py`` prints the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from servefleet.core.kvplan.modelconfig import facts_from_config
from servefleet.core.kvplan.predict import Prediction, predict
from servefleet.core.models import Node, Profile

VERSION = "0.26.0"
MAX_MODEL_LEN = 32768
"""Every boot's ``--max-model-len``."""


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
    fitted: bool = False
    """Whether the datacenter reserve constants were fitted on this boot
    (:data:`servefleet.core.kvplan.reserve.DATACENTER`); the others were booted after."""


BOOTS = (
    Boot("qwen36-text-next", 64.61, 59.01, 2_911_744, 88.86, fitted=True),
    Boot("qwen3-30b-a3b", 56.88, 68.18, 744_672, 22.73, fitted=True),
    Boot("llama31-8b", 15.0, 112.28, 919_824, 28.07, fitted=True),
    Boot("gemma3-27b-text", 50.74, 74.86, 234_148, 7.15, fitted=True),
    Boot("qwen3-32b", 61.03, 65.75, 269_312, 8.22, fitted=True),
    Boot("gpt-oss-20b-bf16", 39.15, 85.31, 2_477_616, 75.61, fitted=True),
    Boot("deepseek-v2-lite", 29.34, 97.96, 3_381_536, 103.20, fitted=True),
    Boot("qwen36-text-next-u80-b2048", 64.61, 45.71, 2_255_360, 68.83, "qwen36-text-next",
         (("gpu_memory_utilization", 0.80), ("max_num_batched_tokens", 2048),
          ("max_num_seqs", 64)), fitted=True),
    Boot("llama31-8b-fp8kv-s128", 15.04, 112.25, 1_839_136, 56.13, "llama31-8b",
         (("kv_cache_dtype", "fp8"), ("max_num_seqs", 128)), fitted=True),
    # Booted after the reserve's explanations were written down (docs/planner.md): what
    # drives the profiling peak on each runner, and two models of new families.
    # Its graph estimate (0.19 GiB for 11 FULL + 19 PIECEWISE graphs) set the split of the
    # datacenter graph constants: it counts as fitted.
    Boot("qwen3-30b-a3b-s64", 56.88, 70.44, 769_360, 23.48, "qwen3-30b-a3b",
         (("max_num_seqs", 64),), fitted=True),
    Boot("qwen3-30b-a3b-b16k", 56.88, 67.65, 738_864, 22.55, "qwen3-30b-a3b",
         (("max_num_batched_tokens", 16384),)),
    Boot("gemma3-27b-text-s64", 50.74, 74.86, 234_148, 7.15, "gemma3-27b-text",
         (("max_num_seqs", 64),)),
    Boot("llama31-8b-b16k", 15.0, 111.61, 914_304, 27.90, "llama31-8b",
         (("max_num_batched_tokens", 16384),)),
    Boot("mixtral-8x7b", 87.0, 38.97, 319_264, 9.74),
    Boot("mistral-nemo-12b", 23.06, 103.93, 681_104, 20.79),
)

H200 = Node.model_validate({
    "name": "h200", "address": "h200.lan", "ssh": {"agent": True}, "arch": "x86_64",
    "gpus": [{"name": "NVIDIA H200", "memory_gib": 141, "compute_capability": "9.0"}]})
"""An operator's node file for the machine: the GPU by name, nothing measured."""


def plan_boot(boot: Boot, data: Path) -> Prediction:
    """The planner's cold prediction for the boot's model and settings on :data:`H200`;
    ``data``: the folder of the boots' ``<model>.config.json`` files."""
    model = boot.model or boot.name
    config = json.loads((data / f"{model}.config.json").read_text())
    facts = facts_from_config(config, f"{model}.config.json")
    profile = Profile.model_validate({
        "name": boot.name, "engine": "vllm", "engine_version": VERSION,
        "image": {"ref": f"vllm/vllm-openai:v{VERSION}", "digest": "sha256:" + "ab" * 32},
        "model": {"id": f"example/{boot.name}", "served_name": boot.name,
                  "weights_gib": boot.weights_gib},
        "vllm": {"max_model_len": MAX_MODEL_LEN, **dict(boot.vllm)}})
    return predict(facts, profile, H200)

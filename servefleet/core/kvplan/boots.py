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
    version: str = VERSION
    """The vLLM release that booted it."""
    node: str = "h200"
    """Its GPU: a key of :data:`NODES`."""
    max_model_len: int = MAX_MODEL_LEN
    source: str = ""
    """Where a public row's log was published."""

    @property
    def version_tuple(self) -> tuple[int, ...]:
        """:attr:`version` as the planner compares releases."""
        return tuple(int(part) for part in self.version.split(".")[:3])


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
    # Booted after the Mamba-2 layout was read from the 0.26.0 wheel and before the planner
    # modelled it (Nemotron-H), and vision-language models with and without their encoder.
    Boot("nemotron-nano-9b-v2", 16.58, 109.31, 5_591_040, 170.62),
    Boot("nemotron-nano-9b-v2-u60-s64", 16.58, 65.63, 3_356_672, 102.44, "nemotron-nano-9b-v2",
         (("gpu_memory_utilization", 0.60), ("max_num_seqs", 64))),
    Boot("nemotron-h-8b-8k", 15.11, 110.8, 4_085_467, 498.71, "nemotron-h-8b",
         max_model_len=8192),
    Boot("nemotron-3-nano-30b-a3b", 58.92, 66.43, 9_075_097, 276.95),
    Boot("qwen3-vl-8b", 16.79, 110.82, 806_992, 24.63),
    Boot("qwen3-vl-30b-a3b", 58.24, 66.38, 725_088, 22.13),
    Boot("qwen3-vl-30b-a3b-text", 57.12, 67.94, 742_048, 22.65, "qwen3-vl-30b-a3b",
         (("language_model_only", True),)),
    Boot("qwen3-vl-30b-a3b-s64", 58.24, 67.85, 741_072, 22.62, "qwen3-vl-30b-a3b",
         (("max_num_seqs", 64),)),
    # Predicted before booting (the commit that added them to bench/gpu/truth_models.py
    # says the figures): Mamba prefix caching, and an encoder budget of two images.
    Boot("nemotron-nano-9b-v2-prefix", 16.58, 109.31, 868_181, 26.49, "nemotron-nano-9b-v2",
         (("enable_prefix_caching", True),)),
    Boot("qwen3-vl-30b-a3b-b32k", 58.52, 64.07, 699_808, 21.36, "qwen3-vl-30b-a3b",
         (("max_num_batched_tokens", 32768),)),
    # A 70B-shaped dense model over two H200s (one rank's pool), predicted before booting.
    Boot("llama31-70b-tp2", 65.74, 61.65, 404_000, 12.33, "llama31-70b",
         (("tensor_parallel_size", 2),)),
)

def _node(name: str, gpu: str, memory: float, cc: str, **more: object) -> Node:
    """An operator's node file for a machine: the GPU by name, nothing measured unless
    ``more`` says so."""
    return Node.model_validate({
        "name": name, "address": f"{name}.lan", "ssh": {"agent": True}, "arch": "x86_64",
        "gpus": [{"name": gpu, "memory_gib": memory, "compute_capability": cc, **more}]})


H200 = _node("h200", "NVIDIA H200", 141, "9.0")
"""The H200 the boots ran on, as an operator's node file names it."""


NODES = {
    "h200": H200,
    "gb10": _node("gb10", "NVIDIA GB10", 128, "12.1"),
    "l40s": _node("l40s", "NVIDIA L40S", 48, "8.9", cuda_memory_gib=44.42,
                  memory_source="vLLM's 'Free memory on device (43.93/44.42 GiB)' on an L40S"),
}
"""The node file of each GPU the boots ran on: the GPU by name, and for an L40S the total
vLLM printed for one (the GB10 and H200 totals come from the known-GPU table)."""

PUBLIC_BOOTS = (
    Boot("mistral-7b-gptq-gb10", 3.8844, 102.56, 840_160, 25.64, "mistral-7b-v0.2",
         (("gpu_memory_utilization", 0.9),), version="0.11.0", node="gb10",
         source="github.com/ArmDeveloperEcosystem/arm-learning-paths content/learning-paths/"
                "laptops-and-desktops/dgx_spark_voicechatbot/4_vllm.md (NGC 25.11)"),
    Boot("qwen25-14b-fp8-gb10", 15.2227, 30.46, 332_672, 10.15, "qwen25-14b",
         (("gpu_memory_utilization", 0.4), ("kv_cache_dtype", "fp8"),
          ("enable_prefix_caching", True)), version="0.13.0", node="gb10",
         source="github.com/guardkit/guardkit docs/reviews/failing-graphiti/docker-1.md "
                "(NGC 26.01)"),
    Boot("qwen3-30b-a3b-fp8-gb10", 29.0435, 4.04, 88_176, 2.69, "qwen3-30b-a3b",
         (("gpu_memory_utilization", 0.3), ("kv_cache_dtype", "fp8"),
          ("enable_prefix_caching", True)), version="0.13.0", node="gb10",
         source="github.com/guardkit/guardkit docs/reviews/graphiti-qwen3/run-2.md "
                "(NGC 26.01)"),
    Boot("qwen25-72b-tp4-l40s", 33.98, 5.11, 67_024, 8.18, "qwen25-72b",
         (("gpu_memory_utilization", 0.9), ("tensor_parallel_size", 4)), version="0.19.0",
         node="l40s", max_model_len=8192,
         source="github.com/gnosia93/eks-agentic-ai lesson/10-vllm-inference.md"),
)
"""Public logs of other people's boots (each printed its weights, KV memory, pool and
concurrency; the settings are the log's own non-default args): other families, releases and
GPUs than the H200 rows. None was used to fit anything."""


def plan_boot(boot: Boot, data: Path) -> Prediction:
    """The planner's cold prediction for the boot's model and settings on its node
    (:data:`NODES`); ``data``: the folder of the boots' ``<model>.config.json`` files."""
    model = boot.model or boot.name
    config = json.loads((data / f"{model}.config.json").read_text())
    facts = facts_from_config(config, f"{model}.config.json")
    settings = dict(boot.vllm)
    tp = settings.get("tensor_parallel_size", 1)
    assert isinstance(tp, int)
    profile = Profile.model_validate({
        "name": boot.name, "engine": "vllm", "engine_version": boot.version,
        "image": {"ref": f"vllm/vllm-openai:v{boot.version}", "digest": "sha256:" + "ab" * 32},
        # The printed weights are one rank's; the profile states the checkpoint's.
        "model": {"id": f"example/{boot.name}", "served_name": boot.name,
                  "weights_gib": boot.weights_gib * tp},
        "vllm": {"max_model_len": boot.max_model_len, **settings}})
    return predict(facts, profile, NODES[boot.node])

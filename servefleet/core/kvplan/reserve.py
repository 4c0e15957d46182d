"""What a vLLM engine keeps out of its budget besides weights and the KV pool, before it boots.

vLLM's budget is ``total × gpu_memory_utilization``; the KV pool gets what the weights and
this *reserve* leave (``determine_available_memory``). The reserve is modelled from what
drives it, each term from a source:

- **base**: non-torch allocations and the fixed part of the profiling peak. On unified
  memory (GB10) vLLM measures free memory from the host (``psutil`` available memory), so
  whatever the process and the OS take while vLLM profiles counts as well: the base there
  is about three times a discrete card's.
- **activations**: the dummy forward at ``max_num_batched_tokens``, at
  :attr:`ModelFacts.activation_bytes_per_token` per batched token (fused-MoE caches).
- **CUDA graphs**: from 0.20 (before, only with
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``) vLLM's V1 model runner subtracts its graph
  estimate (the V2 runner, the default for dense models and a few MoE architectures, does
  not: :func:`v2_model_runner`); the
  graphs are counted from vLLM's own capture sizes (up to
  ``min(2 × max_num_seqs × (1 + spec), 512)``; FULL decode graphs up to
  ``max_num_seqs × (1 + spec)``), which reproduces the counts the boot logs print
  (11 + 7 at 32 sequences; 33 + 17 with MTP 3). A FULL graph holds the attention buffers and
  costs far more than a PIECEWISE one.
- **attention workspace**: FlashInfer allocates its workspace buffers up front.

The constants were fitted to every real Qwen3.6-35B-A3B boot we hold that prints its budget
(seed 001 on GB10 with and without MTP, the 0.25.1 GB10 fixture, seed 003's six RTX 5090
rows) and they reproduce each of them within ±0.45 GiB (every pool within ±3.5%, the MTP
change −12.8% for the printed −10.2%); ``bench/bench_kvplan.py`` prints the
cold column. For another model the base is an assumption, and the prediction says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefleet.core.engines.vllm import vllm_settings
from servefleet.core.kvplan.modelconfig import ModelFacts
from servefleet.core.models import Node, Profile
from servefleet.core.rules.facts import attention_backend

GIB = 1024**3

BASE_UNIFIED_GIB = 4.90
"""Non-torch + fixed profiling peak on unified memory (GB10, host-measured free memory)."""
BASE_DISCRETE_GIB = 1.80
"""The same on a discrete card (RTX 5090)."""
FITTED_ON = {
    True: "fitted on 3 Qwen3.6-35B-A3B GB10 boots (seed 001 MTP on/off, the 0.25.1 fixture)",
    False: "fitted on 6 Qwen3.6-35B-A3B RTX 5090 boots (seed 003)",
}
"""What each base was fitted on (by ``unified_memory``; the cold rows of
:data:`servefleet.core.kvplan.accuracy.ROWS`): for any other model or card it is an
assumption, and the reserve's description says so."""
FULL_GRAPH_GIB = 0.037
"""One FULL (decode) CUDA graph: 17 FULL + 33 PIECEWISE graphs were estimated at 0.74 GiB on
a GB10 (vLLM 0.25.1 fixture)."""
PIECEWISE_GRAPH_GIB = 0.002
"""One PIECEWISE graph (it shares the activation pool; attention runs outside it)."""
WORKSPACE_GIB = {"FLASHINFER": 0.52}
"""Attention workspace a backend allocates before the pool (FlashInfer's 394 MiB buffer
and its wrappers' scratch; the RTX 5090 rows: fp8 KV on FlashInfer leaves 0.4–0.6 GiB less
than TurboQuant at the same settings)."""
CAPTURE_CAP = 512
"""vLLM's largest default CUDA-graph capture size."""
GRAPH_PROFILING_SINCE = (0, 20)
"""vLLM subtracts its CUDA-graph estimate from the budget from 0.20 (the 0.19.1 log: "In
v0.19, CUDA graph memory profiling will be enabled by default"; the 0.20.0 log: enabled)."""
V2_RUNNER_SINCE = (0, 25)
"""Dense models (no MoE, no linear-attention state) run vLLM's V2 model runner by default
(and so do the MoE architectures of :data:`V2_RUNNER_ARCHITECTURES`):
``VllmConfig._is_default_v2_model_runner_model`` in the 0.25.1 and 0.26.0 wheels. Its
profiling leaves CUDA graphs out of the KV budget: the real 0.26.0 H200 boots of Llama 3.1
8B's, Qwen3-32B's and Gemma 3 27B's shapes print no "Profiling CUDA graph memory" line and
their budgets close on weights + peak activation + non-torch alone (graphs 0.98, 1.87 and
1.33 GiB captured afterwards, outside it), while the MoE and hybrid boots beside them
subtract 0.53–0.74 GiB. Releases before 0.25 are not checked: the planner gives them the V1
runner."""
GB10_SMALL_TIER_SINCE = (0, 13)
"""From here (at least; earlier releases are not checked) a GB10 gets the small batch tier
(2048 batched tokens, 256 sequences) whatever its memory. ``get_batch_defaults`` sizes the
tier from NVML's total memory, which a GB10 does not report (unified memory:
``nvmlDeviceGetMemoryInfo`` is not supported), so its ``except`` leaves 0 and the small tier
follows: read in the 0.13.0 and 0.25.1 wheels, and seen in real GB10 boots of 0.13.0
(gpt-oss, ``max_num_batched_tokens=2048``) and 0.25.1 (compiled for (1, 2048)); 0.33.0
names the GB10 in ``get_batch_defaults`` outright."""


@dataclass(frozen=True)
class ReserveInputs:
    """What the reserve depends on, worked out from a profile and a node."""

    unified_memory: bool
    version: tuple[int, ...]
    max_num_batched_tokens: int
    max_num_seqs: int
    num_spec: int
    cudagraph_mode: str | None
    attention_backend: str
    graph_profiling: bool
    activation_bytes_per_token: int
    v2_runner: bool = False
    """The V2 model runner (:func:`v2_model_runner`), which leaves graphs out of the budget."""


@dataclass(frozen=True)
class Reserve:
    """The modelled reserve, itemised (GiB)."""

    base: float
    activations: float
    graphs: float
    workspace: float
    piecewise_graphs: int
    full_graphs: int
    inputs: ReserveInputs

    @property
    def total(self) -> float:
        """Everything the engine keeps besides weights and the KV pool."""
        return self.base + self.activations + self.graphs + self.workspace

    def describe(self) -> str:
        """``4.90 GiB base (unified memory; fitted on …, an assumption for other models) +
        0.63 GiB activations (16,384 batched tokens) …``."""
        where = "unified memory" if self.inputs.unified_memory else "discrete GPU"
        parts = [f"{self.base:.2f} GiB base ({where}; {FITTED_ON[self.inputs.unified_memory]}"
                 ", an assumption for other models)",
                 f"{self.activations:.2f} GiB activations "
                 f"({self.inputs.max_num_batched_tokens:,} batched tokens)"]
        if self.inputs.graph_profiling:
            parts.append(f"{self.graphs:.2f} GiB CUDA graphs ({self.piecewise_graphs} PIECEWISE "
                         f"+ {self.full_graphs} FULL, {self.inputs.cudagraph_mode})")
        elif self.inputs.v2_runner:
            parts.append("CUDA graphs outside the budget (vLLM's V2 model runner captures "
                         "them after sizing the pool)")
        else:
            parts.append("CUDA graphs outside the budget (no graph memory profiling before "
                         f"{'.'.join(map(str, GRAPH_PROFILING_SINCE))})")
        if self.workspace:
            parts.append(f"{self.workspace:.2f} GiB {self.inputs.attention_backend} workspace")
        return " + ".join(parts)


def capture_sizes(max_num_seqs: int, num_spec: int) -> tuple[list[int], list[int]]:
    """vLLM's default capture sizes: (every size, the uniform-decode sizes FULL graphs use).

    ``[1, 2, 4] + range(8, 256, 8) + range(256, cap + 1, 16)`` up to
    ``min(2 × max_num_seqs × (1 + spec), 512)``, each rounded up to a multiple of
    ``1 + spec`` (a decode step of every sequence carries its drafts)."""
    step = 1 + num_spec
    cap = min(2 * max_num_seqs * step, CAPTURE_CAP)
    base = [1, 2, 4, *range(8, 256, 8), *range(256, cap + 1, 16)]
    sizes = sorted({-(-size // step) * step for size in base if size <= cap})
    return sizes, [size for size in sizes if size <= max_num_seqs * step]


def graph_counts(inputs: ReserveInputs) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs the mode captures."""
    sizes, decode = capture_sizes(inputs.max_num_seqs, inputs.num_spec)
    mode = inputs.cudagraph_mode
    if mode == "FULL_AND_PIECEWISE":
        return len(sizes), len(decode)
    if mode == "PIECEWISE":
        return len(sizes), 0
    if mode == "FULL":
        return 0, len(sizes)
    if mode == "FULL_DECODE_ONLY":
        return 0, len(decode)
    return 0, 0


def estimate(inputs: ReserveInputs) -> Reserve:
    """The reserve for ``inputs``."""
    piecewise, full = graph_counts(inputs) if inputs.graph_profiling else (0, 0)
    return Reserve(
        base=BASE_UNIFIED_GIB if inputs.unified_memory else BASE_DISCRETE_GIB,
        activations=inputs.activation_bytes_per_token * inputs.max_num_batched_tokens / GIB,
        graphs=piecewise * PIECEWISE_GRAPH_GIB + full * FULL_GRAPH_GIB,
        workspace=WORKSPACE_GIB.get(inputs.attention_backend, 0.0),
        piecewise_graphs=piecewise, full_graphs=full, inputs=inputs)


def default_batch(profile: Profile, node: Node) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) in effect: the profile's, else vLLM's
    hardware default for ``vllm serve`` (``get_batch_defaults``)."""
    settings = vllm_settings(profile)
    gpu = node.primary_gpu
    small = (gpu.sm == (12, 1) and profile.version >= GB10_SMALL_TIER_SINCE) or (
        gpu.cuda_total_gib < 70 or "A100" in gpu.name)
    tokens = settings.max_num_batched_tokens or (2048 if small else 8192)
    seqs = settings.max_num_seqs or (256 if small else 1024)
    return tokens, min(seqs, tokens)


V2_RUNNER_ARCHITECTURES = frozenset({
    "DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "InklingForCausalLM",
    "InklingForConditionalGeneration", "LongcatFlashNgramForCausalLM", "Qwen2MoeForCausalLM"})
"""MoE architectures vLLM 0.26.0 also runs on the V2 model runner by default
(``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``; the real 0.26.0 H200 boot of DeepSeek-V2-Lite's
shapes says "Using V2 Model Runner" and leaves its graphs out of the budget)."""


def v2_model_runner(profile: Profile, facts: ModelFacts) -> bool:
    """Whether ``profile`` runs vLLM's V2 model runner: ``VLLM_USE_V2_MODEL_RUNNER`` when set,
    else by default from :data:`V2_RUNNER_SINCE` for dense models and the MoE architectures of
    :data:`V2_RUNNER_ARCHITECTURES`, unless a feature V2 lacks
    sends it back to V1 (n-gram speculation; ``_get_v2_model_runner_unsupported_features``)."""
    flag = profile.env.get("VLLM_USE_V2_MODEL_RUNNER")
    if flag is not None:
        return flag.strip().lower() in ("1", "true")
    if profile.version < V2_RUNNER_SINCE or facts.hybrid:
        return False
    if facts.moe and not V2_RUNNER_ARCHITECTURES & set(facts.architectures):
        return False
    spec = profile.speculative
    return not (spec and spec.method in ("ngram", "ngram_gpu"))


def graph_profiling(profile: Profile) -> bool:
    """Whether vLLM's V1 model runner subtracts its CUDA-graph estimate from the budget (the
    V2 runner never does: :func:`inputs_for` asks :func:`v2_model_runner` first)."""
    flag = profile.env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
    if flag is not None:
        return flag.strip() == "1"
    return profile.version >= GRAPH_PROFILING_SINCE


def inputs_for(facts: ModelFacts, profile: Profile, node: Node) -> ReserveInputs:
    """The reserve's inputs for ``profile`` on ``node``."""
    # Imported here: the expectations import the rules, whose memory rules use this module.
    from servefleet.core.expectations import derive_expectations

    tokens, seqs = default_batch(profile, node)
    spec = profile.speculative
    backend, _ = attention_backend(profile, node)
    v2_runner = v2_model_runner(profile, facts)
    return ReserveInputs(
        unified_memory=node.unified_memory, version=profile.version,
        max_num_batched_tokens=tokens, max_num_seqs=seqs,
        num_spec=spec.num_speculative_tokens if spec else 0,
        cudagraph_mode=derive_expectations(profile, node).cudagraph_mode,
        attention_backend=backend,
        graph_profiling=not v2_runner and graph_profiling(profile), v2_runner=v2_runner,
        activation_bytes_per_token=facts.activation_bytes_per_token)

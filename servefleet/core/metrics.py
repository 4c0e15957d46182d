"""What an engine's ``/metrics`` page says, parsed into small typed figures (pure).

The text is read with ``prometheus_client``'s own parser; only the names the engines
really expose are looked up (serving.md B.2 for vLLM, D.3 for llama.cpp):

* vLLM: ``vllm:kv_cache_usage_perc`` (0-1; ``vllm:gpu_cache_usage_perc`` up to 0.11),
  ``vllm:num_requests_running`` / ``_waiting``, the spec-decode counters
  ``vllm:spec_decode_num_drafts_total``, ``…_num_draft_tokens_total``,
  ``…_num_accepted_tokens_total`` and ``…_num_accepted_tokens_per_pos_total{position}``
  (registered only when speculative decoding is configured), and the labels of
  ``vllm:cache_config_info`` (``num_gpu_blocks``, ``block_size``, ``cache_dtype``).
* llama.cpp (``--metrics``): ``llamacpp:requests_processing`` / ``_deferred``, token
  counters, the same spec-decode counters under ``llamacpp:``, and the KV gauges that only
  older builds export (``llamacpp:kv_cache_usage_ratio``, ``llamacpp:kv_cache_tokens``).

Counters are cumulative since the engine started; the acceptance figures follow the PromQL
of vLLM's own docstring: acceptance rate = accepted / draft tokens, mean acceptance length
= 1 + accepted / drafts (the bonus token included), per position = accepted[pos] / drafts.
Every vLLM sample carries ``model_name`` and ``engine`` labels; with several engines (data
parallel) counters and request gauges are summed and KV usage is the highest engine's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

VLLM_KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
"""vLLM's KV usage gauge (0-1), by its name from 0.12 on and before."""
LLAMACPP_KV_USAGE = ("llamacpp:kv_cache_usage_ratio",)
"""llama-server's KV usage gauge (0-1), in the builds that export it."""

Samples = Mapping[str, list[tuple[dict[str, str], float]]]
"""Sample name → ``(labels, value)`` of every sample with that exact exposed name."""


class MetricsError(ValueError):
    """The text is not Prometheus exposition format."""


def read_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a Prometheus text page, by its exposed name (``…_total`` included)."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    except (ValueError, IndexError, KeyError, TypeError) as error:
        raise MetricsError(f"not Prometheus text format: {error}") from None
    return found


def _first_name(samples: Samples, names: Iterable[str]) -> str | None:
    return next((name for name in names if name in samples), None)


def _sum(samples: Samples, *names: str) -> float | None:
    """Sum over every label set of the first of ``names`` that is exposed."""
    name = _first_name(samples, names)
    if name is None:
        return None
    return sum(value for _, value in samples[name])


def _max(samples: Samples, *names: str) -> float | None:
    name = _first_name(samples, names)
    if name is None:
        return None
    return max(value for _, value in samples[name])


def _int(value: float | None) -> int | None:
    return None if value is None else round(value)


@dataclass(frozen=True)
class SpecDecodeCounters:
    """Speculative-decoding counters (cumulative since the engine started)."""

    drafts: int
    """Draft rounds (``spec_decode_num_drafts_total``)."""
    draft_tokens: int
    """Tokens proposed (``spec_decode_num_draft_tokens_total``)."""
    accepted_tokens: int
    """Proposed tokens the target model accepted."""
    accepted_per_position: tuple[int, ...] = ()
    """Accepted tokens by draft position (0 first), when exposed."""

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / draft tokens; ``None`` before the first draft."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts: tokens emitted per target step, the bonus token included."""
        return 1 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        """Acceptance rate of each draft position (accepted[pos] / drafts)."""
        if not self.drafts:
            return ()
        return tuple(count / self.drafts for count in self.accepted_per_position)

    def since(self, earlier: SpecDecodeCounters) -> SpecDecodeCounters:
        """The counters of the window between ``earlier`` and this scrape (a rate's
        numerator: what Prometheus' ``rate()`` would divide by the window)."""
        positions = tuple(now - before for now, before in zip(
            self.accepted_per_position, earlier.accepted_per_position, strict=False))
        return SpecDecodeCounters(self.drafts - earlier.drafts,
                                  self.draft_tokens - earlier.draft_tokens,
                                  self.accepted_tokens - earlier.accepted_tokens, positions)

    def describe(self) -> str:
        """``acceptance 63.1%, mean length 2.45 (1,204 drafts)`` or ``no drafts yet``."""
        rate, length = self.acceptance_rate, self.mean_acceptance_length
        if rate is None or length is None:
            return "no drafts yet"
        return f"acceptance {rate:.1%}, mean length {length:.2f} ({self.drafts:,} drafts)"


def _spec_counters(samples: Samples, prefix: str) -> SpecDecodeCounters | None:
    drafts = _sum(samples, f"{prefix}spec_decode_num_drafts_total",
                  f"{prefix}spec_decode_num_drafts")
    draft_tokens = _sum(samples, f"{prefix}spec_decode_num_draft_tokens_total",
                        f"{prefix}spec_decode_num_draft_tokens")
    accepted = _sum(samples, f"{prefix}spec_decode_num_accepted_tokens_total",
                    f"{prefix}spec_decode_num_accepted_tokens")
    if drafts is None and draft_tokens is None and accepted is None:
        return None
    per_pos_name = _first_name(samples, (f"{prefix}spec_decode_num_accepted_tokens_per_pos_total",
                                         f"{prefix}spec_decode_num_accepted_tokens_per_pos"))
    by_position: dict[int, float] = {}
    for labels, value in samples.get(per_pos_name or "", []):
        position = labels.get("position", "")
        if position.isdigit():
            by_position[int(position)] = by_position.get(int(position), 0.0) + value
    per_position = tuple(round(by_position.get(p, 0.0)) for p in range(len(by_position)))
    return SpecDecodeCounters(_int(drafts) or 0, _int(draft_tokens) or 0, _int(accepted) or 0,
                              per_position)


@dataclass(frozen=True)
class VllmMetrics:
    """The figures of a vLLM ``/metrics`` page that health checks use."""

    kv_cache_usage: float | None
    """Fraction of the KV pool in use (0-1); the highest engine's."""
    requests_running: int | None
    """Requests in model execution batches."""
    requests_waiting: int | None
    """Requests waiting to be scheduled."""
    spec_decode: SpecDecodeCounters | None
    """Spec-decode counters; ``None`` when not exposed (speculative decoding off)."""
    num_gpu_blocks: int | None
    """``num_gpu_blocks`` label of ``vllm:cache_config_info``: the KV pool in blocks."""
    block_size: int | None
    """``block_size`` label of ``vllm:cache_config_info`` (tokens per block)."""
    cache_dtype: str | None
    """``cache_dtype`` label of ``vllm:cache_config_info`` (``auto``, ``fp8_e4m3``…)."""
    prompt_tokens: int | None
    """Prefill tokens processed since start."""
    generation_tokens: int | None
    """Tokens generated since start."""
    prefix_cache_hit_rate: float | None
    """Prefix-cache hits / queries since start; ``None`` before the first query."""

    @property
    def kv_capacity_tokens(self) -> int | None:
        """Blocks × block size: the pool's token slots as the block manager counts them."""
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size


def _label_int(labels: Mapping[str, str], key: str) -> int | None:
    value = labels.get(key, "")
    return int(value) if value.isdigit() else None


def parse_vllm_metrics(text: str) -> VllmMetrics:
    """Parse vLLM's ``/metrics`` page; :class:`MetricsError` when it is not Prometheus
    text. Names that are not exposed give ``None``."""
    samples = read_samples(text)
    info = samples.get("vllm:cache_config_info", [])
    labels = info[0][0] if info else {}
    # The gpu_-prefixed names are those of vLLM up to 0.11.
    queries = _sum(samples, "vllm:prefix_cache_queries_total",
                   "vllm:gpu_prefix_cache_queries_total")
    hits = _sum(samples, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
    return VllmMetrics(
        kv_cache_usage=_max(samples, *VLLM_KV_USAGE),
        requests_running=_int(_sum(samples, "vllm:num_requests_running")),
        requests_waiting=_int(_sum(samples, "vllm:num_requests_waiting")),
        spec_decode=_spec_counters(samples, "vllm:"),
        num_gpu_blocks=_label_int(labels, "num_gpu_blocks"),
        block_size=_label_int(labels, "block_size"),
        cache_dtype=labels.get("cache_dtype") or None,
        prompt_tokens=_int(_sum(samples, "vllm:prompt_tokens_total")),
        generation_tokens=_int(_sum(samples, "vllm:generation_tokens_total")),
        prefix_cache_hit_rate=(hits / queries) if queries and hits is not None else None,
    )


@dataclass(frozen=True)
class LlamaCppMetrics:
    """The figures of a llama-server ``/metrics`` page (``--metrics``)."""

    requests_processing: int | None
    """Requests being processed."""
    requests_deferred: int | None
    """Requests deferred (no free slot)."""
    prompt_tokens: int | None
    """Prompt tokens processed since start."""
    tokens_predicted: int | None
    """Tokens generated since start."""
    kv_cache_usage: float | None
    """``llamacpp:kv_cache_usage_ratio`` (0-1): only older builds export it."""
    kv_cache_tokens: int | None
    """``llamacpp:kv_cache_tokens``: only older builds export it."""
    spec_decode: SpecDecodeCounters | None
    """Spec-decode counters, when exposed."""
    names: frozenset[str]
    """Every ``llamacpp:*`` sample name on the page."""


def parse_llamacpp_metrics(text: str) -> LlamaCppMetrics:
    """Parse llama-server's ``/metrics`` page; :class:`MetricsError` when it is not
    Prometheus text."""
    samples = read_samples(text)
    return LlamaCppMetrics(
        requests_processing=_int(_sum(samples, "llamacpp:requests_processing")),
        requests_deferred=_int(_sum(samples, "llamacpp:requests_deferred")),
        prompt_tokens=_int(_sum(samples, "llamacpp:prompt_tokens_total")),
        tokens_predicted=_int(_sum(samples, "llamacpp:tokens_predicted_total")),
        kv_cache_usage=_max(samples, *LLAMACPP_KV_USAGE),
        kv_cache_tokens=_int(_sum(samples, "llamacpp:kv_cache_tokens")),
        spec_decode=_spec_counters(samples, "llamacpp:"),
        names=frozenset(name for name in samples if name.startswith("llamacpp:")),
    )

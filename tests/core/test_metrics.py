"""Parsing /metrics pages: text written from the engines' real metric names (serving.md B.2
for vLLM, D.3 for llama.cpp), in the exposition format prometheus_client writes."""

from __future__ import annotations

import pytest

from servefleet.core.metrics import (
    MetricsError,
    SpecDecodeCounters,
    parse_llamacpp_metrics,
    parse_vllm_metrics,
    read_samples,
)

LABELS = 'engine="0",model_name="qwen36"'

# vLLM 0.21 with MTP (2 speculative tokens): counters declared without _total, exposed with
# it (plus the _created sample prometheus_client adds).
VLLM_021_MTP = f"""\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{LABELS}}} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{{LABELS}}} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{{LABELS}}} 0.0625
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{{LABELS}}} 4000.0
vllm:prefix_cache_queries_created{{{LABELS}}} 1.7637e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{{LABELS}}} 1000.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{{LABELS}}} 4000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{LABELS}}} 2450.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{LABELS}}} 1000.0
vllm:spec_decode_num_drafts_created{{{LABELS}}} 1.7637e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} 2000.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} 1450.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="0"}} 816.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="1"}} 634.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{{{LABELS},le="1.0"}} 2.0
vllm:e2e_request_latency_seconds_bucket{{{LABELS},le="+Inf"}} 4.0
vllm:e2e_request_latency_seconds_count{{{LABELS}}} 4.0
vllm:e2e_request_latency_seconds_sum{{{LABELS}}} 7.5
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="2128",cache_dtype="fp8_e4m3",calculate_kv_scales="False",\
cpu_offload_gb="0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.45",\
is_attention_free="False",mamba_cache_mode="align",model_name="qwen36",num_cpu_blocks="None",\
num_gpu_blocks="152",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256"}} 1.0
"""

# vLLM 0.11: the old KV-usage gauge, no speculative decoding configured.
VLLM_011 = f"""\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{{LABELS}}} 0.5
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{LABELS}}} 0.0
"""

# Two data-parallel engines: counters and request gauges add up, KV usage is the worst.
VLLM_DP2 = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
"""

# llama-server --metrics, a current build (no KV gauges), with draft-mtp speculation.
LLAMACPP_NEW = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 812
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.418
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 300
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 1942.58
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
# HELP llamacpp:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 100
# HELP llamacpp:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 300
# HELP llamacpp:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 150
"""

# An older build that still exported the KV gauges.
LLAMACPP_OLD = """\
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.25
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 16384
# HELP llamacpp:requests_processing Number of request processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
"""


def test_vllm_page_with_mtp() -> None:
    metrics = parse_vllm_metrics(VLLM_021_MTP)
    assert metrics.kv_cache_usage == pytest.approx(0.0625)
    assert (metrics.requests_running, metrics.requests_waiting) == (3, 1)
    assert (metrics.prompt_tokens, metrics.generation_tokens) == (4000, 2450)
    assert metrics.prefix_cache_hit_rate == pytest.approx(0.25)
    assert (metrics.num_gpu_blocks, metrics.block_size, metrics.cache_dtype) == \
        (152, 2128, "fp8_e4m3")
    assert metrics.kv_capacity_tokens == 152 * 2128
    spec = metrics.spec_decode
    assert spec == SpecDecodeCounters(1000, 2000, 1450, (816, 634))
    assert spec.acceptance_rate == pytest.approx(0.725)        # accepted / draft tokens
    assert spec.mean_acceptance_length == pytest.approx(2.45)  # 1 + accepted / drafts
    assert spec.per_position_acceptance == pytest.approx((0.816, 0.634))
    assert spec.describe() == "acceptance 72.5%, mean length 2.45 (1,000 drafts)"


def test_vllm_page_without_spec_decode_and_old_names() -> None:
    metrics = parse_vllm_metrics(VLLM_011)
    assert metrics.kv_cache_usage == 0.5
    assert metrics.requests_running == 0 and metrics.requests_waiting is None
    assert metrics.spec_decode is None
    assert metrics.num_gpu_blocks is None and metrics.kv_capacity_tokens is None
    assert metrics.prefix_cache_hit_rate is None


def test_vllm_data_parallel_engines_sum_and_take_the_worst_kv() -> None:
    metrics = parse_vllm_metrics(VLLM_DP2)
    assert metrics.requests_running == 7
    assert metrics.kv_cache_usage == pytest.approx(0.7)


def test_spec_counters_before_any_draft_and_windows() -> None:
    zero = SpecDecodeCounters(0, 0, 0, (0, 0))
    assert zero.acceptance_rate is None and zero.mean_acceptance_length is None
    assert zero.per_position_acceptance == ()
    assert zero.describe() == "no drafts yet"
    later = SpecDecodeCounters(1100, 2200, 1530, (870, 660))
    window = later.since(SpecDecodeCounters(1000, 2000, 1450, (816, 634)))
    assert window == SpecDecodeCounters(100, 200, 80, (54, 26))
    assert window.mean_acceptance_length == pytest.approx(1.8)


def test_llamacpp_new_build() -> None:
    metrics = parse_llamacpp_metrics(LLAMACPP_NEW)
    assert (metrics.requests_processing, metrics.requests_deferred) == (1, 0)
    assert (metrics.prompt_tokens, metrics.tokens_predicted) == (812, 300)
    assert metrics.kv_cache_usage is None and metrics.kv_cache_tokens is None
    assert metrics.spec_decode == SpecDecodeCounters(100, 300, 150, ())
    assert metrics.spec_decode.mean_acceptance_length == pytest.approx(2.5)
    assert "llamacpp:prompt_seconds_total" in metrics.names


def test_llamacpp_old_build_kv_gauges() -> None:
    metrics = parse_llamacpp_metrics(LLAMACPP_OLD)
    assert metrics.kv_cache_usage == 0.25 and metrics.kv_cache_tokens == 16384
    assert metrics.spec_decode is None


def test_not_prometheus_text() -> None:
    with pytest.raises(MetricsError, match="not Prometheus text"):
        read_samples("<html>502 Bad Gateway</html>\n")
    with pytest.raises(MetricsError):
        parse_vllm_metrics("vllm:kv_cache_usage_perc{engine=\"0\"} not-a-number\n")
    assert parse_vllm_metrics("").kv_cache_usage is None

"""vLLM boot-log facts, one test per format and version boundary.

Lines are written from vLLM's format strings (reference/serving.md section C) with the
logger prefix of the version in question.
"""

from __future__ import annotations

from typing import Any

import pytest

from servefleet.core.bootlog import BootFacts, VllmExtra, parse_text


def vx(facts: BootFacts) -> VllmExtra:
    assert isinstance(facts.extra, VllmExtra)
    return facts.extra


# -- KV-cache capacity ---------------------------------------------------------------------
def test_kv_size_and_concurrency_as_two_lines_up_to_0_27(lines: Any) -> None:
    facts = parse_text(
        lines.api("vLLM API server version 0.21.0", source="api_server.py:1805")
        + lines.v1("GPU KV cache size: 323,456 tokens", source="kv_cache_utils.py:1711")
        + lines.v1("Maximum concurrency for 262,144 tokens per request: 12.84x",
                   source="kv_cache_utils.py:1716"))
    assert facts.kv_cache_tokens == 323456
    assert isinstance(facts.kv_cache_tokens, int)
    assert facts.max_concurrency == 12.84
    assert facts.max_concurrency_at_tokens == 262144
    assert vx(facts).kv_cache_device == "GPU"
    # 0.21 changed the token figure to max_concurrency x max_model_len.
    assert vx(facts).kv_cache_tokens_basis == "max_concurrency"
    assert facts.evidence["kv_cache_tokens"][0].line == 2


def test_kv_tokens_were_a_block_count_up_to_0_20(lines: Any) -> None:
    facts = parse_text(lines.api("vLLM API server version 0.20.1")
                       + lines.v1("GPU KV cache size: 177,440 tokens"))
    assert vx(facts).kv_cache_tokens_basis == "blocks"
    source_build = parse_text(lines.engine_config(version="0.1.dev1+g6adc00f70")
                              + lines.v1("GPU KV cache size: 177,440 tokens"))
    assert vx(source_build).kv_cache_tokens_basis is None


def test_combined_kv_line_from_0_28(lines: Any) -> None:
    facts = parse_text(lines.v1(
        "GPU KV cache size: 1,022,361 tokens, Maximum concurrency for 262,144 tokens per "
        "request: 3.90x", source="kv_cache_utils.py:1300"))
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.max_concurrency_at_tokens) == (
        1022361, 3.90, 262144)


@pytest.mark.parametrize("device", ["GPU", "XPU", "GPU + host"])
def test_device_prefixed_kv_line_from_0_31(lines: Any, device: str) -> None:
    # "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
    facts = parse_text(lines.v1(
        f"{device} KV cache size: 56,288 tokens, Maximum concurrency for 8,192 tokens per "
        "request: 6.87x"))
    assert facts.kv_cache_tokens == 56288
    assert facts.max_concurrency == 6.87
    assert vx(facts).kv_cache_device == device


def test_profiling_override_and_usage_are_not_capacity(lines: Any) -> None:
    facts = parse_text(
        lines.v1("Overriding num_gpu_blocks=0 with num_gpu_blocks_override=512",
                 source="kv_cache_utils.py:829")
        + lines.api("Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: 0 reqs, "
                    "GPU KV cache usage: 4.1%, Prefix cache hit rate: 0.0%"))
    assert facts.kv_cache_tokens is None


def test_first_worker_wins_when_each_worker_group_prints(lines: Any) -> None:
    facts = parse_text(lines.v1("GPU KV cache size: 100,000 tokens", process="Worker_TP0 pid=1")
                       + lines.v1("GPU KV cache size: 100,001 tokens", process="Worker_TP1 pid=2"))
    assert facts.kv_cache_tokens == 100000


@pytest.mark.parametrize(("text", "value"), [
    ("Available KV cache memory: 19.30 GiB", 19.30),   # 0.9-0.13: %.2f
    ("Available KV cache memory: 19.7 GiB", 19.7),     # 0.15+: format_gib
    ("Available KV cache memory: -1.36 GiB", -1.36),   # right before a failure
])
def test_available_kv_memory(lines: Any, text: str, value: float) -> None:
    facts = parse_text(lines.v1(text, source="gpu_worker.py:440"))
    assert vx(facts).available_kv_cache_gib == value


def test_v0_blocks_and_model_size(lines: Any) -> None:
    facts = parse_text(
        lines.v0("vLLM API server version 0.5.5", source="api_server.py:440")
        + lines.v0("Initializing an LLM engine (v0.5.5) with config: model='m', "
                   "speculative_config=None, tokenizer='m'")
        + lines.v0("Loading model weights took 13.5083 GB", source="model_runner.py:890")
        + lines.v0("# GPU blocks: 10786, # CPU blocks: 2048", source="gpu_executor.py:121")
        + lines.v0("Graph capturing finished in 15 secs.", source="model_runner.py:1300")
        + "INFO:     Application startup complete.\n")
    extra = vx(facts)
    assert facts.engine == "vllm" and extra.engine_generation == "v0"
    assert facts.engine_version == "0.5.5"
    assert (extra.gpu_blocks, extra.cpu_blocks) == (10786, 2048)
    assert facts.kv_cache_tokens is None       # blocks x block_size is not printed
    assert facts.model_load_gib == 13.5083
    assert extra.graph_capture_seconds == 15 and extra.graph_capture_gib is None
    assert extra.engine_init_completed is None  # V0 never prints the init-engine line
    assert facts.cudagraph_mode is None and facts.spec_decode is False
    assert facts.outcome == "ready"


# -- load times -------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "Model loading took 27.5916 GiB and 4.056921 seconds",           # 0.8-0.11
    "Model loading took 27.5916 GiB memory and 20.670949 seconds",    # 0.11.2-0.14
])
def test_model_loading_four_decimals(lines: Any, text: str) -> None:
    assert parse_text(lines.v1(text)).model_load_gib == 27.5916


@pytest.mark.parametrize("text", [
    "Model loading took 48.5 GiB memory and 455.900544 seconds",     # 0.15+: format_gib
    "Model loading took 48.5 GiB and 455.900544 seconds",            # model runner v2
])
def test_model_loading_format_gib(lines: Any, text: str) -> None:
    assert parse_text(lines.v1(text)).model_load_gib == 48.5


def test_target_and_drafter_weights(lines: Any) -> None:
    facts = parse_text(
        lines.engine_config(spec="SpeculativeConfig(method='mtp', model='m', num_spec_tokens=3)")
        + lines.v1("Loading weights took 107.31 seconds", source="default_loader.py:430")
        + lines.v1("Loading drafter model...", source="gpu_model_runner.py:5233")
        + lines.v1("Loading weights took 15.27 seconds", source="default_loader.py:430"))
    assert facts.weights_load_seconds == 107.31
    assert vx(facts).drafter_weights_load_seconds == 15.27
    assert vx(facts).spec_decode_method == "mtp"


def test_other_workers_loads_are_not_a_drafter(lines: Any) -> None:
    facts = parse_text(
        lines.engine_config(spec="SpeculativeConfig(method='eagle3', model='d')")
        + lines.v1("Loading weights took 1216.75 seconds", process="VllmWorker TP0 pid=10")
        + lines.v1("Loading weights took 1226.39 seconds", process="VllmWorker TP1 pid=11")
        + lines.v1("Loading weights took 6.66 seconds", process="VllmWorker TP0 pid=10"))
    assert facts.weights_load_seconds == 1216.75
    assert vx(facts).drafter_weights_load_seconds == 6.66


@pytest.mark.parametrize(("text", "seconds", "compilation"), [
    ("init engine (profile, create kv cache, warmup model) took 57.31 seconds", 57.31, None),
    ("init engine (profile, create kv cache, warmup model) took 65.48 s (compilation: 25.60 s)",
     65.48, 25.60),
    ("init engine (profile, create kv cache, warmup model) took 120.00 s (compilation: 40.93 s"
     " — language_model: 30.00 s, encoder: 10.93 s)", 120.0, 40.93),
    ("init engine (profile, create kv cache, warmup model) took 9.94 s", 9.94, None),
])
def test_init_engine_variants(lines: Any, text: str, seconds: float,
                              compilation: float | None) -> None:
    extra = vx(parse_text(lines.v1(text)))
    assert extra.init_engine_seconds == seconds
    assert extra.compilation_seconds == compilation
    assert extra.engine_init_completed is True


def test_graph_capture_memory_can_be_negative(lines: Any) -> None:
    extra = vx(parse_text(lines.v1("Graph capturing finished in 12 secs, took -0.41 GiB")))
    assert (extra.graph_capture_seconds, extra.graph_capture_gib) == (12, -0.41)


# -- versions ---------------------------------------------------------------------------------
def test_version_from_banner_beats_container_banner(lines: Any) -> None:
    text = (
        "vLLM Version 0.13.0+faa43dbf\n"
        + lines.api("vLLM API server version 0.13.0+faa43dbf.nv26.01")
        + lines.v1("Initializing a V1 LLM engine (v0.13.0+faa43dbf.nv26.01) with config: ")
    )
    assert parse_text(text).engine_version == "0.13.0+faa43dbf.nv26.01"
    banner = lines.api(" ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.20.0", source="utils.py:299")
    assert parse_text(banner + lines.v1("Model loading took 1.0 GiB")).engine_version == "0.20.0"
    offline = lines.v1("Initializing a V1 LLM engine (v0.14.0rc1.dev2+g7d9f6663a.d20260121) "
                       "with config: model='m'", process="EngineCore_DP0 pid=370")
    assert parse_text(offline).engine_version == "0.14.0rc1.dev2+g7d9f6663a.d20260121"


def test_flash_attention_version_line_is_not_an_engine_version(lines: Any) -> None:
    facts = parse_text(lines.engine_config(version="0.25.1")
                       + lines.v1("Using FlashAttention version 2", source="flash_attn.py:718"))
    assert facts.engine_version == "0.25.1"


# -- CUDA graphs ------------------------------------------------------------------------------
@pytest.mark.parametrize(("dump", "mode"), [
    ('compilation_config={"level":3,"cudagraph_mode":1,"use_cudagraph":true}', "PIECEWISE"),
    ('compilation_config={"cudagraph_mode":0}', "NONE"),
    ('compilation_config={"cudagraph_mode":[2,1]}', "FULL_AND_PIECEWISE"),
    ('compilation_config={"cudagraph_mode":[2,0]}', "FULL_DECODE_ONLY"),
    ("compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}",
     "FULL_AND_PIECEWISE"),
])
def test_mode_from_config_dump(lines: Any, dump: str, mode: str) -> None:
    facts = parse_text(lines.engine_config(extra=", " + dump))
    assert facts.cudagraph_mode == mode
    assert vx(facts).cudagraph_mode_source == "config"


def test_no_mode_named_up_to_0_9(lines: Any) -> None:
    facts = parse_text(lines.engine_config(extra=', compilation_config={"use_cudagraph":true}'))
    assert facts.cudagraph_mode is None


def test_explicit_downgrade_beats_any_config_dump(lines: Any) -> None:
    full = ", compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}"
    facts = parse_text(
        lines.engine_config(extra=full)
        + lines.v1("CUDAGraphMode.FULL_AND_PIECEWISE is not supported with FlashInferBackend "
                   "backend (support: AttentionCGSupport.NEVER); setting cudagraph_mode=PIECEWISE "
                   "because attention is compiled piecewise", level="WARNING",
                   source="compilation.py:1396")
        # A later dump from a process that never saw the downgrade.
        + lines.api(f"Dumping input data: {full}"))
    assert facts.cudagraph_mode == "PIECEWISE"
    assert vx(facts).cudagraph_mode_source == "downgrade"


def test_spec_decode_downgrade(lines: Any) -> None:
    facts = parse_text(lines.v1(
        "CUDAGraphMode.FULL is not supported with spec-decode for attention backend "
        "FlashInferBackend (support: AttentionCGSupport.UNIFORM_BATCH); setting "
        "cudagraph_mode=NONE", level="WARNING"))
    assert facts.cudagraph_mode == "NONE"


@pytest.mark.parametrize("text", [
    "Cudagraph is disabled under eager mode",
    "Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to setting "
    "-cc.mode=none -cc.cudagraph_mode=none",
    "cudagraph dispatching keys are not initialized. No cudagraph will be used.",
])
def test_eager_is_none(lines: Any, text: str) -> None:
    facts = parse_text(lines.v1(text))
    assert facts.cudagraph_mode == "NONE"
    assert vx(facts).cudagraph_mode_source == "eager"


@pytest.mark.parametrize(("bars", "mode"), [
    (["mixed prefill-decode, PIECEWISE", "decode, FULL"], "FULL_AND_PIECEWISE"),
    (["mixed prefill-decode, PIECEWISE"], "PIECEWISE"),
    (["decode, FULL"], "FULL_DECODE_ONLY"),
])
def test_mode_from_capture_bars_when_nothing_names_it(lines: Any, bars: list[str],
                                                      mode: str) -> None:
    text = "".join(f"Capturing CUDA graphs ({bar}):   0%|          | 0/51 [00:00<?, ?it/s]\r"
                   f"Capturing CUDA graphs ({bar}): 100%|##########| 51/51 [00:05<00:00]\n"
                   for bar in bars)
    facts = parse_text(text + lines.v1("Graph capturing finished in 5 secs, took 0.05 GiB"))
    assert facts.cudagraph_mode == mode
    assert vx(facts).cudagraph_mode_source == "capture_progress"


# -- attention backend ------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "backend"), [
    ("Using Flash Attention backend on V1 engine. ", "FLASH_ATTN"),           # 0.8.5-0.11
    ("Using Triton backend on V1 engine.", "TRITON_ATTN"),                    # gpt-oss 0.10
    ("Using XFormers backend on V1 engine.", "XFORMERS"),                     # T4
    ("Using FlashInfer backend on V1 engine.", "FLASHINFER"),
    ("Using FLASH_ATTN backend.", "FLASH_ATTN"),                              # 0.11.2
    ("Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', "
     "'FLASHINFER']", "FLASH_ATTN"),                                          # 0.12 list
    ("Using TRITON_ATTN attention backend out of potential backends: ('TRITON_ATTN',)",
     "TRITON_ATTN"),                                                          # 0.13 tuple
    ("Using AttentionBackendEnum.FLASHINFER backend.", "FLASHINFER"),         # 0.20, dev
    ("Using Triton Attention backend on V1 engine.", "TRITON_ATTN"),          # ROCm 0.14
    ("Using Triton Attention backend.", "TRITON_ATTN"),                       # ROCm 0.17
    ("Using Sparse MLA backend.", "ROCM_SPARSE_MLA"),                         # ROCm 0.16
])
def test_backend_formats(lines: Any, text: str, backend: str) -> None:
    assert parse_text(lines.v1(text, source="cuda.py:341")).attention_backend == backend


def test_vit_and_moe_backends_are_not_the_decoder_backend(lines: Any) -> None:
    facts = parse_text(
        lines.v1("Using backend AttentionBackendEnum.FLASH_ATTN for vit attention")
        + lines.v1("Using AttentionBackendEnum.FLASH_ATTN for MMEncoderAttention.")
        + lines.v1("Using TRITON Unquantized MoE backend out of potential backends: ['TRITON']")
        + lines.v1("Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN']")
        + lines.v1("Using Marlin backend")
        + lines.v1("Using AttentionBackendEnum.TRITON_ATTN backend."))
    assert facts.attention_backend == "TRITON_ATTN"


def test_engine_selection_overrides_config_time_forcing(lines: Any) -> None:
    forced = lines.api("Gemma4 model has heterogeneous head dimensions (head_dim=256, "
                       "global_head_dim=512). Forcing TRITON_ATTN backend to prevent "
                       "mixed-backend numerical divergence.", source="config.py:101")
    assert parse_text(forced).attention_backend == "TRITON_ATTN"
    selected = parse_text(forced + lines.v1("Using AttentionBackendEnum.FLASHINFER backend."))
    assert selected.attention_backend == "FLASHINFER"


def test_drafter_backend_does_not_replace_target_backend(lines: Any) -> None:
    facts = parse_text(lines.v1("Using FLASH_ATTN attention backend out of potential backends: "
                                "['FLASH_ATTN']")
                       + lines.v1("Using AttentionBackendEnum.TRITON_ATTN backend."))
    assert facts.attention_backend == "FLASH_ATTN"


# -- speculative decoding and other facts -----------------------------------------------------
def test_spec_decode_metrics_new_format(lines: Any) -> None:
    metric = ("SpecDecoding metrics: Mean acceptance length: {mean}, Accepted throughput: 0.73 "
              "tokens/s, Drafted throughput: 3.34 tokens/s, Accepted: {acc} tokens, Drafted: "
              "{dr} tokens, Per-position acceptance rate: 0.938, 0.750, 0.500, Avg Draft "
              "acceptance rate: 21.9%")
    facts = parse_text(
        lines.engine_config(spec="SpeculativeConfig(method='dflash', model='d')")
        + lines.api("Application startup complete.")
        + lines.api(metric.format(mean="4.28", acc=105, dr=480), source="metrics.py:101")
        + lines.api(metric.format(mean="3.00", acc=95, dr=20), source="metrics.py:101"))
    extra = vx(facts)
    assert extra.mean_acceptance_length_first == 4.28
    metrics = extra.spec_decode_metrics
    assert metrics is not None
    assert (metrics.lines, metrics.mean_acceptance_length_last) == (2, 3.0)
    assert (metrics.accepted_tokens, metrics.drafted_tokens) == (200, 500)
    assert metrics.acceptance_rate == 0.4
    assert metrics.per_position_acceptance_last == (0.938, 0.75, 0.5)
    assert facts.spec_decode is True and extra.spec_decode_method == "dflash"


def test_spec_decode_metrics_old_format(lines: Any) -> None:
    facts = parse_text(lines.v1(
        "SpecDecoding metrics: Draft acceptance rate: 45.3%, Mean acceptance length: 2.36, "
        "Accepted: 150 tokens, Drafted: 331 tokens, Per-position acceptance rate: 0.6, 0.3",
        source="metrics.py:80"))
    assert vx(facts).mean_acceptance_length_first == 2.36
    assert facts.spec_decode is True


def test_mtp_detection_and_draft_architecture(lines: Any) -> None:
    facts = parse_text(
        lines.api("Resolved architecture: Qwen3_5MoeForConditionalGeneration",
                  source="model.py:619")
        + lines.api("Resolved architecture: Qwen3_5MoeMTP", source="model.py:619")
        + lines.v1("Detected MTP model. Sharing target model embedding weights with the draft "
                   "model.", source="llm_base_proposer.py:1466"))
    extra = vx(facts)
    assert facts.architecture == "Qwen3_5MoeForConditionalGeneration"
    assert extra.mtp_detected is True and extra.spec_decode_method == "mtp"
    assert extra.draft_architecture == "Qwen3_5MoeMTP"


def test_repeated_architecture_without_spec_decode_is_no_drafter(lines: Any) -> None:
    facts = parse_text(lines.api("Resolved architecture: Qwen3VLForConditionalGeneration")
                       + lines.engine_config()
                       + lines.v1("Resolved architecture: Qwen3VLForConditionalGeneration"))
    assert facts.spec_decode is False
    assert vx(facts).draft_architecture is None


def test_spec_decode_unknown_when_engine_never_configured(lines: Any) -> None:
    assert parse_text(lines.api("Resolved architecture: X")).spec_decode is None


def test_moe_warning_and_async_scheduling(lines: Any) -> None:
    facts = parse_text(
        lines.v1("Using default MoE config. Performance might be sub-optimal! Config file not "
                 "found at /usr/lib/vllm/model_executor/layers/fused_moe/configs/E=128,N=704,"
                 "device_name=NVIDIA_GB10.json", level="WARNING", source="fused_moe.py:1091")
        + lines.api("Asynchronous scheduling is enabled.", source="vllm.py:840"))
    extra = vx(facts)
    assert extra.moe_default_config_warning is True
    assert extra.moe_config_device_name == "NVIDIA_GB10"
    assert extra.async_scheduling is True
    assert vx(parse_text(lines.engine_config())).moe_default_config_warning is False


# -- readiness --------------------------------------------------------------------------------
def test_server_ready_only_when_uvicorn_started(lines: Any) -> None:
    booting = (lines.engine_config()
               + lines.v1("init engine (profile, create kv cache, warmup model) took 14.64 "
                          "seconds")
               + lines.api("Supported tasks: ['generate']", source="api_server.py:592")
               + lines.api("Starting vLLM server on http://0.0.0.0:8000"))
    assert parse_text(booting).outcome == "incomplete"
    ready = parse_text(booting + "(APIServer pid=1) INFO:     Application startup complete.\n")
    assert ready.outcome == "ready"
    assert ready.evidence["outcome"][0].text.endswith("Application startup complete.")


def test_offline_llm_ready_after_engine_init(lines: Any) -> None:
    facts = parse_text(
        lines.v1("init engine (profile, create kv cache, warmup model) took 2267.10 seconds",
                 process="EngineCore_DP0 pid=370")
        + lines.v1("Supported tasks: ['generate']", process="", source="llm.py:344"))
    assert facts.outcome == "ready"

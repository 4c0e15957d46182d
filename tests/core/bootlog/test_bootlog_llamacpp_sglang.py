"""llama.cpp (llama-server) and SGLang facts, from their format strings."""

# The logs below are verbatim engine output; their lines are as long as the engines make them.
# ruff: noqa: E501

from __future__ import annotations

import pytest

from servefleet.core.bootlog import BootFacts, FailureClass, LlamaCppExtra, SglangExtra, parse_text

# -- llama.cpp ---------------------------------------------------------------------------------
# src/llama-kv-cache.cpp: "%s: %10s KV buffer size = %8.2f MiB" and
# "%s: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), K (%s): %7.2f MiB, V (%s): ..."
CLASSIC = """\
ggml_cuda_init: found 1 CUDA devices (Total VRAM: 15976 MiB):
  Device 0: NVIDIA GeForce RTX 4060 Ti, compute capability 8.9, VMM: yes, VRAM: 15976 MiB
main: n_parallel is set to auto, using n_parallel = 4 and kv_unified = true
build: 7780 (abc1234) with GNU 14.3.0 for Linux x86_64
main: loading model
llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4060 Ti) (0000:07:00.0) - 15849 MiB free
load_tensors: offloaded 41/41 layers to GPU
llama_context: n_seq_max     = 4
llama_context: n_ctx         = 32768
llama_context: n_ctx_seq     = 8192
llama_context: flash_attn    = enabled
llama_kv_cache:      CUDA0 KV buffer size =   320.00 MiB
llama_kv_cache:      CUDA1 KV buffer size =   320.00 MiB
llama_kv_cache: size =  640.00 MiB ( 32768 cells,  40 layers,  4/1 seqs), K (q8_0):  320.00 MiB, V (q8_0):  320.00 MiB
llama_memory_recurrent:      CUDA0 RS buffer size =   251.25 MiB
llama_memory_recurrent: size =  251.25 MiB (     4 cells,  40 layers,  4 seqs), R (f32):   11.25 MiB, S (f32):  240.00 MiB
srv    load_model: initializing slots, n_slots = 4
main: model loaded
main: server is listening on http://0.0.0.0:8000
"""


def ll(text: str) -> tuple[BootFacts, LlamaCppExtra]:
    facts = parse_text(text)
    assert facts.engine == "llama.cpp"
    assert isinstance(facts.extra, LlamaCppExtra)
    return facts, facts.extra


def test_classic_format() -> None:
    facts, extra = ll(CLASSIC)
    assert facts.outcome == "ready"
    assert facts.engine_version == extra.build == "7780 (abc1234)"
    # Per-device buffers are parts of the total size line; recurrent state is separate.
    assert facts.kv_cache_mib == 640.0
    assert extra.kv_cache_mib_parts == (640.0,)
    assert extra.recurrent_state_mib == 251.25
    assert (facts.n_ctx, extra.n_ctx_seq, facts.n_parallel) == (32768, 8192, 4)
    assert facts.gpu_layers_offloaded == "41/41"
    assert facts.device_name == "NVIDIA GeForce RTX 4060 Ti"
    assert facts.flash_attn is True and extra.flash_attn_setting == "enabled"


def test_iswa_caches_are_summed_and_auto_flash_attention_resolved() -> None:
    text = """\
build_info: b8680-15f786e65
llama_context: flash_attn    = auto
llama_kv_cache_iswa: creating non-SWA KV cache, size = 65536 cells
llama_kv_cache:       MTL0 KV buffer size =  1024.00 MiB
llama_kv_cache: size = 1024.00 MiB ( 65536 cells,   4 layers,  1/1 seqs), K (f16):  512.00 MiB, V (f16):  512.00 MiB
llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells
llama_kv_cache:       MTL0 KV buffer size =    40.00 MiB
llama_kv_cache: size =   40.00 MiB (  1024 cells,  20 layers,  1/1 seqs), K (f16):   20.00 MiB, V (f16):   20.00 MiB
sched_reserve: Flash Attention was auto, set to enabled
"""
    facts, extra = ll(text)
    assert facts.kv_cache_mib == 1064.0
    assert extra.kv_cache_mib_parts == (1024.0, 40.0)
    assert facts.flash_attn is True and extra.flash_attn_setting == "auto -> enabled"
    assert extra.build == "b8680-15f786e65"


def test_old_unified_cache_and_disabled_flash_attention() -> None:
    text = """\
build: 6050 (4b2a1c3d) with cc for x86_64
llama_context: n_ctx_per_seq = 4096
llama_context: flash_attn    = 0
llama_kv_cache_unified:      Metal KV buffer size =   640.00 MiB
llama_kv_cache_unified: size =  640.00 MiB (  4096 cells,  40 layers,  1/ 1 seqs), K (f16):  320.00 MiB, V (f16):  320.00 MiB
main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 9
"""
    facts, extra = ll(text)
    assert facts.kv_cache_mib == 640.0 and extra.n_ctx_seq == 4096
    assert facts.flash_attn is False and extra.flash_attn_setting == "0"
    # Old servers print this before loading the model: it is not readiness.
    assert facts.outcome == "incomplete"


def test_2026_timestamped_format() -> None:
    text = """\
0.00.302.423 I device_info:
0.00.302.490 I   - CUDA0   : NVIDIA GB10 (122501 MiB, 118047 MiB free)
0.00.302.492 I   - CPU     : CPU (122501 MiB, 122501 MiB free)
0.00.302.531 I srv  llama_server: n_parallel is set to auto, using n_parallel = 4 and kv_unified = true
0.02.095.442 W llama_context: n_ctx_seq (8192) < n_ctx_train (262144) -- the full capacity of the model will not be utilized
0.02.249.234 I slot   load_model: id  0 | task -1 | new slot, n_ctx = 8192
0.02.254.425 I srv  llama_server: model loaded
0.02.254.428 I srv  llama_server: server is listening on http://0.0.0.0:18082
"""
    facts, extra = ll(text)
    assert facts.outcome == "ready"
    assert facts.device_name == "NVIDIA GB10"
    assert (facts.n_ctx, extra.n_ctx_seq, facts.n_parallel) == (None, 8192, 4)
    assert facts.kv_cache_mib is None and facts.flash_attn is None


def test_device_names_with_parentheses() -> None:
    facts, _ = ll("llama_model_load_from_file_impl: using device Vulkan0 (AMD Radeon 780M "
                  "(RADV GFX1103_R1)) (0000:c5:00.0) - 30000 MiB free\n")
    assert facts.device_name == "AMD Radeon 780M (RADV GFX1103_R1)"


def test_model_load_failure_reason_is_composed() -> None:
    text = """\
build: 5760 (e8215dbb) with Apple clang version 15.0.0 for arm64-apple-darwin23.6.0
main: HTTP server is listening, hostname: 127.0.0.1, port: 10000, http threads: 9
main: loading model
gguf_init_from_file_impl: failed to read magic
llama_model_load: error loading model: llama_model_loader: failed to load model from /models/x/
llama_model_load_from_file_impl: failed to load model
srv    load_model: failed to load model, '/models/x/'
srv    operator(): operator(): cleaning up before exit...
main: exiting due to model loading error
"""
    facts, _ = ll(text)
    assert facts.outcome == "failed"
    assert facts.failure_class is FailureClass.MODEL_LOAD_FAILED
    assert facts.failure_reason == (
        "error loading model: llama_model_loader: failed to load model "
        "(gguf_init_from_file_impl: failed to read magic); main: exiting due to model loading "
        "error")


def test_kv_allocation_failure_timestamped() -> None:
    text = """\
0.00.303.810 I srv  llama_server: loading model
0.05.982.100 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 5000.00 MiB on device 0: cudaMalloc failed: out of memory
0.05.982.175 E alloc_tensor_range: failed to allocate CUDA0 buffer of size 5242880000
0.06.650.537 E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
0.06.660.464 E srv  llama_server: exiting due to model loading error
"""
    facts, _ = ll(text)
    assert facts.failure_class is FailureClass.KV_CACHE_OOM
    assert (facts.failure_reason or "").startswith(
        "failed to initialize the context: failed to allocate buffer for kv cache "
        "(ggml_backend_cuda_buffer_type_alloc_buffer: allocating 5000.00 MiB")


def test_gpu_crash_after_ready_fails_and_request_errors_do_not() -> None:
    ready = "main: model loaded\nmain: server is listening on http://0.0.0.0:8000\n"
    request_error = ("srv    send_error: task id = 0, error: request (44496 tokens) exceeds the "
                     "available context size (32768 tokens), try increasing it\n")
    assert ll("main: loading model\n" + ready + request_error)[0].outcome == "ready"
    crash = "/src/ggml/src/ggml-cuda/ggml-cuda.cu:97: CUDA error\n"
    facts, _ = ll("main: loading model\n" + ready + request_error + crash)
    assert facts.outcome == "failed"
    assert facts.failure_class is FailureClass.GPU_RUNTIME_ERROR


def test_ctrl_c_after_ready_is_a_shutdown() -> None:
    text = ("main: loading model\nmain: server is listening on http://0.0.0.0:8000\n"
            "srv    operator(): operator(): cleaning up before exit...\n"
            "terminate called without an active exception\n")
    assert ll(text)[0].outcome == "ready"


# -- SGLang -----------------------------------------------------------------------------------
SGLANG = """\
SGLang Version 0.5.11+05fb6a52
[2026-06-07 18:31:20] Attention backend not specified. Use flashinfer backend by default.
[2026-06-07 18:31:21] server_args=ServerArgs(model_path='Qwen/Qwen2.5-1.5B-Instruct', attention_backend='flashinfer', prefill_attention_backend=None, speculative_algorithm=None, disable_cuda_graph=False)
[2026-06-07 18:31:49] Load weight end. elapsed=20.11 s, type=Qwen2ForCausalLM, avail mem=108.97 GB, mem usage=3.27 GB.
[2026-06-07 18:31:49] Using KV cache dtype: torch.float8_e4m3fn
[2026-06-07 18:31:50] KV Cache is allocated. #tokens: 3113713, K size: 20.79 GB, V size: 20.79 GB
[2026-06-07 18:31:51] Capture cuda graph begin. This can take up to several minutes. avail mem=65.30 GB
[2026-06-07 18:32:04] Capture cuda graph end. Time elapsed: 13.55 s. mem usage=3.12 GB. avail mem=62.18 GB.
[2026-06-07 18:32:21] max_total_num_tokens=3113713, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=32768, available_gpu_mem=61.54 GB
[2026-06-07 18:32:22] INFO:     Application startup complete.
[2026-06-07 18:32:22] INFO:     172.17.0.1:36720 - "GET /health HTTP/1.1" 503 Service Unavailable
"""


def sg(text: str) -> tuple[BootFacts, SglangExtra]:
    facts = parse_text(text)
    assert facts.engine == "sglang"
    assert isinstance(facts.extra, SglangExtra)
    return facts, facts.extra


def test_sglang_ready_only_when_fired_up() -> None:
    facts, extra = sg(SGLANG)
    # /health answers 503 until the warm-up request: uvicorn's startup is not readiness.
    assert facts.outcome == "incomplete"
    assert facts.engine_version == "0.5.11+05fb6a52"
    assert facts.kv_cache_tokens == 3113713 and extra.kv_cache_allocated_tokens == (3113713,)
    assert (extra.context_len, extra.max_running_requests) == (32768, 4096)
    assert facts.attention_backend == "flashinfer"
    assert (facts.weights_load_seconds, extra.weights_mem_gb) == (20.11, 3.27)
    assert facts.architecture == "Qwen2ForCausalLM" and facts.spec_decode is False
    assert extra.cuda_graph_captured is True and extra.cuda_graph_capture_seconds == 13.55
    assert extra.kv_cache_dtype == "torch.float8_e4m3fn"
    fired = sg(SGLANG + "[2026-06-07 18:32:28] The server is fired up and ready to roll!\n")[0]
    assert fired.outcome == "ready"


def test_sglang_pools_per_rank_and_spec_decode() -> None:
    text = """\
[2026-08-01 23:37:40] server_args=ServerArgs(model_path='m', attention_backend='flashinfer', speculative_algorithm='DFLASH')
[2026-08-01 23:39:39 TP0] Load weight end. elapsed=109.33 s, type=LagunaForCausalLM, quant=compressed-tensors, avail mem=47.80 GB, mem usage=67.56 GB.
[2026-08-01 23:39:39 TP1] Load weight end. elapsed=110.00 s, type=LagunaForCausalLM, avail mem=47.80 GB, mem usage=67.56 GB.
[2026-08-01 23:39:55 TP0] Load weight end. elapsed=12.25 s, type=DFlashLagunaForCausalLM, avail mem=46.25 GB, mem usage=1.58 GB.
[2026-08-01 23:40:01 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 148717, K size: 10.21 GB, V size: 10.21 GB
[2026-08-01 23:40:01 TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 148717, K size: 10.21 GB, V size: 10.21 GB
[2026-08-01 23:40:01 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 185897, K size: 4.25 GB, V size: 4.25 GB
[2026-08-01 23:43:38 TP0] Capture target prefill CUDA graph end. elapsed=216.19 s, mem usage=5.24 GB, avail mem=7.27 GB.
[2026-08-01 23:43:42 TP0] max_total_num_tokens=185897, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=65536, available_gpu_mem=6.22 GB
"""
    facts, extra = sg(text)
    assert extra.kv_cache_allocated_tokens == (148717, 185897)
    assert facts.kv_cache_tokens == 185897 and facts.weights_load_seconds == 109.33
    assert facts.spec_decode is True and extra.spec_decode_algorithm == "DFLASH"
    assert extra.draft_architecture == "DFlashLagunaForCausalLM"
    assert extra.cuda_graph_capture_seconds == 216.19 and extra.kv_cache_dtype == "torch.bfloat16"


def test_sglang_scheduler_exception_fails() -> None:
    text = """\
[2026-03-27 09:31:16] server_args=ServerArgs(model_path='m')
[2026-03-27 09:32:00] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/scheduler.py", line 2000, in run_scheduler_process
    scheduler = Scheduler(server_args)
AttributeError: 'MergedColumnParallelLinear' object has no attribute 'weight'

[2026-03-27 09:32:00] Received sigquit from a child process. It usually means the child failed.
"""
    facts, _ = sg(text)
    assert facts.outcome == "failed"
    assert facts.failure_class is FailureClass.OTHER
    assert facts.failure_reason == (
        "AttributeError: 'MergedColumnParallelLinear' object has no attribute 'weight'")


def test_sglang_sigterm_teardown_is_not_a_failure() -> None:
    text = SGLANG + """\
[2026-06-07 18:32:28] The server is fired up and ready to roll!
[2026-08-02 00:17:43] SIGTERM received. signum=None frame=None. Draining requests and shutting down...
[2026-08-02 00:17:43] Subprocess detokenizer (pid=31379) crashed with exit code -15. Triggering SIGQUIT for cleanup...
[2026-08-02 00:17:43] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""
    assert sg(text)[0].outcome == "ready"


@pytest.mark.parametrize(("text", "cls"), [
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
     FailureClass.KV_CACHE_OOM),
    ("Exception: Capture cuda graph failed: CUDA out of memory.",
     FailureClass.CUDAGRAPH_CAPTURE_FAILED),
])
def test_sglang_failure_classes(text: str, cls: FailureClass) -> None:
    log = ("[2026-03-27 09:31:16] server_args=ServerArgs(model_path='m')\n"
           "[2026-03-27 09:32:00] Scheduler hit an exception: Traceback (most recent call "
           "last):\n  File \"/sgl/scheduler.py\", line 2000, in run_scheduler_process\n"
           f"{text}\n")
    facts, _ = sg(log)
    assert facts.failure_class is cls


def test_sglang_silent_death_during_capture() -> None:
    text = """\
[2026-03-27 09:31:16] server_args=ServerArgs(model_path='m', attention_backend='triton')
[2026-03-27 09:33:00] Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB
/usr/lib/python3.12/multiprocessing/resource_tracker.py:279: UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown
  warnings.warn('resource_tracker: There appear to be %d '
"""
    facts, extra = sg(text)
    assert facts.outcome == "failed" and extra.cuda_graph_captured is False
    assert facts.failure_class is FailureClass.CUDAGRAPH_CAPTURE_FAILED
    assert "leaked semaphore" in (facts.failure_reason or "")

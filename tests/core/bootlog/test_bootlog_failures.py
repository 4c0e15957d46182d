"""Each failure class with the line that proves it, and the errors that are not failures.

vLLM engine-core failures print ``EngineCore failed to start.`` and the traceback at ERROR
level, the traceback again raw from multiprocessing, then the API server's top-level
``RuntimeError: Engine core initialization failed`` (FORMATS.md section 11). The tests
build the same shape.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from servefleet.core.bootlog import BootFacts, BootLogParser, FailureClass, parse_text

F = FailureClass


def engine_core_failure(lines: Any, exception: str, frames: tuple[str, ...] = ()) -> str:
    """The three-part shape of a vLLM engine-core boot failure."""
    inner = ["run_engine_core", "__init__", *frames]
    return (
        lines.v1("EngineCore failed to start.", level="ERROR", source="core.py:1199")
        + lines.traceback(inner, exception, level="ERROR")
        + lines.raw("Process EngineCore:")
        + lines.traceback(["_bootstrap", "run", *inner], exception)
        + lines.traceback(["<module>", "main", "launch_core_engines"],
                          "RuntimeError: Engine core initialization failed. See root cause "
                          "above. Failed core proc(s): {}", process="APIServer pid=1")
    )


def failed(facts: BootFacts, cls: FailureClass) -> str:
    assert facts.outcome == "failed", facts.failure_reason
    assert facts.failure_class is cls, facts.failure_reason
    assert facts.failure_reason is not None
    return facts.failure_reason


@pytest.mark.parametrize(("exception", "cls"), [
    ("ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.", F.KV_CACHE_OOM),
    ("ValueError: Free memory on device (10.5/31.36 GiB) on startup is less than desired GPU "
     "memory utilization (0.9, 28.22 GiB). Decrease GPU memory utilization or reduce GPU "
     "memory used by other processes.", F.KV_CACHE_OOM),
    # 0.21.0 kv_cache_utils.py:715 spelled it "models's"; 0.25 "model's".
    ("ValueError: To serve at least one request with the models's max seq len (262144), "
     "(18.35 GiB KV cache is needed, which is larger than the available KV cache memory "
     "(8.72 GiB). Based on the available memory, the estimated maximum model length is "
     "121840.", F.MAX_MODEL_LEN_EXCEEDS_KV_CACHE),
    ("ValueError: To serve at least one request with the model's max seq len (262144), "
     "(18.35 GiB KV cache is needed", F.MAX_MODEL_LEN_EXCEEDS_KV_CACHE),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-abc)",
     F.MODEL_DOWNLOAD_OR_AUTH),
    ("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error.",
     F.MODEL_DOWNLOAD_OR_AUTH),
    ("ValueError: Invalid repository ID or local directory specified: 'org/missing'.",
     F.MODEL_DOWNLOAD_OR_AUTH),
    ("requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: "
     "https://huggingface.co/api/models/org/m", F.MODEL_DOWNLOAD_OR_AUTH),
    ("ValueError: Unknown quantization method: fp3. Must be one of ['awq', 'fp8'].",
     F.UNSUPPORTED_QUANTIZATION_OR_DTYPE),
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum "
     "capability: 89. Current capability: 86.", F.UNSUPPORTED_QUANTIZATION_OR_DTYPE),
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
     "Your Tesla T4 GPU has compute capability 7.5.", F.UNSUPPORTED_QUANTIZATION_OR_DTYPE),
    ("ValueError: Selected backend AttentionBackendEnum.TRITON_ATTN is not valid for this "
     "configuration. Reason: ['kv_cache_dtype not supported']", F.ATTENTION_BACKEND_UNSUPPORTED),
    ("torch._inductor.exc.InductorError: RuntimeError: Failed to run autotuning code block: "
     "CUDA out of memory. Tried to allocate 1.02 GiB.", F.CUDA_OOM),
    ("RuntimeError: Triton Error [CUDA]: device kernel image is invalid", F.GPU_RUNTIME_ERROR),
    ("KeyError: 'model.layers.0.mlp.gate_proj.weight'", F.OTHER),
])
def test_engine_core_boot_failure_classes(lines: Any, exception: str,
                                          cls: FailureClass) -> None:
    facts = parse_text(lines.engine_config() + engine_core_failure(lines, exception))
    reason = failed(facts, cls)
    assert reason == exception  # the root cause, not "Engine core initialization failed"
    assert exception[:40] in facts.evidence["failure_reason"][0].text


def test_oom_while_allocating_kv_cache(lines: Any) -> None:
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has "
           "a total capacity of 31.36 GiB of which 1.2 GiB is free.")
    facts = parse_text(lines.engine_config() + engine_core_failure(
        lines, oom, ("_initialize_kv_caches", "initialize_kv_cache_tensors")))
    failed(facts, F.KV_CACHE_OOM)


def test_oom_during_graph_capture(lines: Any) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    text = (lines.engine_config()
            + "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  40%|####  | 20/51\r"
            + engine_core_failure(lines, oom, ("capture_model", "_capture_cudagraphs")))
    failed(parse_text(text), F.CUDAGRAPH_CAPTURE_FAILED)


def test_capture_failure_message(lines: Any) -> None:
    exception = ("RuntimeError: CUDA error: operation not permitted when stream is capturing")
    failed(parse_text(engine_core_failure(lines, exception)), F.CUDAGRAPH_CAPTURE_FAILED)


def test_engine_core_died_without_root_cause(lines: Any) -> None:
    text = lines.engine_config() + lines.traceback(
        ["<module>", "main"], "RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {'EngineCore_DP0': -9}", process="APIServer pid=1")
    reason = failed(parse_text(text), F.ENGINE_CORE_DIED)
    assert reason.startswith("RuntimeError: Engine core initialization failed")


def test_api_server_config_error_before_engine_starts(lines: Any) -> None:
    exception = ("ValueError: Chunked MM input disabled but max_tokens_per_mm_item (2496) is "
                 "larger than max_num_batched_tokens (2048). Please increase "
                 "max_num_batched_tokens.")
    text = (lines.api("Resolved architecture: Gemma4ForConditionalGeneration")
            + lines.traceback(["<module>", "main", "cmd", "__init__"], exception,
                              process="APIServer pid=1"))
    facts = parse_text(text)
    assert failed(facts, F.OTHER) == exception
    assert facts.spec_decode is None
    assert facts.extra is not None and facts.extra.engine_init_completed is False  # type: ignore[union-attr]


def test_turboquant_assertion_after_ready_fails_the_server(lines: Any) -> None:
    assertion = ("AssertionError: Workspace is locked but allocation from "
                 "'turboquant_attn.py:757:_continuation_prefill' requires 2.00 MB, current size "
                 "is 0.26 MB. Workspace growth is not allowed after locking.")
    text = (lines.engine_config()
            + lines.api("Application startup complete.")
            + lines.api('127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
            + lines.v1("EngineCore encountered a fatal error.", level="ERROR",
                       source="core.py:710")
            + lines.traceback(["run_engine_core", "step", "_continuation_prefill"], assertion,
                              level="ERROR")
            + lines.traceback(["generate"], "vllm.v1.engine.exceptions.EngineDeadError: "
                              "EngineCore encountered an issue. See stack trace (above) for "
                              "the root cause.", process="APIServer pid=1", level="ERROR"))
    facts = parse_text(text)
    assert failed(facts, F.TURBOQUANT_CONTINUATION_PREFILL_ASSERTION) == assertion


def test_engine_death_after_ready(lines: Any) -> None:
    text = (lines.api("Application startup complete.")
            + lines.api("Engine core proc EngineCore_DP0 died unexpectedly, shutting down "
                        "client.", level="ERROR", source="core_client.py:564"))
    failed(parse_text(text), F.ENGINE_CORE_DIED)


# -- not failures -----------------------------------------------------------------------------
def test_warning_level_traceback_is_not_a_failure(lines: Any) -> None:
    text = (lines.engine_config()
            + lines.traceback(["<module>", "_find_and_load"], "ImportError: cannot import name "
                              "'_C' from partially initialized module", level="WARNING")
            + lines.api("Application startup complete."))
    assert parse_text(text).outcome == "ready"


def test_logged_import_failure_through_module_frames_is_not_a_crash(lines: Any) -> None:
    """``<module>`` frames in the middle of a traceback are import-time code, not the
    top level of the script."""
    text = (lines.engine_config()
            + lines.traceback(["import_kernels", "_find_and_load", "<module>"],
                              "ModuleNotFoundError: No module named 'flash_attn_3'",
                              level="ERROR"))
    assert parse_text(text).outcome == "incomplete"


@pytest.mark.parametrize("line", [
    "Error retrieving safetensors: Repo id must be in the form 'repo_name', retrying 1 of 2",
    "Cannot use FA version 2 is not supported due to FA2 is only supported on devices with "
    "compute capability >= 8",
    "Error with model object='error' message='The model `x` does not exist.' "
    "type='NotFoundError' param=None code=404",
])
def test_non_fatal_error_lines(lines: Any, line: str) -> None:
    text = (lines.engine_config() + lines.v1(line, level="ERROR")
            + lines.api("Application startup complete.") + lines.api(line, level="ERROR"))
    assert parse_text(text).outcome == "ready"


def test_request_exception_after_ready_is_not_a_failure(lines: Any) -> None:
    text = (lines.api("Application startup complete.")
            + lines.traceback(["create_chat_completion", "render"], "ValueError: This model's "
                              "maximum context length is 8192 tokens.", process="APIServer pid=1",
                              level="ERROR"))
    assert parse_text(text).outcome == "ready"


def test_errors_while_shutting_down_are_not_failures(lines: Any) -> None:
    text = (lines.api("Application startup complete.")
            + lines.api("Shutting down FastAPI HTTP server.", source="launcher.py:110")
            + lines.api("Engine core proc EngineCore_DP0 died unexpectedly, shutting down "
                        "client.", level="ERROR"))
    assert parse_text(text).outcome == "ready"


def test_offline_run_exit_is_not_a_failure(lines: Any) -> None:
    text = (lines.v1("init engine (profile, create kv cache, warmup model) took 9.00 seconds")
            + lines.v1("Supported tasks: ['generate']", process="", source="llm.py:344")
            + lines.v1("Engine core proc EngineCore_DP0 died unexpectedly, shutting down "
                       "client.", level="ERROR", process=""))
    assert parse_text(text).outcome == "ready"


def test_truncated_boot_is_incomplete(lines: Any) -> None:
    facts = parse_text(lines.engine_config()
                       + lines.v1("Loading weights took 3.00 seconds")
                       + "Capturing CUDA graphs (decode, FULL):  10%|#  | 5/51")
    assert facts.outcome == "incomplete" and facts.failure_reason is None
    assert facts.weights_load_seconds == 3.0


def test_turboquant_assertion_without_marker_while_serving(lines: Any) -> None:
    assertion = ("AssertionError: Workspace is locked but allocation from "
                 "'turboquant_attn.py:757:_continuation_prefill' requires 12.00 MB, current "
                 "size is 3.06 MB. Workspace growth is not allowed after locking.")
    text = (lines.api("Application startup complete.")
            + lines.v1(assertion, level="ERROR", source="core.py:1138"))
    failed(parse_text(text), F.TURBOQUANT_CONTINUATION_PREFILL_ASSERTION)


def serving_then_crash(lines: Any) -> str:
    """Ready, request errors with tracebacks, then the API server dies at top level."""
    request_error = lines.traceback(
        ["create_chat_completion", "_preprocess_chat"], "ValueError: This model's maximum "
        "context length is 8192 tokens.", process="APIServer pid=1", level="ERROR")
    crash = lines.traceback(["<module>", "main", "run_server"], "OSError: [Errno 24] Too many "
                            "open files", process="APIServer pid=1")
    return (lines.engine_config() + lines.api("Application startup complete.")
            + request_error * 30 + crash + request_error * 5)


def test_top_level_crash_while_serving(lines: Any) -> None:
    facts = parse_text(serving_then_crash(lines))
    assert failed(facts, F.OTHER) == "OSError: [Errno 24] Too many open files"
    assert facts.evidence["outcome"][-1].text.endswith(", in <module>")


def test_serving_paths_do_not_depend_on_chunking(lines: Any) -> None:
    data = serving_then_crash(lines).encode()
    whole = parse_text(data.decode()).to_json_dict()
    rng = random.Random(3)
    for _ in range(40):
        parser = BootLogParser()
        at = 0
        while at < len(data):
            size = rng.randint(1, 400)
            parser.feed(data[at:at + size])
            at += size
        assert parser.close().to_json_dict() == whole

"""The stand-in's vLLM boot log: real line anatomy and format strings, per release, and
figures that follow the arguments and the node."""

from __future__ import annotations

import re

import pytest
from standin_helpers import READY_VLLM, free_port

from servefleet.core.bootlog import parse_text

SEED_001 = [
    "Qwen/Qwen3.6-35B-A3B-FP8", "--max-model-len", "131072", "--max-num-batched-tokens", "16384",
    "--gpu-memory-utilization", "0.45", "--max-num-seqs", "32", "--kv-cache-dtype", "fp8_e4m3",
    "--enable-chunked-prefill", "--enable-prefix-caching", "--no-async-scheduling",
]
MTP = ["--speculative-config", '{"method":"qwen3_next_mtp","num_speculative_tokens":2}']
GB10 = {"STANDIN_GPU_NAME": "NVIDIA GB10", "STANDIN_GPU_MEMORY_GIB": "128",
        "STANDIN_UNIFIED_MEMORY": "1", "STANDIN_COMPUTE_CAPABILITY": "12.1"}

# Line anatomy (FORMATS.md §0) and the format strings of serving.md C.
PREFIX = (r"\((APIServer|EngineCore) pid=\d+\) (INFO|WARNING|ERROR) "
          r"\d\d-\d\d \d\d:\d\d:\d\d \[[a-z_0-9]+\.py:\d+\] ")
FORMATS = {
    "banner": r"\(APIServer pid=\d+\) INFO .* version {version}\r?$",
    "non_default": r"non-default args: \{'model_tag': 'Qwen/Qwen3\.6-35B-A3B-FP8'",
    "architecture": r"Resolved architecture: Qwen3_5MoeForConditionalGeneration$",
    "weights": r"Loading weights took \d+\.\d\d seconds$",
    "model_loading": r"Model loading took \d+(\.\d{1,2})? GiB memory and \d+\.\d{6} seconds$",
    "available": r"Available KV cache memory: -?\d+(\.\d{1,2})? GiB$",
    "moe": r"Using default MoE config\. Performance might be sub-optimal! Config file not found at "
           r"\S+/E=256,N=512,device_name=NVIDIA_GB10[^ ]*\.json$",
    "backend": r"Using FLASHINFER attention backend out of potential backends: "
               r"\['FLASHINFER', 'TRITON_ATTN'\]\.$",
    "init_engine": r"init engine \(profile, create kv cache, warmup model\) took [\d.]+ s",
    "starting": r"Starting vLLM server on http://0\.0\.0\.0:\d+$",
}


def boot(standin, version: str, extra: list[str], env: dict[str, str] | None = None):
    port = free_port()
    proc = standin("vllm", ["serve", *SEED_001, *extra, "--port", str(port)],
                   env={"STANDIN_ENGINE_VERSION": version, **GB10, **(env or {})})
    assert proc.wait_for(READY_VLLM), proc.stdout[-2000:] + proc.stderr
    return proc, port


def lines(text: str) -> list[str]:
    return [line for chunk in text.split("\n") for line in chunk.split("\r")]


@pytest.mark.parametrize("version", ["0.19.1", "0.21.0", "0.28.0", "0.31.0"])
def test_boot_log_has_the_real_lines_of_each_release(standin, version: str) -> None:
    proc, _ = boot(standin, version, [])
    text = proc.stdout
    logged = [line for line in lines(text) if re.match(PREFIX, line)]
    assert len(logged) > 40
    for name, pattern in FORMATS.items():
        rx = re.compile(pattern.replace("{version}", re.escape(version)), re.MULTILINE)
        assert rx.search(text), f"{name}: {pattern}"
    engine_prefix = "(EngineCore pid=" if version >= "0.19" else "(EngineCore_DP0 pid="
    assert engine_prefix in text
    kv = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    conc = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", text)
    assert kv and conc and conc.group(1) == "131,072"
    merged = re.search(r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency", text)
    assert bool(merged) == (version >= "0.28")
    async_line = "Asynchronous scheduling is disabled." in text
    assert async_line == (version < "0.28")
    capture = "Capturing CUDA graphs (decode, FULL)" in text
    assert capture and "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)" in text
    assert "setting cudagraph_mode=PIECEWISE" not in text
    assert text.rstrip().endswith("INFO:     Application startup complete.")


def test_seed_001_figures_on_a_gb10(standin) -> None:
    """0.19.1 states the pool as blocks x block size: 360k tokens, 323,456 with MTP."""
    plain, _ = boot(standin, "0.19.1", [])
    mtp, _ = boot(standin, "0.19.1", MTP)
    assert "GPU KV cache size: 360,512 tokens" in plain.stdout
    assert "GPU KV cache size: 323,456 tokens" in mtp.stdout
    assert "Maximum concurrency for 131,072 tokens per request: 8.24x" in mtp.stdout
    assert "Model loading took 34.23 GiB memory" in plain.stdout
    assert "Model loading took 35.02 GiB memory" in mtp.stdout
    assert "Loading weights took 289.00 seconds" in plain.stdout


def test_mtp_downgrades_cuda_graphs_on_flashinfer_and_shrinks_the_pool(standin) -> None:
    plain, _ = boot(standin, "0.21.0", [])
    mtp, _ = boot(standin, "0.21.0", MTP)
    text = mtp.stdout
    assert ("CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention "
            "backend FlashInferBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); "
            "setting cudagraph_mode=PIECEWISE") in text
    assert "Capturing CUDA graphs (decode, FULL)" not in text
    assert "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)" in text
    for shared in ("embedding", "lm_head"):
        assert (f"Detected MTP model. Sharing target model {shared} weights with the draft "
                "model.") in text
    assert "method `qwen3_next_mtp` is deprecated and replaced with mtp." in text
    assert "Resolved architecture: Qwen3_5MoeMTP" in text
    plain_facts, mtp_facts = parse_text(plain.stdout), parse_text(text)
    assert plain_facts.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert mtp_facts.cudagraph_mode == "PIECEWISE"
    assert plain_facts.kv_cache_tokens and mtp_facts.kv_cache_tokens
    ratio = mtp_facts.kv_cache_tokens / plain_facts.kv_cache_tokens
    assert 0.75 < ratio < 0.95
    assert mtp_facts.max_concurrency < plain_facts.max_concurrency


def test_flash_attention_keeps_full_graphs_with_mtp(standin) -> None:
    # Auto KV dtype on SM12x picks FLASH_ATTN (FA2: UNIFORM_BATCH), so no downgrade.
    port = free_port()
    proc = standin("vllm", ["serve", "RedHatAI/Qwen3.6-35B-A3B-NVFP4", "--max-model-len", "262144",
                            "--gpu-memory-utilization", "0.85", "--max-num-seqs", "32", *MTP,
                            "--port", str(port)], env={"STANDIN_ENGINE_VERSION": "0.25.1", **GB10})
    assert proc.wait_for(READY_VLLM)
    text = proc.stdout
    assert "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', " \
        "'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']." in text
    assert "Using FlashAttention version 2" in text
    assert "setting cudagraph_mode" not in text
    assert "Capturing CUDA graphs (decode, FULL)" in text
    assert "Add 3 padding layers, may waste at most 10.00% KV cache memory" in text
    assert "Using default MoE config" not in text  # NVFP4 MoE does not run on Triton


def test_figures_follow_memory_utilization_and_kv_dtype(standin) -> None:
    def tokens(extra: list[str], env: dict[str, str] | None = None) -> int:
        port = free_port()
        args = ["serve", "Qwen/Qwen3.6-35B-A3B-FP8", "--max-model-len", "131072", *extra,
                "--port", str(port)]
        env = {"STANDIN_ENGINE_VERSION": "0.21.0", **GB10, **(env or {})}
        proc = standin("vllm", args, env=env)
        assert proc.wait_for(READY_VLLM)
        facts = parse_text(proc.stdout)
        assert facts.kv_cache_tokens is not None
        return facts.kv_cache_tokens

    base = tokens(["--gpu-memory-utilization", "0.5"])
    more = tokens(["--gpu-memory-utilization", "0.6"])
    fp8 = tokens(["--gpu-memory-utilization", "0.5", "--kv-cache-dtype", "fp8"])
    tq = tokens(["--gpu-memory-utilization", "0.5", "--kv-cache-dtype", "turboquant_4bit_nc"])
    smaller_node = tokens(["--gpu-memory-utilization", "0.5"], {"STANDIN_GPU_MEMORY_GIB": "110"})
    assert more > base > smaller_node
    assert 1.7 < fp8 / base < 2.3
    assert 1.7 < tq / fp8 < 2.3


def test_weights_that_do_not_fit_fail_like_vllm(standin) -> None:
    port = free_port()
    proc = standin("vllm", ["serve", "Qwen/Qwen3.6-35B-A3B-FP8", "--gpu-memory-utilization", "0.2",
                            "--port", str(port)], env={"STANDIN_ENGINE_VERSION": "0.21.0", **GB10})
    assert proc.wait_exit() == 1
    facts = parse_text(proc.stdout)
    assert facts.outcome == "failed"
    assert facts.failure_class == "kv_cache_oom"
    assert "ValueError: No available memory for the cache blocks." in proc.stdout
    assert "EngineCore failed to start." in proc.stdout
    assert "RuntimeError: Engine core initialization failed. See root cause above." in proc.stdout


def test_a_request_longer_than_the_pool_fails_with_the_kv_too_small_error(standin) -> None:
    port = free_port()
    proc = standin("vllm", ["serve", "Qwen/Qwen3.6-35B-A3B-FP8", "--gpu-memory-utilization", "0.32",
                            "--max-model-len", "262144", "--kv-cache-dtype", "auto",
                            "--port", str(port)], env={"STANDIN_ENGINE_VERSION": "0.21.0", **GB10})
    assert proc.wait_exit() == 1
    assert "ValueError: To serve at least one request with the models's max seq len (262144)" \
        in proc.stdout
    assert parse_text(proc.stdout).failure_class == "max_model_len_exceeds_kv_cache"


def test_the_boot_log_parses_to_the_figures_it_states(standin) -> None:
    proc, _ = boot(standin, "0.21.0", MTP)
    facts = parse_text(proc.stdout)
    assert facts.engine == "vllm"
    assert facts.engine_version == "0.21.0"
    assert facts.outcome == "ready"
    assert facts.architecture == "Qwen3_5MoeForConditionalGeneration"
    assert facts.attention_backend == "FLASHINFER"
    assert facts.spec_decode is True
    assert facts.model_load_gib == 35.02
    assert facts.weights_load_seconds == 289.0
    assert facts.max_concurrency_at_tokens == 131072
    conc = re.search(r"per request: ([\d.]+)x", proc.stdout)
    kv = re.search(r"GPU KV cache size: ([\d,]+) tokens", proc.stdout)
    assert conc and kv
    assert facts.max_concurrency == float(conc.group(1))
    assert facts.kv_cache_tokens == int(kv.group(1).replace(",", ""))

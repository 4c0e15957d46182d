"""Engine command builders: one exact argv per case."""

from __future__ import annotations

from typing import Any

import pytest

from servefleet.core.models import Profile
from servefleet.core.render import diff_flags, engine_command, engine_flags

DIGEST = "sha256:" + "ab" * 32


def make_profile(engine: str = "vllm", **fields: Any) -> Profile:
    """A minimal valid profile with ``fields`` on top."""
    data: dict[str, Any] = {
        "name": "p",
        "engine": engine,
        "engine_version": "0.21.0" if engine == "vllm" else "b8680",
        "image": {"ref": "vllm/vllm-openai:v0.21.0" if engine == "vllm"
                  else "ghcr.io/ggml-org/llama.cpp:server-cuda", "digest": DIGEST},
        "model": {"id": "Org/Model-1", "served_name": "m1"},
    }
    data.update(fields)
    return Profile.model_validate(data)


@pytest.fixture(scope="module")
def shipped(kit: Any) -> dict[str, Profile]:
    profiles: dict[str, Profile] = kit.shipped_project().profiles
    return profiles


def test_vllm_qwen36_fp8_production_flags(shipped: dict[str, Profile]) -> None:
    assert engine_command(shipped["qwen36-fp8"], 8001) == [
        "Qwen/Qwen3.6-35B-A3B-FP8",
        "--served-model-name", "qwen36",
        "--host", "0.0.0.0",
        "--port", "8001",
        "--gpu-memory-utilization", "0.45",
        "--max-model-len", "131072",
        "--max-num-seqs", "32",
        "--max-num-batched-tokens", "16384",
        "--kv-cache-dtype", "fp8_e4m3",
        "--enable-chunked-prefill",
        "--enable-prefix-caching",
        "--no-async-scheduling",
        "--attention-backend", "FLASHINFER",
        "--reasoning-parser", "qwen3",
        "--tool-call-parser", "qwen3_coder",
        "--enable-auto-tool-choice",
        "--default-chat-template-kwargs", '{"enable_thinking":false}',
    ]


def test_vllm_mtp_adds_only_the_speculative_config(shipped: dict[str, Profile]) -> None:
    base = engine_command(shipped["qwen36-fp8"], 8000)
    mtp = engine_command(shipped["qwen36-fp8-mtp"], 8000)
    at = base.index("--attention-backend")
    assert mtp == [*base[:at], "--speculative-config",
                   '{"method":"qwen3_next_mtp","num_speculative_tokens":2}', *base[at:]]


def test_vllm_never_starts_with_serve(shipped: dict[str, Profile]) -> None:
    for profile in shipped.values():
        argv = engine_command(profile, 8000)
        assert argv[0] != "serve"
        if profile.engine == "vllm":
            assert argv[0] == profile.model.id


def test_vllm_hf_overrides_are_compact_sorted_json(shipped: dict[str, Profile]) -> None:
    argv = engine_command(shipped["qwen36-w8a16-1m"], 8000)
    assert argv[argv.index("--hf-overrides") + 1] == (
        '{"text_config":{"rope_parameters":{"factor":4.0,"mrope_interleaved":true,'
        '"mrope_section":[11,11,10],"original_max_position_embeddings":262144,'
        '"partial_rotary_factor":0.25,"rope_theta":10000000,"rope_type":"yarn"}}}'
    )
    assert "--generation-config" not in argv  # the 1M variant sets it back to null


def test_vllm_every_knob_in_its_place() -> None:
    profile = make_profile(
        model={"id": "Org/Model-1", "served_name": "m1", "revision": "fp8-head"},
        vllm={
            "gpu_memory_utilization": 0.9,
            "max_model_len": 4096,
            "max_num_seqs": 8,
            "max_num_batched_tokens": 8192,
            "kv_cache_dtype": "turboquant_4bit_nc",
            "enable_chunked_prefill": False,
            "enable_prefix_caching": False,
            "async_scheduling": True,
            "speculative": {"method": "eagle3", "num_speculative_tokens": 3,
                            "model": "Org/Draft"},
            "tensor_parallel_size": 2,
            "dtype": "bfloat16",
            "quantization": "modelopt_fp4",
            "attention_backend": "TURBOQUANT",
            "reasoning_parser": "qwen3",
            "tool_call_parser": "hermes",
            "enable_auto_tool_choice": True,
            "default_chat_template_kwargs": {"z": 1, "enable_thinking": False},
            "thinking_token_budget": 512,
            "generation_config": "vllm",
            "hf_overrides": {"b": [1, 2], "a": "x y"},
            "trust_remote_code": True,
            "language_model_only": True,
            "enforce_eager": True,
            "extra_args": ["--max-logprobs=5", "--disable-log-requests"],
        },
    )
    assert engine_command(profile, 9000) == [
        "Org/Model-1",
        "--revision", "fp8-head",
        "--served-model-name", "m1",
        "--host", "0.0.0.0",
        "--port", "9000",
        "--gpu-memory-utilization", "0.9",
        "--max-model-len", "4096",
        "--max-num-seqs", "8",
        "--max-num-batched-tokens", "8192",
        "--kv-cache-dtype", "turboquant_4bit_nc",
        "--no-enable-chunked-prefill",
        "--no-enable-prefix-caching",
        "--async-scheduling",
        "--speculative-config",
        '{"method":"eagle3","model":"Org/Draft","num_speculative_tokens":3}',
        "--tensor-parallel-size", "2",
        "--dtype", "bfloat16",
        "--quantization", "modelopt_fp4",
        "--attention-backend", "TURBOQUANT",
        "--reasoning-parser", "qwen3",
        "--tool-call-parser", "hermes",
        "--enable-auto-tool-choice",
        "--default-chat-template-kwargs", '{"enable_thinking":false,"z":1}',
        "--generation-config", "vllm",
        "--hf-overrides", '{"a":"x y","b":[1,2]}',
        "--trust-remote-code",
        "--language-model-only",
        "--enforce-eager",
        "--max-logprobs=5",
        "--disable-log-requests",
    ]


def test_vllm_defaults_render_only_identity_flags() -> None:
    assert engine_command(make_profile(), 8000) == [
        "Org/Model-1", "--served-model-name", "m1", "--host", "0.0.0.0", "--port", "8000",
    ]


def test_llamacpp_shipped_q4_profile(shipped: dict[str, Profile]) -> None:
    assert engine_command(shipped["qwen36-q4-llamacpp"], 8080) == [
        "-m", "/models/Qwen3.6-35B-A3B-Q4_K_M.gguf",
        "--alias", "qwen36-q4",
        "--host", "0.0.0.0",
        "--port", "8080",
        "-c", "65536",
        "-np", "1",
        "-ngl", "all",
        "-fa", "on",
        "-ctk", "q8_0",
        "-ctv", "q8_0",
        "-b", "2048",
        "-ub", "512",
        "--jinja",
        "--metrics",
        "-lv", "4",
        "--no-cache-prompt",
    ]


def test_llamacpp_every_knob_in_its_place() -> None:
    profile = make_profile(
        engine="llama.cpp",
        llamacpp={"gguf": "/models/m.gguf", "ctx_size": 0, "parallel": 4, "gpu_layers": 99,
                  "flash_attn": "auto", "jinja": False, "reasoning_budget": 0,
                  "host": "127.0.0.1", "metrics": False, "cache_prompt": True, "seed": 42,
                  "log_verbosity": 2, "extra_args": ["--threads=8", "--no-mmap"]},
    )
    assert engine_command(profile, 9931) == [
        "-m", "/models/m.gguf",
        "--alias", "m1",
        "--host", "127.0.0.1",
        "--port", "9931",
        "-c", "0",
        "-np", "4",
        "-ngl", "99",
        "-fa", "auto",
        "--no-jinja",
        "--reasoning-budget", "0",
        "-lv", "2",
        "--cache-prompt",
        "--seed", "42",
        "--threads", "8",
        "--no-mmap",
    ]


def test_llamacpp_minimal_keeps_gpu_and_flash_attention_defaults() -> None:
    profile = make_profile(engine="llama.cpp", llamacpp={"gguf": "/models/m.gguf"})
    assert engine_command(profile, 8000) == [
        "-m", "/models/m.gguf", "--alias", "m1", "--host", "0.0.0.0", "--port", "8000",
        "-ngl", "all", "-fa", "on", "--jinja", "--metrics", "-lv", "4",
    ]


def test_engine_flags_mapping_without_and_with_port(shipped: dict[str, Profile]) -> None:
    flags = engine_flags(shipped["qwen36-fp8-mtp"])
    assert list(flags)[:3] == ["--model", "--served-model-name", "--gpu-memory-utilization"]
    assert flags["--model"] == "Qwen/Qwen3.6-35B-A3B-FP8"
    assert flags["--no-async-scheduling"] is None
    assert flags["--speculative-config"] == \
        '{"method":"qwen3_next_mtp","num_speculative_tokens":2}'
    assert "--port" not in flags and "--host" not in flags
    with_port = engine_flags(shipped["qwen36-fp8-mtp"], port=8001)
    assert with_port["--port"] == "8001" and with_port["--host"] == "0.0.0.0"


def test_diff_of_mtp_overlay_is_exactly_the_speculative_config(
        shipped: dict[str, Profile]) -> None:
    diff = diff_flags(engine_flags(shipped["qwen36-fp8"]), engine_flags(shipped["qwen36-fp8-mtp"]))
    assert diff.lines() == [
        '+ --speculative-config {"method":"qwen3_next_mtp","num_speculative_tokens":2}',
    ]
    assert diff.to_json() == {
        "added": {"--speculative-config":
                  '{"method":"qwen3_next_mtp","num_speculative_tokens":2}'},
        "removed": {},
        "changed": {},
    }


def test_diff_pairs_boolean_twins_and_reports_value_changes() -> None:
    a = make_profile(vllm={"async_scheduling": False, "max_num_seqs": 8,
                           "enable_auto_tool_choice": True, "tool_call_parser": "hermes"})
    b = make_profile(vllm={"async_scheduling": True, "max_num_seqs": 16,
                           "enable_prefix_caching": False,
                           "default_chat_template_kwargs": {"enable_thinking": False}})
    diff = diff_flags(engine_flags(a), engine_flags(b))
    assert diff.lines() == [
        "- --tool-call-parser hermes",
        "- --enable-auto-tool-choice",
        "+ --no-enable-prefix-caching",
        '+ --default-chat-template-kwargs {"enable_thinking":false}',
        "~ --max-num-seqs: 8 -> 16",
        "~ --async-scheduling: --no-async-scheduling -> --async-scheduling",
    ]
    assert diff_flags(engine_flags(a), engine_flags(a)).empty


def test_mapping_order_in_the_profile_does_not_change_the_command() -> None:
    one = make_profile(vllm={"hf_overrides": {"a": 1, "b": {"y": 2, "x": 1}}})
    two = make_profile(vllm={"hf_overrides": {"b": {"x": 1, "y": 2}, "a": 1}})
    assert engine_command(one, 8000) == engine_command(two, 8000)

"""The stand-in's ``vllm serve`` command line against the real one.

Expected error texts are what the real ``vllm`` CLI of the same release printed for the
same arguments (run from the PyPI wheels; argparse reports unknown arguments from the
top-level ``vllm`` parser and bad values from the ``vllm serve`` sub-parser).
"""

from __future__ import annotations

from servefleet.sim.standin import CONTEXT_DIR

MODEL = "Qwen/Qwen3.6-35B-A3B-FP8"


def _run_cli(standin, args: list[str], version: str = "0.21.0") -> tuple[int, str, str]:
    proc = standin("vllm", args, env={"STANDIN_ENGINE_VERSION": version})
    code = proc.wait_exit()
    return code, proc.stdout, proc.stderr


def test_an_unknown_flag_is_rejected_like_vllm_does(standin) -> None:
    code, out, err = _run_cli(standin, ["serve", MODEL, "--foo-bar", "3"])
    assert code == 2
    assert "usage: vllm [-h] [-v]" in err
    assert err.rstrip().endswith("vllm: error: unrecognized arguments: --foo-bar 3")
    assert out == ""


def test_serve_given_twice_is_rejected(standin) -> None:
    # The image's entrypoint is already `vllm serve`; a command that repeats it fails.
    code, _, err = _run_cli(standin, ["serve", "vllm", "serve", MODEL])
    assert code == 2
    assert f"vllm: error: unrecognized arguments: serve {MODEL}" in err


def test_a_flag_newer_than_the_release_is_rejected(standin, monkeypatch) -> None:
    # --mamba-backend exists in 0.21.0 but not in 0.19.1.
    monkeypatch.syspath_prepend(str(CONTEXT_DIR))
    from standin_engine.vllm_cli import parse_serve_args

    assert parse_serve_args([MODEL, "--mamba-backend", "triton"], (0, 21, 0)).model == MODEL
    code, _, err = _run_cli(standin, ["serve", MODEL, "--mamba-backend", "triton"], "0.19.1")
    assert code == 2
    assert err.rstrip().endswith("vllm: error: unrecognized arguments: --mamba-backend triton")


def test_turboquant_kv_dtype_is_an_invalid_choice_before_0_20(standin) -> None:
    code, _, err = _run_cli(standin, ["serve", MODEL, "--kv-cache-dtype", "turboquant_4bit_nc"],
                            "0.19.1")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'turboquant_4bit_nc' "
        "(choose from 'auto', 'bfloat16', 'float16', 'fp8', 'fp8_ds_mla', 'fp8_e4m3', "
        "'fp8_e5m2', 'fp8_inc')"
    )


def test_bad_values_get_argparse_messages(standin) -> None:
    code, _, err = _run_cli(standin, ["serve", MODEL, "--max-model-len", "lots"])
    assert code == 2
    assert "usage: vllm serve [model_tag] [options]" in err
    assert ("vllm serve: error: argument --max-model-len: invalid human_readable_int_or_auto "
            "value: 'lots'") in err
    code, _, err = _run_cli(standin, ["serve", MODEL, "--speculative-config", "{bad"])
    assert code == 2
    assert "argument --speculative-config/-sc: Value {bad cannot be converted to <function loads" \
        in err


def test_auto_tool_choice_needs_a_parser(standin) -> None:
    code, out, err = _run_cli(standin, ["serve", MODEL, "--enable-auto-tool-choice"])
    assert code == 1
    assert "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser" in err
    assert "Starting vLLM server" not in out


def test_turboquant_is_not_a_quantization_method(standin) -> None:
    code, out, _ = _run_cli(standin, ["serve", MODEL, "--quantization", "turboquant"])
    assert code == 1
    assert "Value error, Unknown quantization method: turboquant. Must be one of ['awq'," in out
    assert "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig" in out


def test_turboquant_on_a_hybrid_model_is_rejected_before_0_21(standin) -> None:
    code, out, _ = _run_cli(standin, ["serve", MODEL, "--kv-cache-dtype", "turboquant_4bit_nc"],
                            "0.20.0")
    assert code == 1
    assert ("NotImplementedError: TurboQuant KV cache is not supported for hybrid (attention + "
            "Mamba) models. Boundary layer protection requires uniform attention layers.") in out


def test_spellings_and_values_are_parsed_like_vllm(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(CONTEXT_DIR))
    from standin_engine.vllm_cli import non_default_args, parse_serve_args

    args = parse_serve_args([
        MODEL, "--max_model_len", "128K", "--no-enable-prefix-caching", "-O", "3",
        "--compilation-config.cudagraph_mode=PIECEWISE", "--served-model-name", "a", "b",
        "--hf-overrides", '{"rope_theta": 1}', "--default-chat-template-kwargs",
        '{"enable_thinking": false}', "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 2}', "--tensor-parallel-size", "1",
        "--max-num-batched-tokens", "25.6k",
    ], (0, 21, 0))
    assert args.max_model_len == 131072
    assert args.max_num_batched_tokens == 25600
    assert args.enable_prefix_caching is False
    assert args.optimization_level == "3"
    assert args.compilation_config == {"cudagraph_mode": "PIECEWISE"}
    assert args.served_model_name == ["a", "b"]
    assert args.hf_overrides == {"rope_theta": 1}
    assert args.default_chat_template_kwargs == {"enable_thinking": False}
    shown = non_default_args(args, (0, 21, 0))
    assert list(shown)[:1] == ["model_tag"]
    assert shown["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert "tensor_parallel_size" not in shown  # the default value is not "non-default"

"""Extra-argument, flag-version, environment and version-format rules."""

from __future__ import annotations

import pytest


def test_extra_args_duplicate_managed_flag(kit):
    bad = kit.profile(vllm={"extra_args": ["--performance-mode=throughput", "--max-num-seqs=8"]})
    finding = kit.only("extra-args-duplicate-managed-flag", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.extra_args[1]",
                       value="--max-num-seqs=8", why="argparse", fix="vllm.max_num_seqs")
    good = kit.profile(vllm={"extra_args": ["--performance-mode=throughput"]})
    assert not kit.run("extra-args-duplicate-managed-flag", kit.alone(good))


@pytest.mark.parametrize(("arg", "field"), [
    ("--no-enable-prefix-caching", "vllm.enable_prefix_caching"),
    ("--speculative-config.method=mtp", "vllm.speculative"),
    ("--served-model-name=other", "model.served_name"),
    ("--api-key=sk-123", "servefleet:apiKey"),
])
def test_extra_args_duplicate_spellings(kit, arg, field):
    bad = kit.profile(vllm={"extra_args": [arg]})
    assert field in kit.only("extra-args-duplicate-managed-flag", kit.alone(bad)).fix


def test_extra_args_duplicate_llamacpp(kit):
    bad = kit.llamacpp(llamacpp={"extra_args": ["--threads=8", "--no-cache-prompt"]})
    finding = kit.only("extra-args-duplicate-managed-flag", kit.alone(bad))
    kit.assert_message(finding, file="profiles/q.yaml", field="llamacpp.extra_args[1]",
                       value="--no-cache-prompt", why="argparse", fix="llamacpp.cache_prompt")


def test_flag_not_in_version(kit):
    bad = kit.profile(engine_version="0.15.0", vllm={"language_model_only": True})
    finding = kit.only("flag-not-in-version", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="vllm.language_model_only",
                       value="true", why="first checked release", fix="vLLM ≥ 0.17")
    assert "--language-model-only" in finding.message
    good = kit.profile(engine_version="0.17.0", vllm={"language_model_only": True})
    assert not kit.run("flag-not-in-version", kit.alone(good))


@pytest.mark.parametrize(("version", "vllm", "field"), [
    ("0.13.0", {"default_chat_template_kwargs": {"enable_thinking": False}},
     "vllm.default_chat_template_kwargs"),
    ("0.11.0", {"attention_backend": "FLASHINFER"}, "vllm.attention_backend"),
    ("0.17.0", {"thinking_token_budget": 1024}, "vllm.thinking_token_budget"),
    ("0.17.0", {"extra_args": ['--reasoning-config={"reasoning_parser":"qwen3"}']},
     "vllm.extra_args[0]"),
])
def test_flag_not_in_version_cases(kit, version, vllm, field):
    bad = kit.profile(engine_version=version, vllm=vllm)
    assert kit.only("flag-not-in-version", kit.alone(bad)).field == field
    assert not kit.run("flag-not-in-version", kit.alone(kit.profile(vllm=vllm)))


def test_env_var_not_in_version(kit):
    bad = kit.profile(env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"})
    finding = kit.only("env-var-not-in-version", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="env.VLLM_ATTENTION_BACKEND",
                       value="VLLM_ATTENTION_BACKEND=FLASHINFER", why="vllm/envs.py",
                       fix="remove env.VLLM_ATTENTION_BACKEND")
    old = kit.profile(engine_version="0.13.0", env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"})
    assert not kit.run("env-var-not-in-version", kit.alone(old))
    too_early = kit.profile(engine_version="0.17.0",
                            env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"})
    assert kit.run("env-var-not-in-version", kit.alone(too_early))


def test_engine_version_unparsed(kit):
    bad = kit.profile(engine_version="nightly")
    finding = kit.only("engine-version-unparsed", kit.alone(bad))
    kit.assert_message(finding, file="profiles/p.yaml", field="engine_version",
                       value="nightly", why="per release", fix="0.19.1rc1.dev328")
    # Version-dependent rules stay quiet rather than guess.
    tq = kit.profile(engine_version="nightly", vllm={"kv_cache_dtype": "turboquant_4bit_nc"})
    assert {f.rule for f in kit.run("engine-version-unparsed", kit.alone(tq))} == {
        "engine-version-unparsed"}
    assert not kit.run("turboquant-needs-newer-vllm", kit.alone(tq))
    assert not kit.run("engine-version-unparsed", kit.alone(kit.profile()))

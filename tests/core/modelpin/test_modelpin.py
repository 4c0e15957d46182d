"""The pure parts of ``models pin``: the spec, the weight files among what a revision
publishes, the planner's verdict in one line, and the profile edit that keeps the text."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from servefleet.core.errors import ConfigError
from servefleet.core.modelpin import (
    ProfilePin,
    parse_spec,
    pin_command,
    pin_folder,
    pinned_checkpoint,
    planner_verdict,
    weight_files,
    write_pin,
)
from servefleet.core.models import Profile
from tests.core.kvplan.test_refusals import (
    GPT_OSS_120B,
    LLAMA31_8B,
    MISTRAL_7B_V01,
    MODELOPT_NVFP4,
    NEMOTRON_H_8B,
    NEMOTRON_H_MTP,
)
from tests.reference_project import REPO_ROOT

COMMIT = "0123456789abcdef0123456789abcdef01234567"
QWEN = json.loads((REPO_ROOT / "profiles" / "models" / "qwen3.6-35b-a3b.config.json").read_text())
SRC = "profiles/models/x/config.json"


def test_spec_and_folder():
    assert parse_spec("org/name").revision is None
    assert parse_spec("org/name@fp8-head").revision == "fp8-head"
    assert parse_spec("org/name@refs/pr/1").asked == "refs/pr/1"
    for bad in ("name", "org/name@", "org/../x", "org/name@a b", "org/name@../x"):
        with pytest.raises(ConfigError):
            parse_spec(bad)
    assert pin_folder("openai/gpt-oss-120b", COMMIT) == \
        "models/openai--gpt-oss-120b@0123456789ab"


def test_weights_are_the_index_shards_else_the_top_level_safetensors():
    sizes = {"a-1.safetensors": 3 * 1024**3, "a-2.safetensors": 1024**3 // 2,
             "original/a.safetensors": 10**12, "consolidated.safetensors": 10**12,
             "config.json": 100}
    index = json.dumps({"weight_map": {"x": "a-1.safetensors", "y": "a-2.safetensors",
                                       "z": "a-1.safetensors"}}).encode()
    by_index = weight_files("o/n", COMMIT, sizes, index)
    assert by_index.files == ("a-1.safetensors", "a-2.safetensors") and by_index.gib == 3.5
    plain = weight_files("o/n", COMMIT, sizes)
    assert plain.files == ("a-1.safetensors", "a-2.safetensors")
    assert weight_files("o/n", COMMIT, {"model.safetensors": 1}).gib == 0.01  # never 0
    with pytest.raises(ConfigError, match=r"names b\.safetensors, which the revision does not"):
        weight_files("o/n", COMMIT, sizes, b'{"weight_map": {"x": "b.safetensors"}}')
    with pytest.raises(ConfigError, match=r"publishes no size for model\.safetensors"):
        weight_files("o/n", COMMIT, {"model.safetensors": None})
    with pytest.raises(ConfigError, match=r"no \*\.safetensors nor \*\.gguf"):
        weight_files("o/n", COMMIT, {"config.json": 1})


def test_gguf_weights_are_one_model_with_its_split_parts():
    sizes = {"Q4_K_M.gguf": 20, "Q8_0-00001-of-00002.gguf": 30, "Q8_0-00002-of-00002.gguf": 5}
    with pytest.raises(ConfigError, match=r"2 GGUF models .*--gguf FILE"):
        weight_files("o/n", COMMIT, sizes)
    split = weight_files("o/n", COMMIT, sizes, gguf="Q8_0-00001-of-00002.gguf")
    assert split.kind == "gguf" and split.total_bytes == 35
    assert weight_files("o/n", COMMIT, {"Q4_K_M.gguf": 20}).files == ("Q4_K_M.gguf",)
    with pytest.raises(ConfigError, match=r"no GGUF file 'Q2\.gguf'"):
        weight_files("o/n", COMMIT, sizes, gguf="Q2.gguf")


def test_the_verdict_is_the_planners_reading_or_its_refusal():
    llama = planner_verdict(LLAMA31_8B, SRC)
    assert llama.planned and llama.text == (
        "planned: dense GQA (8 KV heads of 32, head dim 128), 32 layers, KV 128 KiB/token "
        "(bf16, --kv-cache-dtype auto), context 131,072")
    fp8 = planner_verdict(MODELOPT_NVFP4, SRC)
    assert "KV 64 KiB/token (fp8_e4m3 declared by the checkpoint" in fp8.text
    qwen = planner_verdict(QWEN, SRC)
    assert qwen.text.startswith("planned: hybrid Gated-DeltaNet, 10 attention + 30 GDN layers")
    assert "KV 20 KiB/token (bf16" in qwen.text and "2.05 MiB GDN state" in qwen.text
    oss = planner_verdict(GPT_OSS_120B, SRC)
    assert oss.planned and oss.text.startswith(
        "planned: full + sliding-window attention, 18 full + 18 sliding layers (window 128, "
        "vLLM's hybrid KV-cache manager)")
    nemotron = planner_verdict(NEMOTRON_H_8B, SRC)
    assert nemotron.text.startswith(
        "planned: hybrid Mamba-2, 4 attention + 24 Mamba-2 layers"), nemotron.text
    for config, why in ((MISTRAL_7B_V01, "sliding-window attention whose layers"),
                        (NEMOTRON_H_MTP, "MTP layer")):
        verdict = planner_verdict(config, SRC)
        assert not verdict.planned and verdict.text.startswith("refused: field ")
        assert why in verdict.text and "first boot's 'GPU KV cache size'" in verdict.text


def test_hf_quant_config_beside_a_config_without_one_is_noted():
    hf_quant = json.dumps({"quantization": {"quant_algo": "NVFP4",
                                            "kv_cache_quant_algo": "FP8"}}).encode()
    verdict = planner_verdict(LLAMA31_8B, SRC, hf_quant)
    assert verdict.notes == (
        "config.json has no quantization_config: vLLM takes hf_quant_config.json instead (its "
        "kv_cache_quant_algo is FP8), which the planner does not read; set "
        "vllm.kv_cache_dtype explicitly (fp8) to plan the profile",)
    assert planner_verdict(MODELOPT_NVFP4, SRC, hf_quant).notes == ()


PROFILE = """\
# a profile
engine: vllm
model:
  id: org/name   # the repo
  # the weights, measured
  weights_gib: 30.5  # old figure
  config: {file: models/old.json, sha256: %s}
  quant_format: fp8

vllm:
  max_model_len: 4096
""" % ("a" * 64)


def _pin(**changes: Any) -> ProfilePin:
    values: dict[str, Any] = {"revision": COMMIT, "weights_gib": 14.96,
                              "config_file": "models/org--name@0123456789ab/config.json",
                              "config_sha256": "b" * 64, "note": "from the hub"}
    return ProfilePin(**{**values, **changes})


def test_the_pin_replaces_and_adds_keys_keeping_everything_else():
    new = write_pin(PROFILE, "profiles/p.yaml", _pin())
    assert new == PROFILE.replace(
        "  id: org/name   # the repo\n",
        f"  id: org/name   # the repo\n  revision: {COMMIT}\n").replace(
        "  weights_gib: 30.5  # old figure\n", "  weights_gib: 14.96  # from the hub\n").replace(
        f"  config: {{file: models/old.json, sha256: {'a' * 64}}}\n",
        f"  config:\n    file: models/org--name@0123456789ab/config.json\n"
        f"    sha256: {'b' * 64}\n")
    assert write_pin(new, "profiles/p.yaml", _pin()) == new  # pinning twice changes nothing


def test_a_refused_config_is_cleared_and_a_profile_without_a_model_block_gets_one():
    cleared = yaml.safe_load(write_pin(PROFILE, "p", _pin(config_file=None, clear_config=True)))
    assert cleared["model"]["config"] is None and cleared["vllm"] == {"max_model_len": 4096}
    child = write_pin("extends: base\nvllm:\n  max_model_len: 8\n", "p", _pin())
    assert yaml.safe_load(child)["model"]["weights_gib"] == 14.96
    assert child.startswith("extends: base\nvllm:\n  max_model_len: 8\nmodel:\n")


def test_a_layout_the_edit_cannot_keep_is_refused_with_the_lines_to_write():
    with pytest.raises(ConfigError, match=r"'model:' is not written as a block.*\nmodel:\n"
                                          r"  revision: "):
        write_pin("model: {id: org/name, served_name: x}\n", "profiles/p.yaml", _pin())


def test_the_pin_command_validate_suggests():
    base = {"name": "llama8b", "engine": "vllm", "engine_version": "0.21.0",
            "image": {"ref": "vllm/vllm-openai:v0.21.0", "digest": "sha256:" + "ab" * 32},
            "model": {"id": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "llama"}}
    assert pin_command(Profile.model_validate(base)) == \
        "servefleet models pin meta-llama/Llama-3.1-8B-Instruct --profile llama8b"
    base["model"] = {**base["model"], "revision": "fp8-head"}  # type: ignore[dict-item]
    assert pin_command(Profile.model_validate(base)).endswith("@fp8-head --profile llama8b")


def test_a_checkpoint_without_config_json_is_a_gguf_one():
    gguf = pinned_checkpoint("o/n-GGUF", "main", COMMIT, {"q4.gguf": 1024**3}, {})
    assert gguf.verdict is None and gguf.config_file is None and gguf.weights.gib == 1.0
    with pytest.raises(ConfigError, match=r"no config\.json at this revision"):
        pinned_checkpoint("o/n", "main", COMMIT, {"model.safetensors": 1}, {})
    with pytest.raises(ConfigError, match=r"config\.json is not JSON"):
        pinned_checkpoint("o/n", "main", COMMIT, {"model.safetensors": 1},
                          {"config.json": b"{"})

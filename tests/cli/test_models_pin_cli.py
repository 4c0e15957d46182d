"""``servefleet models pin``: a checkpoint's config.json and weights' size, from a local
Hugging Face hub (:class:`servefleet.sim.hub.LocalHub`) through the real ``huggingface_hub``
client, into ``profiles/models/`` and a profile, then planned with no number typed by hand.

The repositories carry the real config.json values of openai/gpt-oss-120b and
meta-llama/Llama-3.1-8B-Instruct. Their shards are sparse files of the sizes given here
(Llama's are the published shard sizes): the hub publishes those sizes, and their bytes are
never downloaded (the hub is told their hashes instead of reading 75 GiB of zeros)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from servefleet.sim.hub import LocalHub

TOKEN = "hf_pinTestToken0123456789abcdef"  # the local hub's; a real token never is here
GIB = 1024**3
GPT_OSS = "openai/gpt-oss-120b"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GPT_OSS_CONFIG: dict[str, Any] = {  # openai/gpt-oss-120b config.json
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                                                       "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"],
                            "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn",
                     "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
    "swiglu_limit": 7.0, "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0",
    "use_cache": True, "vocab_size": 201088,
}
LLAMA_CONFIG: dict[str, Any] = {  # meta-llama/Llama-3.1-8B-Instruct config.json
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}
LLAMA_SHARDS = {f"model-0000{i}-of-00004.safetensors": size for i, size in enumerate(
    (4_976_698_672, 4_999_802_720, 4_915_916_176, 1_168_138_808), start=1)}
GPT_OSS_SHARDS = {f"model-{i:05d}-of-00014.safetensors": 4_625_000_000 if i < 14
                  else 1_080_000_000 for i in range(15)}

PROFILE = """\
# yaml-language-server: $schema=../schemas/profile.schema.json
# {what}: written by a new user, no number typed from a model card.
description: {what}
engine: vllm
engine_version: "0.21.0"
image:
  ref: vllm/vllm-openai:v0.21.0
  digest: sha256:a230095847e93bd4df9888b33dab956fa9504537b828a23657d2b26fed57b5c9
model:
  id: {repo}
  served_name: {served}  # what clients ask for
{gated}vllm:
  gpu_memory_utilization: {util}
  max_model_len: {max_len}
secret_env: [HF_TOKEN]
"""


def _repo(folder: Path, config: dict[str, Any], shards: dict[str, int],
          extra: dict[str, int]) -> dict[str, str]:
    """Write a repository folder: config.json, generation_config.json, the safetensors
    index and sparse shards; the hashes to publish for the sparse files."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "generation_config.json").write_text('{"do_sample": true, "temperature": 0.6}\n')
    index = {"metadata": {"total_size": sum(shards.values())},
             "weight_map": {f"model.layers.{i}.weight": name
                            for i, name in enumerate(sorted(shards))}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    known = {}
    for name, size in {**shards, **extra}.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as stream:
            stream.truncate(size)
        known[name] = hashlib.sha256(f"{name} {size}".encode()).hexdigest()
    return known


@pytest.fixture
def hubs(tmp_path: Path) -> Iterator[tuple[LocalHub, LocalHub, dict[str, str]]]:
    """A public hub serving gpt-oss-120b, a gated one (token required) serving Llama-3.1-8B,
    and each repository's main commit."""
    public, gated = LocalHub(), LocalHub(token=TOKEN)
    oss = tmp_path / "hub" / "gpt-oss"
    known = _repo(oss, GPT_OSS_CONFIG, GPT_OSS_SHARDS,
                  {"original/model--00001-of-00007.safetensors": 10_000_000_000})
    llama = tmp_path / "hub" / "llama"
    known_llama = _repo(llama, LLAMA_CONFIG, LLAMA_SHARDS,
                        {"original/consolidated.00.pth": 16_060_617_592})
    with public, gated:
        commits = {GPT_OSS: public.add_repo(GPT_OSS, oss, known_sha256=known),
                   LLAMA: gated.add_repo(LLAMA, llama, known_sha256=known_llama)}
        yield public, gated, commits


@pytest.fixture
def pin(run: Callable[..., Result], tmp_path: Path) -> Callable[..., Result]:
    """``pin(*args, endpoint=…, token=None)``: ``servefleet models pin`` with a clean hub
    environment (no token of this machine, a private HF_HOME)."""

    def go(*args: str, endpoint: str, token: str | None = None) -> Result:
        env = {"HF_TOKEN": token, "HUGGING_FACE_HUB_TOKEN": None, "HF_ENDPOINT": endpoint,
               "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}
        return run("models", "pin", *args, env=env)

    return go


def _gib(sizes: dict[str, int]) -> float:
    return math.ceil(sum(sizes.values()) / GIB * 100) / 100


def _profile(project: Path, name: str, **values: Any) -> Path:
    path = project / "profiles" / f"{name}.yaml"
    gated = "  gated: true\n" if values.pop("gated", False) else ""
    path.write_text(PROFILE.format(gated=gated, **values))
    return path


def _overlay(output: str) -> dict[str, Any]:
    return yaml.safe_load("\n".join(line for line in output.splitlines()
                                    if not line.startswith(("#", "warning:"))))


def test_llama_on_the_5090_is_planned_with_two_commands(pin, run, project, hubs):
    _public, gated, commits = hubs
    commit = commits[LLAMA]
    path = _profile(project, "llama8b", what="Llama-3.1-8B-Instruct on the RTX 5090",
                    repo=LLAMA, served="llama", util=0.9, max_len=32768, gated=True)
    before = path.read_text()

    done = pin(LLAMA, "--profile", "llama8b", endpoint=gated.url(), token=TOKEN)
    assert done.exit_code == 0, done.output
    folder = project / "profiles" / "models" / f"meta-llama--Llama-3.1-8B-Instruct@{commit[:12]}"
    config = (folder / "config.json").read_bytes()
    assert json.loads(config) == LLAMA_CONFIG
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors.index.json"]
    sha = hashlib.sha256(config).hexdigest()
    weights = _gib(LLAMA_SHARDS)  # 14.96 GiB: the shards, not original/consolidated.00.pth
    assert weights == 14.96
    lines = done.output.splitlines()
    assert lines[0] == f"{LLAMA}@main is commit {commit} ({gated.url()})"
    assert f"config.json sha256 {sha}" in lines
    assert f"weights {weights:.2f} GiB: 16,060,556,376 bytes (15.0 GiB) in the 4 shard(s) " \
           "model.safetensors.index.json names, as the hub publishes them" in lines
    assert "planner: planned: dense GQA (8 KV heads of 32, head dim 128), 32 layers, KV " \
           "128 KiB/token (bf16, --kv-cache-dtype auto), context 131,072" in lines
    assert "profiles/llama8b.yaml: wrote model.revision, model.weights_gib, model.config" \
        in lines
    assert TOKEN not in done.output

    text = path.read_text()
    assert text.startswith(before.split("vllm:")[0].split("  served_name")[0])
    assert "  served_name: llama  # what clients ask for\n" in text  # comments kept
    model = yaml.safe_load(text)["model"]
    assert model["revision"] == commit and model["weights_gib"] == weights
    assert model["config"] == {"file": f"models/{folder.name}/config.json", "sha256": sha}
    assert TOKEN not in text and not any(TOKEN.encode() in p.read_bytes()
                                         for p in folder.iterdir())

    tuned = run("tune", "llama8b", "--node", "rtx5090", "--target-concurrency", "1")
    assert tuned.exit_code == 0, tuned.output
    util = _overlay(tuned.output)["vllm"]["gpu_memory_utilization"]
    assert 0.5 < util < 0.9  # 15 GiB of weights + one 32k request of 4 GiB on 31.37 GiB
    assert "KV pool" in tuned.output and "block 16 tokens, 32 attention layers" in tuned.output


def test_gpt_oss_on_the_spark_is_pinned_and_planned_with_its_sliding_layers(
        pin, run, project, hubs):
    public, _gated, commits = hubs
    commit = commits[GPT_OSS]
    path = _profile(project, "gpt-oss", what="gpt-oss-120b on a DGX Spark", repo=GPT_OSS,
                    served="gpt-oss", util=0.7, max_len=131072)

    done = pin(f"{GPT_OSS}@main", "--profile", "gpt-oss", endpoint=public.url())
    assert done.exit_code == 0, done.output
    weights = _gib(GPT_OSS_SHARDS)  # the 15 top-level shards, not original/
    assert f"weights {weights:.2f} GiB: 65,830,000,000 bytes" in done.output
    verdict = next(line for line in done.output.splitlines() if line.startswith("planner:"))
    assert verdict.startswith("planner: planned: full + sliding-window attention, 18 full + "
                              "18 sliding layers (window 128, vLLM's hybrid KV-cache manager)")
    model = yaml.safe_load(path.read_text())["model"]
    assert model["revision"] == commit and model["weights_gib"] == weights
    folder = f"models/openai--gpt-oss-120b@{commit[:12]}"
    assert model["config"]["file"] == f"{folder}/config.json"
    assert json.loads((project / "profiles" / folder / "config.json").read_text()) == \
        GPT_OSS_CONFIG

    tuned = run("tune", "gpt-oss", "--node", "dgx-spark-1", "--target-concurrency", "1")
    assert tuned.exit_code == 0, tuned.output
    util = _overlay(tuned.output)["vllm"]["gpu_memory_utilization"]
    assert 0.5 < util < 0.9  # 61 GiB of weights + one 131k request of 4.8 GiB on 121.69 GiB
    assert "18 full-attention + 18 sliding-window layers (window 128) in 2 groups of 18" \
        in tuned.output
    assert "checked against real boots: gpt-oss (vLLM 0.13, GB10; 0.26.0, H200)" in tuned.output


def test_a_pin_by_commit_is_the_same_pin(pin, project, hubs):
    public, _gated, commits = hubs
    by_branch = pin(GPT_OSS, endpoint=public.url())
    by_commit = pin(f"{GPT_OSS}@{commits[GPT_OSS]}", endpoint=public.url())
    assert by_branch.exit_code == by_commit.exit_code == 0, by_commit.output
    assert by_branch.output.splitlines()[1:] == by_commit.output.splitlines()[1:]
    # The config the planner now plans (sliding-window layers) is offered as a pin.
    assert by_commit.output.splitlines()[-1].startswith(
        f"pin it in a profile: --profile NAME, or by hand under model: revision: "
        f"{commits[GPT_OSS]}, weights_gib: {_gib(GPT_OSS_SHARDS)}, config: {{file: "
        f"models/openai--gpt-oss-120b@{commits[GPT_OSS][:12]}/config.json, sha256: ")


def test_a_wrong_revision_is_a_clear_error(pin, project, hubs):
    public, _gated, _commits = hubs
    done = pin(f"{GPT_OSS}@no-such-branch", endpoint=public.url())
    assert done.exit_code == 1
    assert f"{GPT_OSS}@no-such-branch on {public.url()}: no revision 'no-such-branch' in " \
           f"{GPT_OSS} (HTTP 404)" in done.output
    assert not (project / "profiles" / "models" / "openai--gpt-oss-120b").exists()
    assert "Traceback" not in done.output


def test_a_gated_repository_without_a_token_names_hf_token(pin, project, hubs):
    _public, gated, _commits = hubs
    _profile(project, "llama8b", what="Llama", repo=LLAMA, served="llama", util=0.9,
             max_len=32768)
    done = pin(LLAMA, "--profile", "llama8b", endpoint=gated.url())
    assert done.exit_code == 1
    assert "gated or private and no token was given; set HF_TOKEN" in done.output
    wrong = pin(LLAMA, endpoint=gated.url(), token=TOKEN[::-1])
    assert wrong.exit_code == 1 and "refused the token in HF_TOKEN" in wrong.output
    assert TOKEN[::-1] not in wrong.output
    assert "revision" not in yaml.safe_load(
        (project / "profiles" / "llama8b.yaml").read_text())["model"]


def test_a_profile_of_another_model_is_refused_before_fetching(pin, project, hubs):
    public, _gated, _commits = hubs
    done = pin(GPT_OSS, "--profile", "qwen36-fp8", endpoint=public.url())
    assert done.exit_code == 1
    assert "profiles/qwen36-fp8.yaml: model.id is Qwen/Qwen3.6-35B-A3B-FP8, not " \
           f"{GPT_OSS}" in done.output
    assert not any(r.path.startswith("/api/models") for r in public.requests)


def test_validate_suggests_the_pin_then_refuses_a_hand_edit_naming_the_file_and_fix(
        pin, run, project, hubs):
    _public, gated, commits = hubs
    _profile(project, "llama8b", what="Llama", repo=LLAMA, served="llama", util=0.9,
             max_len=32768, gated=True)
    stack = project / "Pulumi.reference.yaml"
    stack.write_text(stack.read_text().replace("rtx5090: qwen36-q4-llamacpp",
                                               "rtx5090: llama8b"))
    unpinned = json.loads(run("validate", "--json").output)
    weights = [f for f in unpinned["findings"] if f["rule"] == "model-weights-unknown"]
    assert [f["file"] for f in weights] == ["profiles/llama8b.yaml"]
    assert weights[0]["fix"].startswith(
        f"run `servefleet models pin {LLAMA} --profile llama8b`: it reads the weights' size")

    assert pin(LLAMA, "--profile", "llama8b", endpoint=gated.url(), token=TOKEN).exit_code == 0
    pinned = json.loads(run("validate", "--json").output)
    assert not [f for f in pinned["findings"] if f["file"] == "profiles/llama8b.yaml"
                and f["severity"] == "error"], pinned["findings"]

    folder = f"models/meta-llama--Llama-3.1-8B-Instruct@{commits[LLAMA][:12]}"
    config = project / "profiles" / folder / "config.json"
    config.write_text(config.read_text().replace('"num_key_value_heads": 8',
                                                 '"num_key_value_heads": 4'))
    edited = run("validate", "--json")
    assert edited.exit_code == 1
    found = [f for f in json.loads(edited.output)["findings"]
             if f["rule"] == "model-config-pin"]
    assert [f["file"] for f in found] == ["profiles/llama8b.yaml"]
    assert f"does not match profiles/{folder}/config.json" in found[0]["message"]
    assert f"`servefleet models pin {LLAMA}@{commits[LLAMA]} --profile llama8b` writes the " \
           "checkpoint's own bytes again" in found[0]["fix"]

    again = pin(f"{LLAMA}@{commits[LLAMA]}", "--profile", "llama8b", endpoint=gated.url(),
                token=TOKEN)
    assert again.exit_code == 0 and "(restored the hub's config.json)" in again.output
    assert run("validate").exit_code == 0

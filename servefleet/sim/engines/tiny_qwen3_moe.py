"""Write the tiny Qwen3-MoE checkpoint that the CPU build of vLLM serves on simulated nodes.

Run as a script by the engine install's own Python (``python3 tiny_qwen3_moe.py OUT``
with the install on ``PYTHONPATH``): it needs ``torch``, ``transformers`` and
``tokenizers``, which only the install has, and servefleet never imports it. Nothing is
downloaded: the config is written here, the weights are random (seeded, so every machine
writes the same tensors), and the tokenizer is a word-level one built from the word list
below with Qwen3's special tokens and a Qwen3-style chat template (``enable_thinking``).

The shape is the smallest that vLLM's CPU attention serves: it rejects a head size of 16
at the first request (``Unsupported CPU attention configuration``), so heads are 64 wide.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SEED = 20260501
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
           "<tool_call>", "</tool_call>")
_WORD_TEXT = (
    "system user assistant tool you are a an the of to and in is it that for on with as "
    "be at by this from or have not are was but what all were when we there can your "
    "which their if do will each about how up out them then she many some so these would "
    "other into has more her two like him see time could no make than first been its who "
    "now people my made over did down only way find use may water long little very after "
    "words called just where most know get through back much go good new write our me man "
    "too any day same right look think also around another came come work three word must "
    "because does part even place well such here take why things help put years different "
    "away again off went old number great tell men say small every found still between "
    "name should home big give air line set own under read last never us left end along "
    "while might next sound below saw something thought both few those always looked show "
    "large often together asked house don't world going want school important until form "
    "food keep children feet land side without boy once animals life enough took "
    "sometimes four head above kind began almost live page got earth need far hand high "
    "year mother light parts country father let night following picture being study "
    "second eyes soon times story boys since white days ever paper hard near sentence "
    "better best across during today others however sure means knew gpu node vllm model "
    'serve token cache hello hi yes ok . , ? ! : ; \' " ( ) - 0 1 2 3 4 5 6 7 8 9'
)
WORDS = _WORD_TEXT.split()
"""The words of the tokenizer: enough for prompts a test writes and output that reads as text."""

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)
"""Qwen3's template, reduced to what a tiny word-level model can follow: roles, the
generation prompt and the empty think block that ``enable_thinking=false`` adds."""

CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    # Qwen3.6's own native context: the profiles' max_model_len (131072, 262144, YaRN to
    # 1M) must be accepted or refused by the engine as they are on a real node.
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 2,
}


def vocab() -> dict[str, int]:
    """Special tokens first (ids 0..6, as the config's bos/eos ids expect), then words."""
    tokens = [*SPECIAL, "[UNK]", *dict.fromkeys(WORDS)]
    return {token: index for index, token in enumerate(tokens)}


def write_tokenizer(out: Path) -> int:
    """tokenizer.json + tokenizer_config.json; returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    ids = vocab()
    tokenizer = Tokenizer(models.WordLevel(vocab=ids, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(list(SPECIAL))
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": "[UNK]",
        "model_max_length": CONFIG["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n", encoding="utf-8")
    return len(ids)


def write_model(out: Path) -> None:
    """config.json, generation_config.json, model.safetensors and the tokenizer files."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    size = write_tokenizer(out)
    # A multiple of 64 keeps vocab-parallel padding out of the picture.
    config = Qwen3MoeConfig(**{**CONFIG, "vocab_size": (size + 63) // 64 * 64})
    torch.manual_seed(SEED)
    model = Qwen3MoeForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 0, "eos_token_id": [2, 0], "do_sample": False}) + "\n",
        encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_qwen3_moe.py OUT_DIR")
    write_model(Path(sys.argv[1]))

"""A multimodal checkpoint's processor files, for booting it with dummy weights.

vLLM profiles a multimodal model's encoder with a dummy item built by the model's Hugging
Face processor (``get_dummy_mm_data``), so a vision-language boot needs the processor files
beside ``config.json``, and a tokenizer (``--skip-tokenizer-init`` cannot process the dummy
prompt). Standard library only: the files are JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_IDS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
               "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|vision_pad|>": 151654,
               "<|image_pad|>": 151655, "<|video_pad|>": 151656}
"""Qwen3-VL's special tokens and their ids (its ``config.json`` names the image, video and
vision-start/end ids)."""
MEAN_STD = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_rescale": True,
            "rescale_factor": 1 / 255, "do_normalize": True, "do_resize": True,
            "do_convert_rgb": True}
PATCHES = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
           "processor_class": "Qwen3VLProcessor"}


def _tokenizer() -> dict[str, object]:
    """A character-level tokenizer with the special tokens at their real ids."""
    vocab = {"<unk>": 0, **{chr(c): c - 31 for c in range(32, 127)}}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t, i in SPECIAL_IDS.items()]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "post_processor": None, "decoder": None,
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "."},
                              "behavior": "Isolated", "invert": False},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}


def write_processor_files(folder: Path) -> None:
    """Write a Qwen3-VL processor into ``folder``: the hub's image and video processor
    settings (``size.longest_edge`` 16,777,216 and 25,165,824 pixels, patch 16, merge 2,
    temporal patch 2: what vLLM sizes its profiling item from) and the tokenizer above (the
    text is never served)."""
    (folder / "tokenizer.json").write_text(json.dumps(_tokenizer()))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2TokenizerFast", "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 262144,
        "extra_special_tokens": {},
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}))
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessorFast", **PATCHES, **MEAN_STD,
        "size": {"longest_edge": 16777216, "shortest_edge": 65536}}))
    (folder / "video_preprocessor_config.json").write_text(json.dumps({
        "video_processor_type": "Qwen3VLVideoProcessor", **PATCHES, **MEAN_STD,
        "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "fps": 2,
        "min_frames": 4, "max_frames": 768, "do_sample_frames": True}))

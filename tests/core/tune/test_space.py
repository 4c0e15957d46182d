"""The lattice a measured tune searches, read off a shipped profile: the profile's own
settings are its centre (the control), the values bracket them, and a point becomes the
overlay that sets it."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.project import load_project
from servefleet.core.tune.space import apply_point, default_space, vllm_overlay

PROJECT = load_project(Path(__file__).resolve().parents[3], "reference")


def test_the_lattice_brackets_the_profiles_own_settings() -> None:
    # 32 sequences, 16384 tokens, util 0.45, 2 drafts, an fp8_e4m3 KV cache
    mtp = PROJECT.profiles["qwen36-fp8-mtp"]
    space = default_space(mtp)
    assert {k.name: k.values for k in space.knobs} == {
        "max_num_seqs": (16, 32, 64), "max_num_batched_tokens": (8192, 16384, 32768),
        "gpu_memory_utilization": (0.4, 0.45, 0.5), "num_speculative_tokens": (1, 2, 3),
        "kv_cache_dtype": ("auto", "fp8_e4m3")}
    assert dict(space.origin) == {"max_num_seqs": 32, "max_num_batched_tokens": 16384,
                                  "gpu_memory_utilization": 0.45, "num_speculative_tokens": 2,
                                  "kv_cache_dtype": "fp8_e4m3"}
    assert space.size == 162 and space.origin in set(space.points())
    # One step along one knob: two each for four knobs, one for the KV dtype (fp8_e4m3 is
    # its last step); along two at once: the pairs' corners inside the lattice.
    assert len(list(space.neighbours(space.origin))) == 9
    assert len(list(space.diagonals(space.origin))) == 6 * 4 + 4 * 2


def test_the_kv_dtype_knob_is_searched_only_where_the_profile_sets_one() -> None:
    plain = PROJECT.profiles["qwen36-fp8"]
    assert plain.vllm is not None
    unset = plain.model_copy(update={"vllm": plain.vllm.model_copy(
        update={"kv_cache_dtype": None})})
    assert "kv_cache_dtype" not in {k.name for k in default_space(unset).knobs}
    tq = PROJECT.profiles["qwen36-nvfp4-tq"]  # turboquant_4bit_nc: kept, after the steps
    assert dict((k.name, k.values) for k in default_space(tq).knobs)["kv_cache_dtype"] == (
        "auto", "fp8_e4m3", "turboquant_4bit_nc")
    given = default_space(tq, ["kv_cache_dtype"], {"kv_cache_dtype": ["fp8_e4m3"]})
    assert given.knobs[0].values == ("fp8_e4m3", "turboquant_4bit_nc")
    candidate = apply_point(tq, (("kv_cache_dtype", "fp8_e4m3"),), "cand")
    assert candidate.vllm is not None and candidate.vllm.kv_cache_dtype == "fp8_e4m3"
    assert vllm_overlay(tq, (("kv_cache_dtype", "auto"),)) == {"kv_cache_dtype": "auto"}


def test_knobs_and_values_given_keep_the_profile_as_a_point() -> None:
    plain = PROJECT.profiles["qwen36-fp8"]
    space = default_space(plain, ["max_num_seqs"], {"max_num_seqs": [4, 8]})
    assert [(k.name, k.values) for k in space.knobs] == [("max_num_seqs", (4, 8, 32))]
    with pytest.raises(ValueError, match="num_speculative_tokens: not a knob of this profile"):
        default_space(plain, ["num_speculative_tokens"])
    with pytest.raises(ValueError, match="not a knob of this profile"):
        default_space(plain, values={"tensor_parallel_size": [2]})


def test_a_point_becomes_the_overlay_and_the_candidate_that_sets_it() -> None:
    mtp = PROJECT.profiles["qwen36-fp8-mtp"]
    point = (("max_num_seqs", 64), ("num_speculative_tokens", 3))
    overlay = vllm_overlay(mtp, point)
    assert overlay["max_num_seqs"] == 64
    assert overlay["speculative"]["num_speculative_tokens"] == 3
    assert overlay["speculative"]["method"] == mtp.vllm.speculative.method  # type: ignore[union-attr]
    candidate = apply_point(mtp, point, "cand")
    assert candidate.name == "cand" and candidate.vllm is not None
    assert candidate.vllm.max_num_seqs == 64
    assert candidate.vllm.speculative is not None
    assert candidate.vllm.speculative.num_speculative_tokens == 3
    assert candidate.vllm.max_num_batched_tokens == mtp.vllm.max_num_batched_tokens  # type: ignore[union-attr]


def test_a_kv_dtype_vllm_does_not_take_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype fp9: not a KV-cache dtype"):
        default_space(PROJECT.profiles["qwen36-fp8"], values={"kv_cache_dtype": ["fp9"]})

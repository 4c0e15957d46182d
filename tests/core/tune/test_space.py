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
    mtp = PROJECT.profiles["qwen36-fp8-mtp"]  # 32 sequences, 16384 tokens, util 0.45, 2 drafts
    space = default_space(mtp)
    assert {k.name: k.values for k in space.knobs} == {
        "max_num_seqs": (16, 32, 64), "max_num_batched_tokens": (8192, 16384, 32768),
        "gpu_memory_utilization": (0.4, 0.45, 0.5), "num_speculative_tokens": (1, 2, 3)}
    assert dict(space.origin) == {"max_num_seqs": 32, "max_num_batched_tokens": 16384,
                                  "gpu_memory_utilization": 0.45, "num_speculative_tokens": 2}
    assert space.size == 81 and space.origin in set(space.points())
    # One step along one knob: eight neighbours; along two at once: 4 per pair of knobs.
    assert len(list(space.neighbours(space.origin))) == 8
    assert len(list(space.diagonals(space.origin))) == 6 * 4


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

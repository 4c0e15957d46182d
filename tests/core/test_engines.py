"""The engine registry: one module per engine, consistent with the models, the boot-log
readers and the rules that name engines."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from servefleet.core.bootlog import ENGINE_CHOICES
from servefleet.core.engines import ENGINES, engine_named, engine_of
from servefleet.core.engines.llamacpp import LLAMACPP
from servefleet.core.engines.vllm import VLLM
from servefleet.core.models import Profile
from servefleet.core.models.profile import ENGINE_SETTINGS, Engine
from servefleet.core.project import load_profiles
from servefleet.core.rules import ALL_RULES

ROOT = Path(__file__).resolve().parents[2]


def _profile(name: str) -> Profile:
    """A shipped reference profile."""
    profiles, _, _, problems = load_profiles(ROOT)
    assert name in profiles, problems
    return profiles[name]


def test_every_engine_of_the_profile_model_is_registered() -> None:
    assert set(ENGINES) == set(get_args(Engine))
    for name, engine in ENGINES.items():
        assert engine.name == name
        assert engine.settings_field == ENGINE_SETTINGS[name][0]
        assert engine.bootlog_reader in ENGINE_CHOICES


def test_engine_named_says_which_engines_exist() -> None:
    assert engine_named("vllm") is VLLM
    with pytest.raises(KeyError, match=r"known: vllm, llama\.cpp"):
        engine_named("sglang")


def test_engine_of_a_profile_owns_its_settings() -> None:
    vllm, llamacpp = _profile("qwen36-fp8"), _profile("qwen36-q4-llamacpp")
    assert engine_of(vllm) is VLLM and engine_of(llamacpp) is LLAMACPP
    assert VLLM.settings(vllm) is vllm.vllm and VLLM.settings(llamacpp) is None
    assert LLAMACPP.settings(llamacpp) is llamacpp.llamacpp
    # Explicit wins; the default lives with the rules' version table (0.92 from 0.20).
    assert VLLM.gpu_memory_utilization(vllm) == 0.45
    unset = vllm.model_copy(update={"vllm": vllm.vllm.model_copy(
        update={"gpu_memory_utilization": None})})
    assert VLLM.gpu_memory_utilization(unset) == 0.92
    assert LLAMACPP.gpu_memory_utilization(llamacpp) is None
    assert VLLM.kv_planned and not LLAMACPP.kv_planned
    assert VLLM.spans_nodes and not LLAMACPP.spans_nodes


def test_rules_name_only_registered_engines() -> None:
    for rule in ALL_RULES:
        assert rule.engines is None or rule.engines <= set(ENGINES), rule.id

"""The inverse mapping agrees with the forward one: every shipped profile, rendered to argv
and imported back (as an overlay of the shipped profiles, and in full without them), gives
a profile with the same engine flags; and every flag table entry is what ``flag_pairs``
renders for its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servefleet.core.adopt import RunningEngine, imported_profile
from servefleet.core.adopt.argv import read_argv
from servefleet.core.engines import ENGINES
from servefleet.core.models import Profile
from servefleet.core.project import load_profiles, resolve_profiles
from servefleet.core.render.engine_args import engine_command, engine_flags
from servefleet.core.yamlfile import parse_yaml

ROOT = Path(__file__).resolve().parents[2]
PROFILES, FILES, RAW, PROBLEMS = load_profiles(ROOT)
PORT = 8123


def _running(profile: Profile) -> RunningEngine:
    return RunningEngine(container=f"c-{profile.name}", container_id="0" * 64,
                         engine=profile.engine, argv=tuple(engine_command(profile, PORT)),
                         image=profile.image.ref, image_digest=profile.image.digest,
                         engine_version=profile.engine_version, env=dict(profile.env),
                         secret_env=tuple(profile.secret_env), host_network=True,
                         gpu_count=-1, restart_policy="on-failure:3")


def _load(name: str, text: str, raw: dict[str, Any], files: dict[str, str]) -> Profile:
    profiles, problems = resolve_profiles({**raw, name: parse_yaml(text, name)},
                                          {**files, name: f"profiles/{name}.yaml"})
    assert not problems
    return profiles[name]


def test_shipped_profiles_load() -> None:
    assert not PROBLEMS and len(PROFILES) >= 7


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_round_trip_as_overlay(name: str) -> None:
    original = PROFILES[name]
    result = imported_profile(_running(original), "imported", PROFILES, RAW, FILES, node="n")
    assert result.refused is None, result.refused
    assert result.text is not None and result.port == PORT
    assert result.base == name  # the profile it came from is the closest, identical one
    loaded = _load("imported", result.text, RAW, FILES)
    assert engine_flags(loaded, PORT) == engine_flags(original, PORT)
    assert engine_command(loaded, PORT) == engine_command(original, PORT)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_round_trip_in_full(name: str) -> None:
    original = PROFILES[name]
    result = imported_profile(_running(original), "imported", {}, {}, {}, node="n")
    assert result.refused is None, result.refused
    assert result.text is not None and result.base is None
    assert "extends" not in parse_yaml(result.text, "x")
    loaded = _load("imported", result.text, {}, {})
    assert engine_flags(loaded, PORT) == engine_flags(original, PORT)


# One value per kind for the forward check below.
SAMPLES: dict[str, Any] = {"text": "auto", "int": 3, "float": 0.5, "bool": False,
                           "switch": True, "layers": 12}
JSON_SAMPLES = {"speculative": {"method": "ngram", "num_speculative_tokens": 3},
                "default_chat_template_kwargs": {"a": 1}, "hf_overrides": {"b": 2}}
TEXT_SAMPLES = {"kv_cache_dtype": "fp8", "dtype": "half", "flash_attn": "off",
                "cache_type_k": "q4_0", "cache_type_v": "q4_0", "gguf": "/models/y.gguf",
                "revision": "r1", "served_name": "n1", "host": "127.0.0.1"}


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
def test_flag_table_matches_the_forward_mapping(engine_name: str) -> None:
    engine = ENGINES[engine_name]
    base = next(p for p in PROFILES.values() if p.engine == engine_name)
    fields = {spec.field for spec in engine.flag_fields}
    settings_model = type(engine.settings(base))
    # Every settings field renders a flag through the table, except these.
    unmapped = set(settings_model.model_fields) - fields - {"extra_args",
                                                             "thinking_token_budget"}
    assert not unmapped
    for spec in engine.flag_fields:
        key = spec.field.removeprefix("model.")
        value = JSON_SAMPLES[key] if spec.kind == "json" else TEXT_SAMPLES.get(
            key, SAMPLES[spec.kind])
        data = base.model_dump(mode="json")
        block = data["model"] if spec.field.startswith("model.") else data[
            engine.settings_field]
        block[key] = value
        profile = Profile.model_validate(data)
        flags = engine_flags(profile, PORT)
        rendered = "--no-" + spec.flag[2:] if value is False else spec.flag
        assert rendered in flags, (spec, flags)
        # And reading the rendered command back gives the same value.
        reading = read_argv(engine, engine_command(profile, PORT))
        got = reading.model.get(key) if spec.field.startswith("model.") else \
            reading.settings.get(key)
        assert got == value, spec

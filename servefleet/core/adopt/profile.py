"""The profile of a running engine: the closest shipped profile plus an overlay, checked by
rendering it again.

:func:`imported_profile` picks, among the loaded profiles of the same engine and model (vLLM:
``model.id``; llama.cpp: the GGUF), the one whose ``engine_flags`` differ least from the
running flags, and writes ``extends: <it>`` with only the fields that differ. With no such
profile it writes one in full. Either way the text is then loaded through the profile loader
(:func:`servefleet.core.project.resolve_profiles`, beside the existing profiles) and its
``engine_flags`` must equal the running flags; otherwise the engine is refused, saying which
flags could not be expressed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from servefleet.core.adopt.argv import FlagReading, read_argv
from servefleet.core.adopt.notes import container_notes
from servefleet.core.adopt.running import RunningEngine
from servefleet.core.engines import ENGINES, EngineSpec
from servefleet.core.errors import ConfigError
from servefleet.core.models import Profile
from servefleet.core.models.profile import ENV_NAME_RE, IMAGE_REF_RE
from servefleet.core.project import PROFILES_DIR, resolve_profiles
from servefleet.core.render.engine_args import diff_flags, engine_flags
from servefleet.core.schema import modeline
from servefleet.core.yamlfile import parse_yaml


@dataclass(frozen=True)
class ImportedProfile:
    """The profile written for one running engine, or why there is none."""

    container: str
    """The container it was read from."""
    engine: str | None
    """``vllm`` / ``llama.cpp`` (or the unsupported engine's name)."""
    name: str
    """The profile's name (its file: ``profiles/<name>.yaml``)."""
    base: str | None = None
    """The shipped profile it extends; ``None``: written in full."""
    text: str | None = None
    """The profile file's text; ``None`` when refused."""
    port: int | None = None
    """The port the engine listens on (the deployment's ``port``)."""
    notes: tuple[str, ...] = ()
    """What the operator should know (flags in extra_args, secrets to set, mounts…)."""
    refused: str | None = None
    """Why the engine cannot be imported, with what to do; ``None`` when it can."""

    @property
    def file(self) -> str:
        """``profiles/<name>.yaml``."""
        return f"{PROFILES_DIR}/{self.name}.yaml"


def _score(profile: Profile, reading: FlagReading, port: int) -> tuple[int, str]:
    diff = diff_flags(engine_flags(profile, port), reading.flags)
    return len(diff.added) + len(diff.removed) + len(diff.changed), profile.name


def closest_profile(engine: EngineSpec, reading: FlagReading, port: int,
                    profiles: Mapping[str, Profile]) -> Profile | None:
    """The profile of the same engine and model whose flags differ least from ``reading``
    (ties: by name)."""
    def same_model(p: Profile) -> bool:
        if p.engine != engine.name:
            return False
        if engine.name == "vllm":
            return p.model.id == reading.model.get("id")
        return p.llamacpp is not None and p.llamacpp.gguf == reading.settings.get("gguf")

    candidates = [p for p in profiles.values() if same_model(p)]
    return min(candidates, key=lambda p: _score(p, reading, port)) if candidates else None


def _plain(value: Any) -> Any:
    """A settings value as YAML holds it (a nested model as its mapping)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def _settings_overlay(engine: EngineSpec, reading: FlagReading,
                      base: Profile | None) -> dict[str, Any]:
    current = engine.settings(base) if base is not None else None
    out: dict[str, Any] = {}
    for key, value in reading.settings.items():
        old = _plain(getattr(current, key)) if current is not None else None
        if base is None:
            # A full profile: the fields whose value is not the schema's default.
            if value == getattr(engine.settings(_any_profile(engine)), key):
                continue
        elif value == old:
            continue
        if key == "speculative" and isinstance(value, dict) and isinstance(old, dict):
            # The overlay merges key by key: a key of the base's not set here is cleared.
            value = {**{k: None for k in old if k not in value}, **value}
        out[key] = value
    old_extra = engine.extra_args(base) if base is not None else []
    if reading.extra_args != old_extra:
        out["extra_args"] = list(reading.extra_args)
    return out


_TEMPLATES: dict[str, Profile] = {}


def _any_profile(engine: EngineSpec) -> Profile:
    """A minimal profile of ``engine``, to reach its settings model's defaults."""
    if engine.name not in _TEMPLATES:
        extra = {"llamacpp": {"gguf": "/models/x.gguf"}} if engine.name == "llama.cpp" else {}
        _TEMPLATES[engine.name] = Profile.model_validate({
            "name": "template", "engine": engine.name, "engine_version": "0",
            "image": {"ref": "x/y:z", "digest": "sha256:" + "0" * 64},
            "model": {"id": "x", "served_name": "x"}, **extra})
    return _TEMPLATES[engine.name]


def _image(running: RunningEngine, base: Profile | None,
           profiles: Mapping[str, Profile], notes: list[str]) -> dict[str, Any] | str | None:
    """The ``image:`` mapping (``None``: the base's), or why none can be written."""
    if running.simulated:
        # A simulated node runs a stand-in image: the image is the one the rendered compose
        # had, i.e. that of the profile it was deployed with, else of a profile of the same
        # engine version.
        known = profiles.get(running.servefleet_profile or "")
        if known is None:
            known = next((p for p in profiles.values() if p.engine == running.engine
                          and p.engine_version == running.engine_version), None)
        if known is None:
            return (f"simulated node: the container runs the stand-in image, and the image it "
                    f"stands for (engine version {running.engine_version or 'unknown'}) is that "
                    "of no profile here; write image: by hand")
        notes.append(f"simulated node: the container runs a stand-in image; the image is "
                     f"{known.image.ref} (profile {known.name}, engine version "
                     f"{known.engine_version})")
        if base is not None and known.image == base.image:
            return None
        return known.image.model_dump(mode="json")
    ref = running.image
    if ref and not IMAGE_REF_RE.match(ref) and IMAGE_REF_RE.match(ref + ":latest"):
        notes.append(f"image {ref} has no tag: written as {ref}:latest")
        ref += ":latest"
    if not IMAGE_REF_RE.match(ref):
        return (f"image {running.image!r} is not a 'repository:tag' reference a profile can "
                "pin; recreate the container from a tagged image")
    if running.image_digest is None:
        if base is not None and base.image.ref == ref:
            notes.append(f"image {ref}: no registry digest on the node (RepoDigests empty: "
                         f"pulled by id or built locally?); kept {base.name}'s digest "
                         f"{base.image.digest}: check it is the same image")
            return None
        return (f"image {ref} has no registry digest on the node (RepoDigests empty: built "
                "locally?), and a profile pins its image by digest: push it to a registry "
                "and pull it on the node, or write image: by hand")
    if base is not None and (base.image.ref, base.image.digest) == (ref, running.image_digest):
        return None
    return {"ref": ref, "digest": running.image_digest}


def _env(running: RunningEngine, base: Profile | None, notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    old = base.env if base is not None else {}
    env = {}
    for name, value in running.env.items():
        if not ENV_NAME_RE.match(name) or not value.isprintable():
            notes.append(f"env {name}: not written (a profile takes A-Z, 0-9, _ names and "
                         "one-line values)")
            continue
        env[name] = value
    changed = {k: v for k, v in env.items() if old.get(k) != v}
    if changed:
        out["env"] = changed
    for name in sorted(set(old) - set(env)):
        notes.append(f"env {name}={old[name]} comes from {base.name if base else '?'} but the "
                     "container does not set it: an overlay cannot remove it, so a deploy sets "
                     "it")
    secrets = sorted(running.secret_env)
    if secrets != sorted(base.secret_env if base is not None else []):
        out["secret_env"] = secrets
    for name in secrets:
        key = {"HF_TOKEN": "servefleet:hfToken", "VLLM_API_KEY": "servefleet:apiKey"}.get(
            name, f"servefleet:secretEnv.{name}")
        notes.append(f"secret {name}: its value was not read; set it in the stack with "
                     f"`pulumi config set --secret {key} …`")
    return out


def _dump(data: dict[str, Any], header: list[str]) -> str:
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    return "\n".join([modeline("profile", 1), *(f"# {line}" for line in header)]) + "\n" + body


def check_profile(name: str, text: str, reading: FlagReading, port: int,
                  raw_profiles: Mapping[str, dict[str, Any]],
                  profile_files: Mapping[str, str]) -> Profile | str:
    """Load ``text`` as ``profiles/<name>.yaml`` beside the others: the loaded profile when
    its ``engine_flags`` equal the running flags (in any order), else why not."""
    file = f"{PROFILES_DIR}/{name}.yaml"
    try:
        raw = parse_yaml(text, file)
    except ConfigError as error:
        return "; ".join(error.problems)
    profiles, problems = resolve_profiles({**raw_profiles, name: raw},
                                          {**profile_files, name: file})
    if name not in profiles:
        mine = [p for p in problems if p.startswith(file)] or problems
        return "the profile does not load: " + "; ".join(mine)
    rendered = engine_flags(profiles[name], port)
    if rendered == reading.flags:  # dict equality ignores order
        return profiles[name]
    lines = diff_flags(reading.flags, rendered).lines()
    return ("the profile would not render the running flags (running -> rendered): "
            + "; ".join(lines))


def imported_profile(running: RunningEngine, name: str, profiles: Mapping[str, Profile],
                     raw_profiles: Mapping[str, dict[str, Any]],
                     profile_files: Mapping[str, str], *, node: str) -> ImportedProfile:
    """The profile ``name`` for ``running`` (read on ``node``), checked, or refused."""
    def refuse(reason: str, notes: list[str] | None = None,
               port: int | None = None) -> ImportedProfile:
        return ImportedProfile(container=running.container,
                               engine=running.engine or running.other_engine, name=name,
                               port=port, notes=tuple(notes or ()), refused=reason)

    if running.engine is None:
        what = running.other_engine or "no inference engine servefleet knows"
        return refuse(f"runs {what}; servefleet runs {' and '.join(ENGINES)} only")
    engine = ENGINES[running.engine]
    reading = read_argv(engine, running.argv)
    notes = [*running.notes, *reading.notes]
    if reading.problems:
        return refuse("; ".join(reading.problems), notes, reading.port)
    port = reading.port
    assert port is not None  # read_argv gives a problem otherwise
    if "served_name" not in reading.model:
        flag = "--served-model-name" if engine.name == "vllm" else "--alias"
        return refuse(f"no {flag}: servefleet always names the model for clients (model."
                      f"served_name); restart the engine with {flag} NAME", notes, port)
    base = closest_profile(engine, reading, port, profiles)
    attempt = _build(running, reading, name, base, profiles, node)
    if isinstance(attempt, str):
        return refuse(attempt, notes, port)
    data, header, own_notes = attempt
    text = _dump(data, header)
    checked = check_profile(name, text, reading, port, raw_profiles, profile_files)
    if isinstance(checked, str) and base is not None:
        # What an overlay cannot say (a key of the base's JSON it cannot remove), a profile
        # of its own can: the base's fields in full, with the running settings.
        full = _build(running, reading, name, base, profiles, node, in_full=True)
        if not isinstance(full, str):
            full_text = _dump(full[0], full[1])
            loaded = check_profile(name, full_text, reading, port, raw_profiles,
                                   profile_files)
            if not isinstance(loaded, str):
                return ImportedProfile(
                    container=running.container, engine=engine.name, name=name, base=None,
                    text=full_text, port=port, notes=(
                        *notes, *full[2], f"an overlay of {base.name} cannot express it "
                        f"({checked}): written in full, from {base.name}'s fields",
                        *container_notes(running, loaded, port)))
    if isinstance(checked, str):
        return refuse(checked, [*notes, *own_notes], port)
    return ImportedProfile(container=running.container, engine=engine.name, name=name,
                           base=base.name if base else None, text=text, port=port,
                           notes=(*notes, *own_notes, *container_notes(running, checked, port)))


def _build(running: RunningEngine, reading: FlagReading, name: str, base: Profile | None,
           profiles: Mapping[str, Profile], node: str, *,
           in_full: bool = False) -> tuple[dict[str, Any], list[str], list[str]] | str:
    """The profile's mapping, its header comment and its notes; or why it cannot be built."""
    engine = ENGINES[running.engine or ""]
    notes: list[str] = []
    image = _image(running, base, profiles, notes)
    if isinstance(image, str):
        return image
    extends = base is not None and not in_full
    header = [f"Imported by `servefleet import {node}` from container {running.container}"
              + (f" (compose project {running.compose_project})"
                 if running.compose_project else "") + "."]
    data: dict[str, Any] = {}
    if extends:
        assert base is not None
        data["extends"] = base.name
        data["description"] = f"{base.name} as container {running.container} on {node} runs it"
        if image is not None:
            data["image"] = image
            if running.engine_version and running.engine_version != base.engine_version:
                data["engine_version"] = running.engine_version
            elif not running.engine_version:
                notes.append(f"engine_version: not readable from image {running.image}; kept "
                             f"{base.engine_version} from {base.name}: check it")
        elif running.engine_version and running.engine_version != base.engine_version:
            data["engine_version"] = running.engine_version
        model = {k: v for k, v in reading.model.items() if getattr(base.model, k) != v}
        if model:
            data["model"] = model
        settings = _settings_overlay(engine, reading, base)
        if settings:
            data[engine.settings_field] = settings
        data.update(_env(running, base, notes))
    else:
        source = base
        version = running.engine_version or (source.engine_version if source else None)
        if version is None:
            return (f"engine version: image {running.image} states none (tag or "
                    "org.opencontainers.image.version label) and no profile of this model "
                    "gives one; write the profile by hand, or tag the image with its version")
        if image is None:
            assert source is not None
            image = source.image.model_dump(mode="json")
        if source is not None:
            data = source.model_dump(mode="json", exclude={"name", "extends"},
                                     exclude_none=True)
            data.pop(engine.settings_field, None)
        data["description"] = f"{running.engine} engine of container {running.container} on " \
            f"{node}"
        data["engine"] = engine.name
        data["engine_version"] = version
        data["image"] = image
        model = dict(data.get("model") or {})
        model.update(reading.model)
        if "id" not in model:  # llama.cpp: a label, from the GGUF's file name
            gguf = str(reading.settings.get("gguf", "model")).rsplit("/", 1)[-1]
            model["id"] = gguf.removesuffix(".gguf")
        data["model"] = model
        data[engine.settings_field] = _settings_overlay(engine, reading, None)
        env = _env(running, None, notes)
        data["env"] = env.get("env", {})
        data["secret_env"] = env.get("secret_env", [])
        if source is None:
            notes.append("no shipped profile runs this model: written in full; add the "
                         "model's facts (architecture, weights_gib, native_context…) for "
                         "the rules and the KV planner")
    return data, header, notes

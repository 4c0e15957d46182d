"""A running engine's argv read back into flags and profile fields: the inverse of the
engines' ``flag_pairs`` (their ``flag_fields`` tables, checked against the forward mapping
by the tests).

:func:`read_argv` gives the flags keyed as :func:`~servefleet.core.render.engine_args.
engine_flags` keys them (vLLM's positional model as ``--model``, a boolean turned off as
``--no-x``), with values as servefleet would render them (``0.90`` reads as ``0.9``, JSON
compact with sorted keys), so the two compare directly. Flags no field holds go into the
engine's ``extra_args``; what cannot be expressed at all is a problem, with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from servefleet.core.adopt.inspect import SECRET_VALUE, is_secret_flag
from servefleet.core.engines import EngineSpec, FlagField
from servefleet.core.engines.base import compact_json
from servefleet.core.engines.vllm import ALL_INTERFACES, MODEL_FLAG
from servefleet.core.models.profile import EXTRA_FLAG_RE

VLLM_DEFAULT_PORT = 8000
"""``vllm serve`` listens here without ``--port``."""
# Flags of an engine spread over several nodes or processes: servefleet runs those as
# servefleet:multiNode (ranks on several nodes), which one container cannot be imported as.
SPANNING_FLAGS = ("--headless", "--nnodes", "--node-rank", "--data-parallel-address",
                  "--data-parallel-size-local", "--master-addr")


@dataclass
class FlagReading:
    """What a running engine's argv says, as servefleet would write it."""

    flags: dict[str, str | None] = field(default_factory=dict)
    """Every flag, keyed and valued as ``engine_flags`` renders them."""
    model: dict[str, Any] = field(default_factory=dict)
    """``model:`` fields the argv sets (``id`` for vLLM, ``served_name``, ``revision``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Every field of the engine's table: the value read, or empty (``None``/``False``)
    when the flag is absent (a field with a fixed default only when given)."""
    extra_args: list[str] = field(default_factory=list)
    """Flags no field holds, as ``--flag`` / ``--flag=value``."""
    port: int | None = None
    """``--port``."""
    notes: list[str] = field(default_factory=list)
    """What was read differently from how it was written, and why."""
    problems: list[str] = field(default_factory=list)
    """What cannot be expressed in a profile (each with its reason and fix)."""


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _is_number(token)


def _canonical(spec: FlagField, raw: str) -> tuple[str, Any]:
    """The value as servefleet renders it, and as the profile field holds it."""
    if spec.kind == "int":
        number = int(raw)
        return repr(number), number
    if spec.kind == "float":
        real = float(raw)
        return repr(real), real
    if spec.kind == "json":
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return compact_json(data), data
    if spec.kind == "layers":
        if raw.lstrip("-").isdigit():
            return repr(int(raw)), int(raw)
        return raw, raw
    return raw, raw


def _normal_name(engine: EngineSpec, name: str) -> str:
    # vLLM's parser reads --max_model_len as --max-model-len (not after a '.': those are
    # keys of a JSON config such as --compilation-config.cudagraph_mode).
    if engine.name == "vllm" and name.startswith("--"):
        head, dot, tail = name.partition(".")
        return "--" + head[2:].replace("_", "-") + dot + tail
    return name


def read_argv(engine: EngineSpec, argv: Sequence[str]) -> FlagReading:
    """Read ``argv`` (what follows the engine's entrypoint) into flags and fields."""
    reading = FlagReading()
    table: dict[str, FlagField] = {}
    for known in engine.flag_fields:
        for spelling in (known.flag, *known.aliases):
            table[spelling] = known
    tokens = list(argv)
    if engine.name == "vllm":
        if not tokens or _is_flag(tokens[0]):
            reading.problems.append("no model: vLLM's command names none (neither a "
                                    "positional model nor --model)")
        else:
            reading.model["id"] = tokens.pop(0)
            reading.flags[MODEL_FLAG] = reading.model["id"]
    seen: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not _is_flag(token):
            reading.problems.append(f"argument {token!r} follows no flag: a profile renders "
                                    "flags only (and vLLM's model first)")
            continue
        name, sep, inline = token.partition("=")
        name = _normal_name(engine, name)
        spec = table.get(name)
        off = False
        if spec is None and name.startswith("--no-"):
            twin = table.get("--" + name[5:])
            if twin is not None and twin.kind == "bool":
                spec, off = twin, True
        bare = spec is not None and spec.kind in ("bool", "switch")
        value: str | None = inline if sep else None
        if not sep and not bare and i < len(tokens) and not _is_flag(tokens[i]):
            value = tokens[i]
            i += 1
        if value == SECRET_VALUE or (value or "").endswith(SECRET_VALUE) or (
                is_secret_flag(name) and value is not None):
            reading.problems.append(
                f"{name} passes a secret on the command line, which a profile (kept in git) "
                "cannot hold: give the engine the secret through its environment instead "
                "(vLLM reads VLLM_API_KEY for --api-key, HF_TOKEN for --hf-token; set them "
                "with `pulumi config set --secret servefleet:apiKey …` / servefleet:hfToken) "
                "and drop the flag")
            continue
        if engine.name == "vllm" and name in SPANNING_FLAGS:
            reading.problems.append(
                f"{name}: this engine spans several nodes or processes; servefleet runs such "
                "an engine as servefleet:multiNode, which one container cannot be imported as")
            continue
        if name == "--port" and spec is None:
            if value is None or not value.isdigit():
                reading.problems.append(f"--port {value!r}: not a port number")
                continue
            reading.port = int(value)
            reading.flags["--port"] = value
            continue
        if name == "--host" and spec is None:
            reading.flags["--host"] = value
            continue
        if spec is None:
            _extra(reading, name, value)
            continue
        _managed(reading, spec, name, value, off, bool(sep), seen)
    _fill(engine, reading, seen)
    _listen(engine, reading)
    return reading


def _extra(reading: FlagReading, name: str, value: str | None) -> None:
    """A flag no field holds: into ``extra_args``, if it can be written there."""
    if not EXTRA_FLAG_RE.match(name):
        reading.problems.append(
            f"{name}: no profile field holds it, and extra_args take long lower-case flags "
            f"only (--flag / --flag=value): restart the engine with the flag's long name")
        return
    if value is not None and not value.isprintable():
        reading.problems.append(f"{name}: its value is not one line of printable characters")
        return
    reading.extra_args.append(name if value is None else f"{name}={value}")
    reading.flags[name] = value
    reading.notes.append(f"{name} went into extra_args: the schema does not know it")


def _managed(reading: FlagReading, spec: FlagField, name: str, value: str | None,
             off: bool, inline: bool, seen: dict[str, Any]) -> None:
    """A flag a profile field renders: the field's value and the rendered flag."""
    if spec.kind == "switch" or spec.kind == "bool":
        if inline:
            reading.problems.append(f"{name}={value}: servefleet renders {spec.flag} without a "
                                    "value; restart the engine with the bare flag")
            return
        shown = "--no-" + spec.flag[2:] if off else spec.flag
        reading.flags.pop(spec.flag, None)
        reading.flags.pop("--no-" + spec.flag[2:], None)
        reading.flags[shown] = None
        seen[spec.field] = not off
        return
    if value is None:
        reading.problems.append(f"{name} has no value here, but servefleet renders "
                                f"{spec.flag} with one ({spec.field})")
        return
    try:
        rendered, typed = _canonical(spec, value)
    except ValueError as error:
        reading.problems.append(f"{name} {value!r}: cannot be read as the {spec.kind} that "
                                f"{spec.field} holds ({error})")
        return
    if rendered != value:
        reading.notes.append(f"{name} {value} reads as {rendered} (same value, as servefleet "
                             "writes it)")
    if name != spec.flag:
        reading.notes.append(f"{name} is written {spec.flag}")
    reading.flags[spec.flag] = rendered
    seen[spec.field] = typed


def _fill(engine: EngineSpec, reading: FlagReading, seen: dict[str, Any]) -> None:
    """Every field of the table: read, or left empty so the flag stays out."""
    for spec in engine.flag_fields:
        if spec.field in seen:
            value = seen[spec.field]
        elif spec.optional:
            value = False if spec.kind == "switch" else None
        else:
            continue
        if spec.field.startswith("model."):
            if value is not None:
                reading.model[spec.field[len("model."):]] = value
        else:
            reading.settings[spec.field] = value


def _listen(engine: EngineSpec, reading: FlagReading) -> None:
    """vLLM without ``--host``/``--port`` listens on every interface on 8000: the same as
    what servefleet renders, written out."""
    if engine.name != "vllm":
        if reading.port is None:
            reading.problems.append(
                f"no --port: {engine.display_name}'s default port differs between builds "
                "and servefleet always renders one; restart the engine with --port N")
        return
    if "--host" not in reading.flags:
        reading.flags["--host"] = ALL_INTERFACES
        reading.notes.append(f"no --host: vLLM listens on every interface, as servefleet's "
                             f"--host {ALL_INTERFACES} says")
    if reading.port is None:
        reading.port = VLLM_DEFAULT_PORT
        reading.flags["--port"] = str(VLLM_DEFAULT_PORT)
        reading.notes.append(f"no --port: vLLM's default {VLLM_DEFAULT_PORT}, written out")

"""Engine command lines built from a resolved profile: data, never run here.

``engine_command`` gives the argv that follows the image's ENTRYPOINT (``vllm serve`` in
``vllm/vllm-openai``, ``/app/llama-server`` in ``ghcr.io/ggml-org/llama.cpp``), so for vLLM it
starts with the model id and never with ``serve``. Flags come out in one fixed order, so the
same profile always gives the same list (and the same release id).

``engine_flags`` is the same information as an ordered ``flag → value`` mapping (``None`` for
flags without a value); ``diff_flags`` compares two such mappings for ``diff-profiles`` and plan
diffs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from servefleet.core.engines import FlagPairs, engine_of
from servefleet.core.engines.base import extra_pairs
from servefleet.core.engines.vllm import ALL_INTERFACES as ALL_INTERFACES  # re-exported
from servefleet.core.engines.vllm import MODEL_FLAG as MODEL_FLAG  # re-exported
from servefleet.core.models import Profile


def _pairs(profile: Profile, port: int | None) -> tuple[FlagPairs, list[str]]:
    """The managed flags, and the escape-hatch arguments as written (always last)."""
    engine = engine_of(profile)
    return engine.flag_pairs(profile, port), engine.extra_args(profile)


def engine_command(profile: Profile, port: int) -> list[str]:
    """The argv after the image's ENTRYPOINT, for ``port``.

    vLLM: ``[<model id>, --served-model-name, …, --host, 0.0.0.0, --port, <port>, …]``,
    ``extra_args`` last and as written.
    llama.cpp: ``[-m, <gguf>, --alias, <served name>, --host, …, --port, <port>, …]``,
    ``extra_args`` last with ``--flag=value`` split into two arguments.
    """
    pairs, extra = _pairs(profile, port)
    return engine_of(profile).command(profile, pairs, extra)


def engine_flags(profile: Profile, port: int | None = None) -> dict[str, str | None]:
    """The engine's flags as an ordered ``flag → value`` mapping (``None``: no value).

    The vLLM model (a positional argument) appears as ``--model``. ``--host``/``--port`` are
    included only when ``port`` is given: a profile alone does not fix the port.
    A flag given twice through ``extra_args`` keeps its last value, as argparse does.
    """
    flags: dict[str, str | None] = dict(engine_of(profile).positional_flags(profile))
    pairs, extra = _pairs(profile, port)
    for flag, value in [*pairs, *extra_pairs(extra)]:
        flags[flag] = value
    return flags


@dataclass(frozen=True)
class FlagDiff:
    """What changes between two flag mappings (``a`` → ``b``)."""

    added: dict[str, str | None] = field(default_factory=dict)
    """Flags only in ``b``, with their values."""
    removed: dict[str, str | None] = field(default_factory=dict)
    """Flags only in ``a``, with their values."""
    changed: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """Flags in both with different values: ``(old, new)``. A boolean switched between
    ``--x`` and ``--no-x`` appears here under ``--x`` as ``("--x", "--no-x")``."""

    @property
    def empty(self) -> bool:
        """No flag changes."""
        return not (self.added or self.removed or self.changed)

    def lines(self) -> list[str]:
        """One line per change: ``+ --flag value``, ``- --flag value``, ``~ --flag: a -> b``."""

        def shown(flag: str, value: str | None) -> str:
            return flag if value is None else f"{flag} {_display(value)}"

        out = [f"- {shown(f, v)}" for f, v in self.removed.items()]
        out += [f"+ {shown(f, v)}" for f, v in self.added.items()]
        for flag, (old, new) in self.changed.items():
            out.append(f"~ {flag}: {_display(old)} -> {_display(new)}")
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form: ``{"added": {…}, "removed": {…}, "changed": {flag: {from, to}}}``."""
        return {
            "added": dict(self.added),
            "removed": dict(self.removed),
            "changed": {f: {"from": o, "to": n} for f, (o, n) in self.changed.items()},
        }


def _display(value: str | None) -> str:
    if value is None:
        return "(set)"
    # Values without blanks read best bare (JSON included); others are quoted.
    return value if value and not any(c.isspace() for c in value) else json.dumps(value)


def _positive(flag: str) -> str | None:
    return "--" + flag[5:] if flag.startswith("--no-") else None


def diff_flags(a: dict[str, str | None], b: dict[str, str | None]) -> FlagDiff:
    """Compare two :func:`engine_flags` mappings; order follows ``a`` then ``b``."""
    added = {f: v for f, v in b.items() if f not in a}
    removed = {f: v for f, v in a.items() if f not in b}
    changed: dict[str, tuple[str | None, str | None]] = {
        f: (v, b[f]) for f, v in a.items() if f in b and b[f] != v
    }
    # Pair '--x' with '--no-x' so a toggled boolean reads as one change.
    for flag in list(removed):
        for twin in (_positive(flag), "--no-" + flag[2:]):
            if twin is not None and twin in added and removed[flag] is None \
                    and added[twin] is None:
                base = flag if twin.startswith("--no-") else twin
                changed[base] = (flag, twin)
                del removed[flag]
                del added[twin]
                break
    return FlagDiff(added=added, removed=removed, changed=changed)

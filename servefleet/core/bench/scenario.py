"""Benchmark scenarios as data: what ``servefleet bench`` sends to an engine.

A scenario file (``scenarios/*.yaml``) lists scenarios by name; each is one shape of load
for vLLM's own load generator (``vllm bench serve``): random prompts of ``input_len``
tokens asking for ``output_len`` tokens, ``prompts`` of them with at most ``concurrency``
in flight, ``warmups`` requests first, once per seed. The seeds' suite (A–D) ships as
``scenarios/seeds.yaml``. A scenario may instead replay a recorded request mix (``replay``:
a timed trace, :mod:`servefleet.core.bench.trace`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import Field, PrivateAttr, model_validator

from servefleet.core.bench.trace import Trace, read_trace
from servefleet.core.errors import ConfigError
from servefleet.core.modelfile import read_model_file
from servefleet.core.models.common import StrictModel

SCENARIOS_DIR = "scenarios"
DEFAULT_SCENARIOS = "scenarios/seeds.yaml"


class Scenario(StrictModel):
    """One shape of load."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
    """Short name shown in tables (``A``, ``long-prefill``)."""
    description: str = ""
    """What the scenario stands for (``chat, one user``)."""
    input_len: int = Field(default=512, ge=1, le=1_048_576)
    """Prompt tokens per request (random prompts)."""
    output_len: int = Field(default=256, ge=1, le=131_072)
    """Tokens asked per request; the engine is told to ignore EOS so every request
    produces exactly this many."""
    concurrency: int = Field(default=1, ge=1, le=4096)
    """Requests in flight at most (``--max-concurrency``)."""
    prompts: int = Field(default=32, ge=1, le=100_000)
    """Requests measured per seed."""
    warmups: int = Field(default=3, ge=0, le=1000)
    """Requests sent first and not measured (CUDA graphs, caches)."""
    seeds: list[int] = Field(default_factory=lambda: [42, 123], min_length=1, max_length=16)
    """One run per seed; their spread is part of the noise band."""
    replay: str | None = Field(default=None, min_length=1, max_length=400)
    """A recorded request mix to replay instead of random prompts: a timed trace (JSON
    lines ``{"timestamp", "input_length", "output_length", "hash_ids"}``, the Mooncake
    format), relative to the scenario file. Each request leaves at its timestamp; ``prompts``
    defaults to the trace's length; ``input_len`` and ``output_len`` are the trace's."""
    replay_time_scale: float = Field(default=1.0, gt=0, le=1000)
    """Timestamps × this = seconds: 0.001 for a trace in milliseconds, 0.5 to replay it
    twice as fast."""
    replay_block_tokens: int = Field(default=16, ge=1, le=65_536)
    """Prompt tokens per ``hash_ids`` block of the trace (the Alibaba traces' 16, the
    Mooncake traces' 512)."""
    _trace: Trace | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _distinct_seeds(self) -> Scenario:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat ({self.seeds}): each seed is one run; "
                             "list each once")
        return self

    @property
    def identity(self) -> str:
        """12 hex of what the scenario sends: results of a scenario whose load changed
        under the same name are never compared with the old ones."""
        load = self.model_dump(exclude={"name", "description", "seeds", "replay"})
        if self.replay is not None:
            # What is replayed, not where the file lies; lengths come from the trace.
            load.pop("input_len")
            load.pop("output_len")
            load["trace"] = self.trace.digest
        else:
            load.pop("replay_time_scale")
            load.pop("replay_block_tokens")
        return hashlib.sha256(json.dumps(load, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def trace(self) -> Trace:
        """The replayed trace, read with the scenario file (``replay`` scenarios only)."""
        if self._trace is None:
            raise ConfigError(f"scenario {self.name}: its replay trace was not read "
                              "(scenarios with `replay` come from load_scenarios)")
        return self._trace

    def with_trace(self, trace: Trace) -> Scenario:
        """This replay scenario with its trace read (``prompts`` defaulting to its
        length); :class:`ConfigError` when ``prompts`` asks for more than it holds."""
        if "prompts" not in self.model_fields_set:
            copy = self.model_copy(update={"prompts": trace.requests})
        elif self.prompts > trace.requests:
            raise ConfigError(f"scenario {self.name}: prompts {self.prompts} but its trace "
                              f"holds {trace.requests} requests; ask for at most that")
        else:
            copy = self.model_copy()
        copy._trace = trace
        return copy

    def shape(self) -> str:
        """``512/512 ×1``: input/output tokens and concurrency, for tables (``replay ×4``
        for a trace)."""
        if self.replay is not None:
            return f"replay ×{self.concurrency}"
        return f"{self.input_len}/{self.output_len} ×{self.concurrency}"


class ScenarioFile(StrictModel):
    """A scenario file: ``scenarios:`` a list of :class:`Scenario`."""

    scenarios: list[Scenario] = Field(min_length=1)
    """The scenarios, run in this order."""

    @model_validator(mode="after")
    def _distinct_names(self) -> ScenarioFile:
        names = [s.name for s in self.scenarios]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"scenario names repeat: {', '.join(twice)}; give each its own")
        return self


def load_scenarios(path: Path, display: str | None = None) -> list[Scenario]:
    """The scenarios of ``path``; :class:`ConfigError` naming the file and field on a bad
    one."""
    shown = display or str(path)
    scenarios = read_model_file(path, ScenarioFile, "scenarios", display).scenarios
    return [s.with_trace(read_trace(path.parent / s.replay,
                                    f"{shown}: scenario {s.name}: replay {s.replay}",
                                    s.replay_block_tokens))
            if s.replay is not None else s for s in scenarios]


def select(scenarios: list[Scenario], names: list[str], source: str) -> list[Scenario]:
    """The scenarios named (in the file's order), all when ``names`` is empty;
    :class:`ConfigError` for a name the file lacks."""
    if not names:
        return scenarios
    known = {s.name for s in scenarios}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"{source}: no scenario {', '.join(map(repr, unknown))} "
                          f"(known: {', '.join(s.name for s in scenarios)})")
    return [s for s in scenarios if s.name in names]

"""What every engine module provides (:class:`EngineSpec`), and the argv helpers they share.

One module per engine, registered by name in :mod:`servefleet.core.engines`: callers ask the
engine of a profile for its flags, defaults, health-check command or expectations instead of
branching on ``profile.engine`` (vLLM's ``vllm/platforms`` does the same for devices).

Pure, and a leaf of the core: importing it imports only the models, so the rules, the
renderer and the KV planner may all use it without an import cycle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from servefleet.core.bootlog.model import BootFacts
from servefleet.core.models import LlamaCppSettings, Node, Profile, VllmSettings
from servefleet.core.models.profile import CudaGraphMode


def vllm_settings(profile: Profile) -> VllmSettings:
    """The ``vllm:`` block of a vLLM profile (vLLM-only code: the KV planner, vLLM rules)."""
    assert profile.vllm is not None, f"profile {profile.name} runs {profile.engine}, not vLLM"
    return profile.vllm

FlagPairs = list[tuple[str, str | None]]
"""Flags in order as ``(flag, value)``; ``None``: a flag without a value."""

EngineSettings = VllmSettings | LlamaCppSettings
"""The engine block of a profile (``vllm:`` or ``llamacpp:``)."""


FlagKind = Literal["text", "int", "float", "bool", "switch", "json", "layers"]
"""How a managed flag's value reads back into its profile field: ``text`` as written,
``int``/``float`` numbers, ``bool`` an optional boolean (``--x`` / ``--no-x``), ``switch`` a
flag rendered only when on, ``json`` a JSON object, ``layers`` an int or a word
(llama.cpp's ``-ngl all``)."""


@dataclass(frozen=True)
class FlagField:
    """One managed flag and the profile field it renders from: the inverse of an engine's
    ``flag_pairs``, used to read a running engine's argv back into a profile
    (:mod:`servefleet.core.adopt`). Each engine's table is checked against its forward
    mapping by the tests, so the two cannot disagree."""

    flag: str
    """The flag as ``flag_pairs`` renders it (``--max-model-len``, ``-c``)."""
    field: str
    """The field it comes from: a settings field (``max_model_len``) or ``model.<field>``."""
    kind: FlagKind = "text"
    """How its value reads back."""
    aliases: tuple[str, ...] = ()
    """Other spellings the engine accepts for the same flag (``-tp``, ``--ctx-size``)."""
    optional: bool = True
    """Whether the field may be left empty (``None`` / ``False``) to leave the flag out;
    ``False`` for a field with a fixed default (llama.cpp's ``host``)."""


@dataclass(frozen=True)
class EngineExpectations:
    """What an engine adds to a profile's boot expectations on a node
    (:func:`servefleet.core.expectations.derive_expectations`)."""

    cudagraph_mode: CudaGraphMode | None = None
    """CUDA-graph mode the boot log should report; ``None``: nothing to check."""
    attention_backend: str | None = None
    """Attention backend the engine is expected to pick; ``None``: not reported."""
    kv_smaller_than: str | None = None
    """Identity of the profile whose pool this one's is expected to be smaller than."""
    notes: tuple[str, ...] = ()
    """One line per derived value, saying why."""


class EngineSpec(Protocol):
    """One inference engine, as the core needs to know it."""

    @property
    def name(self) -> str:
        """The profile's ``engine:`` value (``vllm``, ``llama.cpp``)."""
        ...

    @property
    def display_name(self) -> str:
        """The name people know it by (``vLLM``, ``llama.cpp``)."""
        ...

    @property
    def settings_field(self) -> str:
        """The profile field that holds its settings (``vllm``, ``llamacpp``)."""
        ...

    @property
    def bootlog_reader(self) -> str:
        """Name of its boot-log reader (:class:`servefleet.core.bootlog.BootLogParser`)."""
        ...

    @property
    def spans_nodes(self) -> bool:
        """Whether one deployment of it may span several nodes (multi-node ranks)."""
        ...

    @property
    def weights_kinds(self) -> tuple[str, ...]:
        """The ``model.source`` kinds its image can stage (``snapshot`` needs
        ``huggingface_hub`` in its python3; ``file`` and ``url`` need curl)."""
        ...

    @property
    def kv_planned(self) -> bool:
        """Whether the KV planner (:mod:`servefleet.core.kvplan`) predicts its pool."""
        ...

    @property
    def metric_prefix(self) -> str:
        """The prefix of its ``/metrics`` names (``vllm:``, ``llamacpp:``); the names
        themselves are read in :mod:`servefleet.core.metrics`."""
        ...

    @property
    def kv_usage_gauges(self) -> tuple[str, ...]:
        """Its ``/metrics`` gauges of KV usage (0-1): ``bench`` keeps their peak."""
        ...

    @property
    def bench_in_engine(self) -> bool:
        """Whether its image carries the load generator ``servefleet bench`` runs
        (``vllm bench serve``), so a bench runs inside the engine's own container."""
        ...

    @property
    def bench_api(self) -> tuple[str, str]:
        """The ``vllm bench serve`` backend and endpoint that read its streamed token
        counts: the load generator takes a request's output tokens from the ``usage`` of a
        closing chunk that has no choices, and counts them again from the text (with its
        own tokenizer) where the engine puts ``usage`` elsewhere."""
        ...

    @property
    def version_path(self) -> str:
        """The HTTP path where it tells its version (``/version``, ``/props``)."""
        ...

    @property
    def version_key(self) -> str:
        """The key of that JSON answer holding the version (``version``, ``build_info``)."""
        ...

    @property
    def health_503(self) -> str:
        """What a 503 from ``/health`` means for it (said next to the answer)."""
        ...

    @property
    def flag_fields(self) -> tuple[FlagField, ...]:
        """Its managed flags with the profile field each renders from (the inverse of
        :meth:`flag_pairs`; ``--host``/``--port`` only where a field holds them)."""
        ...

    def settings(self, profile: Profile) -> EngineSettings | None:
        """The profile's settings block for this engine (``None``: another engine's)."""
        ...

    def extra_args(self, profile: Profile) -> list[str]:
        """The escape-hatch arguments as written."""
        ...

    def flag_pairs(self, profile: Profile, port: int | None) -> FlagPairs:
        """The managed flags in their fixed order (``--host``/``--port`` only with a port)."""
        ...

    def command(self, profile: Profile, pairs: FlagPairs, extra: list[str]) -> list[str]:
        """The argv after the image's ENTRYPOINT from the managed flags and ``extra``."""
        ...

    def positional_flags(self, profile: Profile) -> dict[str, str | None]:
        """Positional arguments, keyed as flags for comparisons (vLLM's ``--model``)."""
        ...

    def healthcheck(self, profile: Profile, port: int) -> list[str]:
        """The container's exec-form health test."""
        ...

    def gpu_count(self, profile: Profile) -> int | None:
        """GPUs the container asks for; ``None``: all of the node's."""
        ...

    def kv_cache_dtype(self, profile: Profile) -> str | None:
        """The KV cache dtype the engine should report; ``None``: not checked."""
        ...

    def quantization(self, profile: Profile) -> str | None:
        """The quantization method it is told to use; ``None``: the weights' own."""
        ...

    def max_model_len(self, profile: Profile) -> int | None:
        """The ``max_model_len`` ``/v1/models`` should report; ``None``: not checked."""
        ...

    def gpu_memory_utilization(self, profile: Profile) -> float | None:
        """The share of GPU memory it takes, defaults applied; ``None``: not a setting of
        this engine."""
        ...

    def expectations(self, profile: Profile, node: Node) -> EngineExpectations:
        """What a healthy boot of ``profile`` on ``node`` shows, engine-specific part."""
        ...

    def nondeterminism(self, profile: Profile) -> str | None:
        """Why identical temperature-0 requests may differ (a note), or ``None``."""
        ...

    def instability(self, profile: Profile) -> str | None:
        """Why outputs differed between identical requests, when its configuration explains
        it (the determinism probe's verdict), or ``None``."""
        ...

    def kv_pool(self, facts: BootFacts) -> tuple[float, str] | None:
        """The KV pool its boot log states, with its unit (``tokens``, ``MiB``)."""
        ...

    def metric_figures(self, text: str) -> dict[str, Any]:
        """The watcher's figures from a ``/metrics`` page (``generation_tokens``,
        ``prompt_tokens``, ``requests_running``, ``requests_waiting``, ``kv_usage``);
        :class:`~servefleet.core.metrics.MetricsError` when the page is not one."""
        ...


# ------------------------------------------------------------------------- argv helpers


def compact_json(value: Any) -> str:
    """JSON as vLLM flags take it: sorted keys, no spaces, ASCII only (stable across runs)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _number(value: float | int) -> str:
    # repr keeps floats exact (0.45 stays 0.45), ints have no trailing '.0'.
    return repr(value)


def bool_flag(pairs: FlagPairs, flag: str, value: bool | None) -> None:
    """Optional booleans: ``--flag`` / ``--no-flag`` (argparse BooleanOptionalAction)."""
    if value is None:
        return
    pairs.append((flag if value else "--no-" + flag[2:], None))


def opt(pairs: FlagPairs, flag: str, value: object) -> None:
    """``flag value`` when ``value`` is set (numbers exact, no booleans)."""
    if value is None:
        return
    if isinstance(value, bool):
        raise TypeError(f"{flag}: booleans go through bool_flag")
    text = _number(value) if isinstance(value, int | float) else str(value)
    pairs.append((flag, text))


def extra_pairs(extra_args: list[str]) -> FlagPairs:
    """``--flag`` or ``--flag=value`` from the escape hatch as ``(flag, value)`` pairs."""
    pairs: FlagPairs = []
    for arg in extra_args:
        flag, sep, value = arg.partition("=")
        pairs.append((flag, value if sep else None))
    return pairs


def flatten(pairs: FlagPairs) -> list[str]:
    """``[(flag, value), …]`` as argv."""
    argv: list[str] = []
    for flag, value in pairs:
        argv.append(flag)
        if value is not None:
            argv.append(value)
    return argv

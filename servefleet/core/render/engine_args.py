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

from servefleet.core.models import LlamaCppSettings, Profile, VllmSettings

ALL_INTERFACES = "0.0.0.0"
"""Engines run with host networking; they listen on every interface of the node."""

MODEL_FLAG = "--model"
"""Key of the model in :func:`engine_flags` for vLLM (rendered as the positional argument)."""

FlagPairs = list[tuple[str, str | None]]


def compact_json(value: Any) -> str:
    """JSON as vLLM flags take it: sorted keys, no spaces, ASCII only (stable across runs)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _number(value: float | int) -> str:
    # repr keeps floats exact (0.45 stays 0.45), ints have no trailing '.0'.
    return repr(value)


def _bool_flag(pairs: FlagPairs, flag: str, value: bool | None) -> None:
    """Optional booleans: ``--flag`` / ``--no-flag`` (argparse BooleanOptionalAction)."""
    if value is None:
        return
    pairs.append((flag if value else "--no-" + flag[2:], None))


def _opt(pairs: FlagPairs, flag: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool):
        raise TypeError(f"{flag}: booleans go through _bool_flag")
    text = _number(value) if isinstance(value, int | float) else str(value)
    pairs.append((flag, text))


def _extra_pairs(extra_args: list[str]) -> FlagPairs:
    """``--flag`` or ``--flag=value`` from the escape hatch as ``(flag, value)`` pairs."""
    pairs: FlagPairs = []
    for arg in extra_args:
        flag, sep, value = arg.partition("=")
        pairs.append((flag, value if sep else None))
    return pairs


def _vllm_pairs(profile: Profile, settings: VllmSettings, port: int | None) -> FlagPairs:
    pairs: FlagPairs = []
    _opt(pairs, "--revision", profile.model.revision)
    _opt(pairs, "--served-model-name", profile.model.served_name)
    if port is not None:
        _opt(pairs, "--host", ALL_INTERFACES)
        _opt(pairs, "--port", port)
    _opt(pairs, "--gpu-memory-utilization", settings.gpu_memory_utilization)
    _opt(pairs, "--max-model-len", settings.max_model_len)
    _opt(pairs, "--max-num-seqs", settings.max_num_seqs)
    _opt(pairs, "--max-num-batched-tokens", settings.max_num_batched_tokens)
    _opt(pairs, "--kv-cache-dtype", settings.kv_cache_dtype)
    _bool_flag(pairs, "--enable-chunked-prefill", settings.enable_chunked_prefill)
    _bool_flag(pairs, "--enable-prefix-caching", settings.enable_prefix_caching)
    _bool_flag(pairs, "--async-scheduling", settings.async_scheduling)
    if settings.speculative is not None:
        spec = settings.speculative.model_dump(mode="json", exclude_none=True)
        # num_speculative_tokens is always present: vLLM needs it explicitly for MTP.
        _opt(pairs, "--speculative-config", compact_json(spec))
    _opt(pairs, "--tensor-parallel-size", settings.tensor_parallel_size)
    _opt(pairs, "--dtype", settings.dtype)
    _opt(pairs, "--quantization", settings.quantization)
    _opt(pairs, "--attention-backend", settings.attention_backend)
    _opt(pairs, "--reasoning-parser", settings.reasoning_parser)
    _opt(pairs, "--tool-call-parser", settings.tool_call_parser)
    # Plain booleans default to off in vLLM; only the 'on' state is a flag worth rendering.
    if settings.enable_auto_tool_choice:
        pairs.append(("--enable-auto-tool-choice", None))
    if settings.default_chat_template_kwargs is not None:
        _opt(pairs, "--default-chat-template-kwargs",
             compact_json(settings.default_chat_template_kwargs))
    _opt(pairs, "--generation-config", settings.generation_config)
    if settings.hf_overrides is not None:
        _opt(pairs, "--hf-overrides", compact_json(settings.hf_overrides))
    if settings.trust_remote_code:
        pairs.append(("--trust-remote-code", None))
    if settings.language_model_only:
        pairs.append(("--language-model-only", None))
    if settings.enforce_eager:
        pairs.append(("--enforce-eager", None))
    # thinking_token_budget is a per-request field clients send, not a server flag.
    return pairs


def _llamacpp_pairs(profile: Profile, settings: LlamaCppSettings, port: int | None) -> FlagPairs:
    pairs: FlagPairs = []
    _opt(pairs, "-m", settings.gguf)
    _opt(pairs, "--alias", profile.model.served_name)
    if port is not None:
        _opt(pairs, "--host", settings.host)
        # Always explicit: newer builds default to 9931, older ones to 8080.
        _opt(pairs, "--port", port)
    _opt(pairs, "-c", settings.ctx_size)
    _opt(pairs, "-np", settings.parallel)
    _opt(pairs, "-ngl", settings.gpu_layers)
    _opt(pairs, "-fa", settings.flash_attn)
    _opt(pairs, "-ctk", settings.cache_type_k)
    _opt(pairs, "-ctv", settings.cache_type_v)
    _opt(pairs, "-b", settings.batch_size)
    _opt(pairs, "-ub", settings.ubatch_size)
    _bool_flag(pairs, "--jinja", settings.jinja)
    _opt(pairs, "--reasoning-budget", settings.reasoning_budget)
    if settings.metrics:
        pairs.append(("--metrics", None))
    if settings.log_verbosity is not None:
        pairs.append(("-lv", str(settings.log_verbosity)))
    _bool_flag(pairs, "--cache-prompt", settings.cache_prompt)
    _opt(pairs, "--seed", settings.seed)
    return pairs


def _pairs(profile: Profile, port: int | None) -> tuple[FlagPairs, list[str]]:
    """The managed flags, and the escape-hatch arguments as written (always last)."""
    if profile.engine == "vllm":
        assert profile.vllm is not None  # guaranteed by Profile's validator
        return _vllm_pairs(profile, profile.vllm, port), list(profile.vllm.extra_args)
    assert profile.llamacpp is not None
    return _llamacpp_pairs(profile, profile.llamacpp, port), list(profile.llamacpp.extra_args)


def _flatten(pairs: FlagPairs) -> list[str]:
    argv: list[str] = []
    for flag, value in pairs:
        argv.append(flag)
        if value is not None:
            argv.append(value)
    return argv


def engine_command(profile: Profile, port: int) -> list[str]:
    """The argv after the image's ENTRYPOINT, for ``port``.

    vLLM: ``[<model id>, --served-model-name, …, --host, 0.0.0.0, --port, <port>, …]``,
    ``extra_args`` last and as written.
    llama.cpp: ``[-m, <gguf>, --alias, <served name>, --host, …, --port, <port>, …]``,
    ``extra_args`` last with ``--flag=value`` split into two arguments.
    """
    pairs, extra = _pairs(profile, port)
    if profile.engine == "vllm":
        # argparse takes '--flag=value' as written.
        return [profile.model.id, *_flatten(pairs), *extra]
    # llama-server looks each argument up whole ('--threads=8' is an invalid argument), so
    # '--flag=value' becomes two arguments.
    return _flatten([*pairs, *_extra_pairs(extra)])


def engine_flags(profile: Profile, port: int | None = None) -> dict[str, str | None]:
    """The engine's flags as an ordered ``flag → value`` mapping (``None``: no value).

    The vLLM model (a positional argument) appears as ``--model``. ``--host``/``--port`` are
    included only when ``port`` is given: a profile alone does not fix the port.
    A flag given twice through ``extra_args`` keeps its last value, as argparse does.
    """
    flags: dict[str, str | None] = {}
    if profile.engine == "vllm":
        flags[MODEL_FLAG] = profile.model.id
    pairs, extra = _pairs(profile, port)
    for flag, value in [*pairs, *_extra_pairs(extra)]:
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

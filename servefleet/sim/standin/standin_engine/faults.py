"""Faults a simulated node can be told to show, read from a control file.

The file ``$STANDIN_CONTROL_DIR/fault`` (default ``/standin-control/fault``) holds one
word per line; blank lines and ``#`` comments are ignored. The variable
``STANDIN_FAULT`` may add words too (comma or space separated). Boot faults are
read once at start; runtime faults (``crash_after_boot``, ``health_fail``) are
re-read every second while serving, so a test can flip them on a running engine.

Words:

``kv_oom``
    The KV-cache allocation fails at boot with the engine's real error and traceback
    (vLLM: ``No available memory for the cache blocks``; llama.cpp: the CUDA
    out-of-memory while allocating the KV buffer), then the process exits 1.
``crash_after_boot`` (``crash_after_boot=S``)
    The engine becomes ready, then dies S seconds later (default 3) with the real
    engine-death messages; the process exits 1.
``hang_loading``
    Weight loading starts and never finishes (the HTTP port never opens).
``slow_boot`` (``slow_boot=N``)
    Every boot phase takes N times longer (default 10), in the log and in wall time.
``health_fail``
    ``/health`` answers 503 although the engine serves requests.
``kv_small`` (``kv_small=F``)
    The KV pool is smaller by the fraction F (default 0.3) without failing, as when
    something else holds device memory: a baseline drift.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

KNOWN_FAULTS = frozenset(
    {"kv_oom", "crash_after_boot", "hang_loading", "slow_boot", "health_fail", "kv_small"}
)
DEFAULT_CONTROL_DIR = "/standin-control"


@dataclass(frozen=True)
class Faults:
    """The faults in force, each with its optional numeric argument."""

    words: dict[str, float | None]
    """Fault word -> argument given with ``word=value`` (None when absent)."""

    def has(self, word: str) -> bool:
        """Whether the fault is on."""
        return word in self.words

    def value(self, word: str, default: float) -> float:
        """The fault's argument, or ``default``."""
        arg = self.words.get(word)
        return default if arg is None else arg

    @property
    def slowdown(self) -> float:
        """Boot slow-down factor (1 when ``slow_boot`` is off)."""
        return self.value("slow_boot", 10.0) if self.has("slow_boot") else 1.0


def control_file(env: Mapping[str, str]) -> Path:
    """Where the fault file lives."""
    return Path(env.get("STANDIN_CONTROL_DIR", "") or DEFAULT_CONTROL_DIR) / "fault"


def _parse_words(text: str, warn: bool) -> dict[str, float | None]:
    words: dict[str, float | None] = {}
    for raw in text.replace(",", "\n").splitlines():
        line = raw.split("#", 1)[0].strip()
        for token in line.split():
            name, sep, arg = token.partition("=")
            name = name.strip().lower()
            if name not in KNOWN_FAULTS:
                # Said on stderr with a prefix no engine uses, so a boot-log parser
                # never mistakes it for an engine line.
                if warn:
                    print(f"[standin] ignoring unknown fault word {name!r}", file=sys.stderr)
                continue
            try:
                words[name] = float(arg) if sep and arg else None
            except ValueError:
                if warn:
                    print(f"[standin] ignoring bad fault argument {token!r}", file=sys.stderr)
                words[name] = None
    return words


def read_faults(env: Mapping[str, str], warn: bool = True) -> Faults:
    """Read the control file and ``STANDIN_FAULT``; a missing file means no faults."""
    text = ""
    path = control_file(env)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    text += "\n" + env.get("STANDIN_FAULT", "")
    return Faults(_parse_words(text, warn))


def current_faults() -> Faults:
    """Faults as they stand now (re-read quietly for runtime faults)."""
    return read_faults(os.environ, warn=False)

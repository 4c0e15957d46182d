"""The building blocks every engine's rules share.

A :class:`Rule` pairs a literal *anchor* (the scanner looks for it in the raw bytes with
``bytes.find``, which is what keeps parsing near ``grep`` speed) with a handler that runs a
regex on the few lines that contain it. Each rule's regexes are written in the subset of
syntax that Python ``re`` and POSIX ERE share (``[0-9]`` not ``\\d``, no ``(?:``), so the
benchmark can hand the very same patterns to ``grep -E``.

:class:`EngineState` is the per-engine accumulator: facts with their evidence, the
ready/failed lifecycle, and the failure candidates from which the root cause is chosen.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servefleet.core.bootlog.failures import TracebackTracker
from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.model import PRIORITY, Evidence, FailureClass

BOOT = 1
"""Phase bit: the engine is booting (every fact can still appear)."""
SERVING = 2
"""Phase bit: the engine is ready; only failures, shutdown and metrics can change."""
DYING = 4
"""Phase bit: the engine was ready and then hit a fatal error; collect the cause."""
INSPECT = 8
"""Dispatch bit: the line right after a traceback header printed while serving (its first
frame tells whether the process is exiting)."""
ALWAYS = BOOT | SERVING | DYING

#: Evidence lines kept per fact; enough to prove it, bounded for constant memory.
MAX_EVIDENCE = 4
_EXCERPT = 300


@dataclass(frozen=True)
class Rule:
    """One recognisable message: a literal anchor, its regexes and what it proves."""

    anchor: str
    """Literal text every matching line contains (ASCII), searched for in raw bytes."""
    patterns: tuple[str, ...]
    """Regexes (Python/ERE common subset) the handler uses; ``grep -E`` gets the same."""
    handler: Callable[[Any, LogLine, tuple[re.Pattern[str], ...]], bool]
    """Updates the state from a line; returns False when the anchor was there but the
    regex did not match (the scanner then retries with a hard-wrapped continuation)."""
    phases: int = BOOT
    """When the rule applies: :data:`BOOT`, :data:`SERVING`, :data:`DYING`, and
    :data:`INSPECT` for the line after a traceback header printed while serving."""
    once: tuple[str, ...] = ()
    """Facts the rule sets first-wins: once all are known the rule is skipped (worker
    groups, TP ranks and restarts repeat boot lines)."""
    compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "compiled", tuple(re.compile(p) for p in self.patterns))

    @property
    def anchor_bytes(self) -> bytes:
        """The anchor as the scanner searches for it."""
        return self.anchor.encode("ascii")


def excerpt(line: LogLine, start: int = 0, end: int = 0) -> Evidence:
    """Evidence for a line, cut to about 300 characters around ``msg[start:end]``."""
    text = line.text
    if len(text) <= _EXCERPT:
        return Evidence(line=line.lineno, text=text)
    offset = len(text) - len(line.msg)
    lo = max(0, offset + start - 100)
    hi = min(len(text), max(offset + end, lo) + 200)
    cut = text[lo:hi]
    marked = ("…" if lo else "") + cut + ("…" if hi < len(text) else "")
    return Evidence(line=line.lineno, text=marked)


def number(text: str) -> int:
    """``"3,366,051"`` -> 3366051."""
    return int(text.replace(",", ""))


@dataclass
class FailureCandidate:
    """A line that may explain a failure."""

    cls: FailureClass
    reason: str
    evidence: Evidence
    order: int


class EngineState:
    """Facts of one engine's boot, with the ready/failed lifecycle.

    Subclasses add engine facts and build the engine's ``extra`` model.
    """

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.evidence: dict[str, list[Evidence]] = {}
        self.ready: Evidence | None = None
        self.fatal: Evidence | None = None
        self.ready_before_failure = False
        self.shutdown = False
        self.stopped: Evidence | None = None
        """The line that shows an operator's stop, if any."""
        self.offline = False
        self.causes: list[FailureCandidate] = []
        # Once serving, request errors come and go; only recent ones can explain a death.
        self.runtime_causes: deque[FailureCandidate] = deque(maxlen=32)
        self.tracebacks = TracebackTracker()
        self.capturing = False
        """CUDA graphs are being captured (an error now is a capture failure)."""
        self.window = False
        """A traceback header was printed while serving: the scanner reads the next line
        (the first frame) although it holds no anchor."""
        self._order = 0

    # -- facts -------------------------------------------------------------------------
    def first(self, key: str, value: Any, proof: Evidence) -> None:
        """Set a fact unless already set (first worker / target model wins)."""
        if key not in self.values:
            self.values[key] = value
            self.evidence[key] = [proof]

    def last(self, key: str, value: Any, proof: Evidence) -> None:
        """Set a fact, replacing an earlier statement (the last statement wins)."""
        self.values[key] = value
        self.evidence[key] = [proof]

    def prove(self, key: str, proof: Evidence) -> None:
        """Add a supporting line to a fact's evidence (bounded)."""
        items = self.evidence.setdefault(key, [])
        if len(items) < MAX_EVIDENCE and all(item.line != proof.line for item in items):
            items.append(proof)

    def get(self, key: str, default: Any = None) -> Any:
        """A fact's value or ``default``."""
        return self.values.get(key, default)

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def phase(self) -> int:
        """BOOT until ready; then SERVING, or DYING once a fatal error was seen."""
        if self.ready is None:
            return BOOT
        return DYING if self.fatal is not None else SERVING

    def mark_ready(self, proof: Evidence, *, offline: bool = False) -> None:
        """The engine serves: later failures must be strong to count."""
        if self.ready is None and self.fatal is None:
            self.ready = proof
            self.offline = offline
            # Causes seen during a boot that went on to succeed were not fatal.
            self.causes.clear()

    def mark_shutdown(self) -> None:
        """An operator stopped the engine: errors printed while it winds down are noise."""
        self.shutdown = True

    def mark_stopped(self, proof: Evidence, since_line: int | None = None) -> None:
        """An operator's stop (Ctrl-C, SIGINT, SIGTERM) proven by ``proof``.

        It is no failure: after ready the outcome stays ``ready``; before ready the boot is
        ``incomplete`` (it never got to serve, and nothing in it failed). A fatal mark made
        from ``since_line`` on belongs to the stop itself (the traceback a KeyboardInterrupt
        prints, whose top frame marked the process as exiting) and is withdrawn; a failure
        before it stands."""
        self.shutdown = True
        if self.stopped is None:
            self.stopped = proof
        fatal = self.fatal
        if fatal is not None and since_line is not None and fatal.line >= since_line:
            self.fatal = None
            self.ready_before_failure = False

    def note_cause(self, cls: FailureClass, reason: str, proof: Evidence) -> None:
        """Remember a line that may explain a failure (the best one is reported)."""
        if self.shutdown:
            return
        self._order += 1
        candidate = FailureCandidate(cls, reason.strip()[:2000], proof, self._order)
        if self.ready is not None:
            self.runtime_causes.append(candidate)
        elif len(self.causes) < 64:
            self.causes.append(candidate)

    def mark_fatal(self, proof: Evidence) -> None:
        """The engine (or its server process) died or cannot continue."""
        if self.shutdown or self.fatal is not None:
            return
        self.fatal = proof
        if self.ready is not None:
            self.ready_before_failure = True

    @property
    def outcome(self) -> str:
        """``failed`` beats ``ready``: a server that died after becoming ready is down."""
        if self.fatal is not None:
            return "failed"
        return "ready" if self.ready is not None else "incomplete"

    def failure(self) -> tuple[FailureClass, str, list[Evidence]] | None:
        """Class, reason and proving lines of the failure, if the boot failed."""
        if self.fatal is None:
            return None
        causes: list[FailureCandidate] = self.causes
        if self.ready_before_failure:
            causes = [c for c in self.runtime_causes if c.evidence.line >= self.fatal.line - 2000]
        if causes:
            best = min(causes, key=lambda c: (PRIORITY[c.cls], c.order))
            proofs = [best.evidence]
            if self.fatal.line != best.evidence.line:
                proofs.append(self.fatal)
            return best.cls, best.reason, proofs
        # Died without an error line: while capturing CUDA graphs that is the capture.
        cls = FailureClass.CUDAGRAPH_CAPTURE_FAILED if self.capturing else (
            FailureClass.ENGINE_CORE_DIED)
        return cls, self.fatal.text, [self.fatal]

    def build_extra(self) -> Any:
        """The engine's extra-facts model (subclasses)."""
        return None

    def contract(self) -> dict[str, Any]:
        """Contract fields the engine knows (subclasses may derive some at the end)."""
        return dict(self.values)

"""Failure signatures: which class a fatal error line belongs to.

The signatures are data: ``healthchecks/failure-signatures.yaml`` (an ordered list, the
first entry that matches names the class; its header documents the format). The strings
come from the engines' sources and from real boot logs (FORMATS.md section 11, vLLM issues
#41565/#41726 for the TurboQuant assertion); each entry says where in its ``why``.

What a line alone cannot tell stays here: where the error happened. An out-of-memory error
raised while the KV cache is allocated is ``kv_cache_oom``, the same error during CUDA-graph
capture is ``cudagraph_capture_failed``, anywhere else ``cuda_oom`` (:func:`classify`, with
the frames :class:`TracebackTracker` saw).

The file is found through ``$SERVEFLEET_HEALTHCHECKS`` (a folder) or else in the
``healthchecks/`` folder of the checkout the package is installed from, and read once per
process. Reading a local data file keeps the parser pure: no network, no subprocess.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servefleet.core.bootlog.model import FailureClass
from servefleet.core.errors import ConfigError
from servefleet.core.resources import shipped_dir
from servefleet.core.yamlfile import read_yaml

F = FailureClass

#: Environment variable naming the folder that holds :data:`SIGNATURES_FILE`.
HEALTHCHECKS_ENV = "SERVEFLEET_HEALTHCHECKS"
SIGNATURES_FILE = "failure-signatures.yaml"

#: A Python exception line as the traceback printer writes it: ``ValueError: msg``,
#: ``torch.OutOfMemoryError: ...``, a bare ``AssertionError``.
EXCEPTION_LINE = re.compile(
    r"([A-Za-z_][A-Za-z0-9_]*\.)*((?:[A-Z][A-Za-z0-9_]*)?(?:Error|Exception|Interrupt|Exit))"
    r"(: .*|:)?$"
)

Test = Callable[[str], bool]

_KEYS = ("class", "why", "any", "all", "regex")


class SignatureEntry(BaseModel):
    """One entry of the signatures file: a class and the conditions a line must meet."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    failure_class: FailureClass = Field(alias="class")
    """The class a matching line belongs to (``class`` in the file)."""
    why: str
    """One line: where the strings come from (engine source file, issue, real log)."""
    any_of: tuple[str, ...] | None = Field(default=None, alias="any")
    """Substrings of which at least one must occur (``any`` in the file; case-sensitive)."""
    all_of: tuple[str, ...] | None = Field(default=None, alias="all")
    """Substrings that must all occur (``all`` in the file; case-sensitive)."""
    regex: str | None = None
    """A Python regular expression searched in the line; ``(?i)`` ignores case."""

    @field_validator("why")
    @classmethod
    def _one_line(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must say where the strings come from")
        if "\n" in value:
            raise ValueError("must be one line")
        return value

    @field_validator("any_of", "all_of")
    @classmethod
    def _substrings(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        # An empty list would match nothing (any) or everything (all); an empty string
        # occurs in every line.
        if value is not None and not value:
            raise ValueError("must list at least one substring")
        if value is not None and not all(value):
            raise ValueError("an empty substring would match every line")
        return value

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value:
            raise ValueError("an empty regex would match every line")
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a valid regular expression: {error}") from None
        return value

    @model_validator(mode="after")
    def _has_condition(self) -> SignatureEntry:
        if self.any_of is None and self.all_of is None and self.regex is None:
            raise ValueError("needs at least one of any, all, regex")
        return self


def _any(needles: tuple[str, ...]) -> Test:
    return lambda text: any(needle in text for needle in needles)


def _all(needles: tuple[str, ...]) -> Test:
    return lambda text: all(needle in text for needle in needles)


def _regex(pattern: str) -> Test:
    compiled = re.compile(pattern)
    return lambda text: compiled.search(text) is not None


def _both(first: Test, second: Test) -> Test:
    return lambda text: first(text) and second(text)


def _either(tests: tuple[Test, ...]) -> Test:
    return lambda text: any(test(text) for test in tests)


def _entry_test(entry: SignatureEntry) -> Test:
    """The entry's conditions, all of which must hold (literals first: they are cheap)."""
    tests = [_any(entry.any_of)] if entry.any_of is not None else []
    if entry.all_of is not None:
        tests.append(_all(entry.all_of))
    if entry.regex is not None:
        tests.append(_regex(entry.regex))
    test = tests[0]
    for more in tests[1:]:
        test = _both(test, more)
    return test


def _class_test(group: list[SignatureEntry]) -> Test:
    """One test for consecutive entries of one class: which of them matched does not
    change the answer, so their ``any`` lists are searched together."""
    needles = tuple(n for e in group if e.all_of is None and e.regex is None
                    for n in e.any_of or ())
    tests = [_any(needles)] if needles else []
    tests.extend(_entry_test(e) for e in group if e.all_of is not None or e.regex is not None)
    return tests[0] if len(tests) == 1 else _either(tuple(tests))


def _literals(entry: SignatureEntry) -> tuple[str, ...]:
    """Literals one of which every line the entry matches contains."""
    if entry.any_of is not None:
        return entry.any_of
    if entry.all_of is not None:
        return entry.all_of[:1]  # all must occur, so the first one alone will do
    return ()


@dataclass(frozen=True)
class SignatureTable:
    """The signatures compiled into tests, with the fast pre-scan in front of them."""

    signatures: tuple[tuple[FailureClass, Test], ...]
    """(class, test) in priority order, one per run of consecutive entries of one class;
    the first test that matches names the class."""
    needles: tuple[str, ...]
    """The pre-scan's literals: every match of an entry with ``any``/``all`` has one."""
    prescan: Test
    """False only for a line no entry can match: one search over :attr:`needles`, plus
    the regexes of entries that have no literal."""

    @classmethod
    def build(cls, entries: tuple[SignatureEntry, ...]) -> SignatureTable:
        """Compile validated entries, keeping their order."""
        groups: list[list[SignatureEntry]] = []
        for entry in entries:
            if groups and groups[-1][0].failure_class is entry.failure_class:
                groups[-1].append(entry)
            else:
                groups.append([entry])
        signatures = tuple((group[0].failure_class, _class_test(group)) for group in groups)
        needles = tuple(n for entry in entries for n in _literals(entry))
        # Longest first, so that the alternation reports the most specific literal.
        ordered = sorted(set(needles), key=len, reverse=True)
        scans = [_regex("|".join(re.escape(n) for n in ordered))] if ordered else []
        scans.extend(_regex(e.regex) for e in entries if e.regex is not None and not _literals(e))
        prescan = scans[0] if len(scans) == 1 else _either(tuple(scans))  # () -> never
        return cls(signatures, needles, prescan)

    def match(self, text: str) -> FailureClass | None:
        """The class of the first entry ``text`` matches, or None."""
        # Most error lines (request errors while serving) match no signature: one search
        # over all literals answers that before the ordered checks run.
        if not self.prescan(text):
            return None
        for cls, test in self.signatures:
            if test(text):
                return cls
        return None


def healthchecks_dir() -> Path:
    """``$SERVEFLEET_HEALTHCHECKS``, or ``healthchecks/`` of the checkout the package is
    installed (editable) from, or the copy inside an installed wheel."""
    override = os.environ.get(HEALTHCHECKS_ENV)
    if override:
        return Path(override)
    return shipped_dir("healthchecks")


def _entry_problems(error: ValidationError, where: str) -> list[str]:
    problems = []
    for item in error.errors(include_url=False):
        # Locations use the file's names (the aliases): ("any", 2) -> "any[2]".
        key = "".join(f"[{part}]" if isinstance(part, int) else str(part)
                      for part in item["loc"])
        if item["type"] == "extra_forbidden":
            message = f"unknown key {key!r} (allowed: {', '.join(_KEYS)})"
        elif item["type"] == "enum":
            known = ", ".join(c.value for c in FailureClass)
            message = f"class: unknown failure class {item['input']!r} (known: {known})"
        elif item["type"] == "missing":
            message = f"{key}: required key is missing"
        else:
            text = str(item["msg"]).removeprefix("Value error, ")
            message = f"{key}: {text}" if key else text
        problems.append(f"{where}: {message}")
    return problems


def load_entries(path: Path) -> tuple[SignatureEntry, ...]:
    """Read and validate a signatures file; :class:`ConfigError` names the file and the
    entry (numbered from 0) of every problem."""
    source = str(path)
    if not path.is_file():
        raise ConfigError(
            f"{source}: failure signatures not found; the boot-log parser reads them from "
            f"the repository's healthchecks/ folder, or from the folder ${HEALTHCHECKS_ENV} "
            "names")
    data: Any = read_yaml(path)  # a yaml.SafeLoader that also refuses duplicate keys
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{source}: expected a non-empty list of signatures at the top level")
    entries: list[SignatureEntry] = []
    problems: list[str] = []
    for index, raw in enumerate(data):
        where = f"{source}: entry {index}"
        if not isinstance(raw, dict):
            problems.append(f"{where}: expected a mapping with keys {', '.join(_KEYS)}")
            continue
        try:
            entries.append(SignatureEntry.model_validate(raw))
        except ValidationError as error:
            problems.extend(_entry_problems(error, where))
    if problems:
        raise ConfigError(problems)
    return tuple(entries)


def load_signatures(path: Path) -> SignatureTable:
    """The compiled table of a signatures file (not cached: see :func:`signature_table`)."""
    return SignatureTable.build(load_entries(path))


@cache
def signature_table() -> SignatureTable:
    """The table of ``<healthchecks>/failure-signatures.yaml``, read once per process."""
    return load_signatures(healthchecks_dir() / SIGNATURES_FILE)


#: Classes whose exception, raised while booting, ends the boot by itself.
BOOT_FATAL: frozenset[FailureClass] = frozenset({
    F.TURBOQUANT_CONTINUATION_PREFILL_ASSERTION, F.MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
    F.KV_CACHE_OOM, F.MODEL_DOWNLOAD_OR_AUTH, F.UNSUPPORTED_QUANTIZATION_OR_DTYPE,
    F.ATTENTION_BACKEND_UNSUPPORTED, F.ENGINE_CORE_DIED,
})

#: Classes whose exception, raised once the engine serves, means the engine is dead.
RUNTIME_FATAL: frozenset[FailureClass] = frozenset({
    F.TURBOQUANT_CONTINUATION_PREFILL_ASSERTION, F.ENGINE_CORE_DIED,
})


def classify(text: str, *, kv_alloc: bool = False, capturing: bool = False) -> FailureClass:
    """The failure class of an error line.

    ``kv_alloc``: the error was raised inside KV-cache allocation (a traceback frame named
    it); ``capturing``: CUDA graphs were being captured when it happened. This context is
    what the signatures file cannot express, so it is applied here.
    """
    cls = signature_table().match(text)
    if cls is None:
        return F.CUDAGRAPH_CAPTURE_FAILED if capturing else F.OTHER
    if cls is F.CUDA_OOM and kv_alloc:
        return F.KV_CACHE_OOM
    if capturing and cls in (F.CUDA_OOM, F.GPU_RUNTIME_ERROR):
        return F.CUDAGRAPH_CAPTURE_FAILED
    return cls


@dataclass
class _Traceback:
    start_line: int = -10
    kv_alloc: bool = False
    capturing: bool = False


class TracebackTracker:
    """Where each process's current Python traceback started and what its frames named.

    Tracebacks of several processes interleave in one log, so context is kept per process
    tag. A traceback whose first frame is ``<module>`` (script top level) or multiprocessing's
    ``_bootstrap`` is an uncaught exception: that process is exiting.
    """

    # <module>: a script or console script; _run_module_as_main: ``python -m`` (how a
    # launcher runs vLLM's CLI on another Python); _bootstrap: a multiprocessing child.
    TOP_FRAMES = ("<module>", "_run_module_as_main", "_bootstrap")
    FRAME = re.compile(r'File "[^"]*", line [0-9]+, in ([A-Za-z0-9_<>.]+)')

    def __init__(self) -> None:
        self._by_process: dict[str, _Traceback] = {}

    def start(self, process: str, lineno: int) -> None:
        """A ``Traceback (most recent call last):`` line."""
        if len(self._by_process) > 64:
            self._by_process.clear()
        self._by_process[process] = _Traceback(start_line=lineno)

    def frame(self, process: str, lineno: int, msg: str) -> bool:
        """A ``File "...", line N, in func`` line; True when it is a top-level first frame."""
        match = self.FRAME.search(msg)
        if match is None:
            return False
        func = match.group(1)
        tb = self._by_process.setdefault(process, _Traceback())
        if "kv_cache" in func:
            tb.kv_alloc = True
        if "captur" in func:
            tb.capturing = True
        return lineno == tb.start_line + 1 and func in self.TOP_FRAMES

    def started(self, process: str) -> int | None:
        """The line of the process's current ``Traceback`` header, if any."""
        tb = self._by_process.get(process)
        return None if tb is None or tb.start_line < 0 else tb.start_line

    def context(self, process: str) -> tuple[bool, bool]:
        """(kv_alloc, capturing) of the process's current traceback."""
        tb = self._by_process.get(process)
        return (False, False) if tb is None else (tb.kv_alloc, tb.capturing)

"""Rules shared by the Python engines (vLLM, SGLang): exception lines and tracebacks.

An exception line counts only when it was printed raw (Python's own traceback printer) or
at ERROR/CRITICAL level: a traceback logged as a WARNING is a survivable import problem,
not a crash. During boot, an exception of a boot-failure class ends the boot; once the
engine serves, only engine-death classes do (a bad request also logs an exception).
"""

from __future__ import annotations

import re

from servefleet.core.bootlog.failures import BOOT_FATAL, EXCEPTION_LINE, RUNTIME_FATAL, classify
from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.rules import (
    ALWAYS,
    BOOT,
    DYING,
    INSPECT,
    SERVING,
    EngineState,
    Rule,
    excerpt,
)

QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING"})


def exception_line(state: EngineState, line: LogLine, _rx: tuple[re.Pattern[str], ...]) -> bool:
    """A Python exception line: remember it as a possible cause; fatal classes end the
    boot (or, while serving, the server)."""
    if line.level in QUIET_LEVELS:
        return True
    match = EXCEPTION_LINE.match(line.msg)
    if match is None:
        return True
    if match.group(2) == "KeyboardInterrupt":
        # Ctrl-C, or vLLM's SIGTERM handler (``raise KeyboardInterrupt("terminated")``).
        state.mark_stopped(excerpt(line), state.tracebacks.started(line.process))
        return True
    kv_alloc, capturing = state.tracebacks.context(line.process)
    cls = classify(line.msg, kv_alloc=kv_alloc, capturing=capturing or state.capturing)
    proof = excerpt(line)
    state.note_cause(cls, line.msg, proof)
    if cls in (BOOT_FATAL if state.ready is None else RUNTIME_FATAL):
        state.mark_fatal(proof)
    return True


def _validation_detail(state: EngineState, line: LogLine,
                       rx: tuple[re.Pattern[str], ...]) -> bool:
    """The reason of a pydantic ``ValidationError``, printed on the lines after its
    exception line (``  Value error, User-specified max_model_len (131072) is greater
    than the derived max_model_len ...``): it replaces the bare exception line as the
    candidate cause, classified on its own text."""
    match = rx[0].search(line.msg)
    if match is None or not state.causes:
        return True
    last = state.causes[-1]
    if "validation error for" not in last.reason:
        return True
    detail = match.group(1)
    state.causes.pop()
    state.note_cause(classify(detail), f"{last.reason}: {detail}", excerpt(line))
    return True


def _traceback(state: EngineState, line: LogLine, _rx: tuple[re.Pattern[str], ...]) -> bool:
    state.tracebacks.start(line.process, line.lineno)
    if state.phase == SERVING and line.level not in QUIET_LEVELS:
        state.window = True
    return True


def _frame(state: EngineState, line: LogLine, _rx: tuple[re.Pattern[str], ...]) -> bool:
    top = state.tracebacks.frame(line.process, line.lineno, line.msg)
    if top and line.level not in QUIET_LEVELS:
        # An uncaught exception reached the script's top level or a multiprocessing
        # child's entry point: that process is exiting.
        state.mark_fatal(excerpt(line))
    return True


#: ERE/Python pattern of an exception line, for the benchmark's grep.
_EXC = "[A-Za-z_][A-Za-z0-9_.]*(Error|Exception|Interrupt)(: |$)"

_ERRORS = BOOT | DYING | INSPECT

# While serving, request errors are logged with tracebacks all the time; searching every
# line for "Error" would cost a slow pass. Instead the scanner reads the first frame after
# each traceback header (a top-level frame means the process is exiting), engines add
# anchors for their runtime-fatal exceptions, and a fatal marker switches to DYING, where
# every error line is read again.
PYTHON_ERROR_RULES: tuple[Rule, ...] = (
    Rule("Error", (_EXC,), exception_line, _ERRORS),
    Rule("Exception", (_EXC,), exception_line, _ERRORS),
    Rule("KeyboardInterrupt", ("KeyboardInterrupt",), exception_line, _ERRORS),
    Rule("Value error, ", ("Value error, (.+)",), _validation_detail, BOOT | DYING),
    Rule("Traceback (most recent call last)", (r"Traceback \(most recent call last\)",),
         _traceback, ALWAYS | INSPECT),
    Rule('File "', ('File "[^"]*", line [0-9]+, in ',), _frame, _ERRORS),
)


def cli_error(state: EngineState, line: LogLine, rx: tuple[re.Pattern[str], ...]) -> bool:
    """argparse refused the command line (``vllm serve: error: unrecognized arguments: …``,
    ``launch_server.py: error: argument --x: invalid choice: …``; exit status 2): the
    engine never started, the boot failed."""
    if rx[0].match(line.text) is None:
        return True
    proof = excerpt(line)
    state.note_cause(classify(line.text), line.text, proof)
    state.mark_fatal(proof)
    return True


#: argparse's ``PROG: error: MESSAGE``: vLLM's own program names with any message, any
#: ``*.py``, and any other program name (a wrapper script, ``main.py serve`` under
#: ``python -m``) when the message is one argparse itself writes.
_ARGPARSE_ERROR = (
    "^((vllm( [a-z-]+)?|[A-Za-z0-9_.-]+[.]py): error: "
    "|[A-Za-z0-9_./-]+( [a-z][a-z0-9_-]*)?: error: (unrecognized arguments: |argument "
    "|the following arguments are required: |invalid choice: |ambiguous option: ))")

_HTTP_2XX = '"(GET|POST|PUT|PATCH|DELETE|HEAD) [^ "]+ HTTP/[0-9.]+" 2[0-9][0-9]'


def served(state: EngineState, line: LogLine, rx: tuple[re.Pattern[str], ...]) -> bool:
    """An access-log line with a 2xx status: the server answered a request, so it is up
    even where its own ready line is missing from the log."""
    if state.ready is None and rx[0].search(line.msg) is not None:
        state.mark_ready(excerpt(line))
    return True


#: Rules every Python engine (vLLM, SGLang) shares beyond the exception rules: argparse's
#: refusal of the command line, and uvicorn's access log proving the server answers.
PYTHON_SERVER_RULES: tuple[Rule, ...] = (
    Rule(": error: ", (_ARGPARSE_ERROR,), cli_error, BOOT),
    Rule('" 2', (_HTTP_2XX,), served, BOOT),
)

"""The vLLM rules' lifecycle handlers: ready, failed, stopped.

Like every handler they return True once the line is handled.
"""

from __future__ import annotations

from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.rules import excerpt
from servefleet.core.bootlog.vllm.state import Rx, VllmState


def ready(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    """The HTTP server is up: the engine is ready."""
    st.mark_ready(excerpt(line))
    return True


def supported_tasks(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    """Offline ``LLM()`` runs have no HTTP server: the engine is ready once built. A
    server prints the same line before uvicorn starts listening."""
    offline = line.source == "llm.py" or (
        line.source is None and not st.server and not line.process.startswith("APIServer")
    )
    if offline and "init_engine_seconds" in st.values:
        st.mark_ready(excerpt(line), offline=True)
    return True


def server(st: VllmState, _line: LogLine, _rx: Rx) -> bool:
    """An API server is starting: the log is not an offline ``LLM()`` run."""
    st.server = True
    return True


def fatal(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    """A worker process failed: the engine dies."""
    st.mark_fatal(excerpt(line))
    return True


def engine_core(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """An engine-core failure message (failed to start, fatal error, exception)."""
    if rx[0].search(line.raw) is not None:
        st.mark_fatal(excerpt(line))
    return True


def died(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    # An offline LLM() script prints this at interpreter exit after finishing its work.
    """``died unexpectedly``: fatal unless an offline run already finished."""
    if st.ready is None or not st.offline:
        st.mark_fatal(excerpt(line))
    return True


def shutdown(st: VllmState, _line: LogLine, _rx: Rx) -> bool:
    """A shutdown after the engine was ready."""
    if st.ready is not None:
        st.mark_shutdown()
    return True


def signal(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    """SIGTERM: the engine was stopped."""
    st.mark_stopped(excerpt(line))
    return True

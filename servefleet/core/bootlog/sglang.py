"""SGLang boot-log rules (0.5.x).

SGLang states its capacity twice: ``KV Cache is allocated. #tokens: N`` once per memory
pool (hybrid SWA models and drafters have several; 0.5.16 adds ``dtype:``), and the final
``max_total_num_tokens=N, ..., max_running_requests=M, context_len=L`` line, which is the
number the scheduler uses. Its health endpoint answers 503 until ``The server is fired up
and ready to roll!``, so that line, not uvicorn's startup, is readiness.
"""

from __future__ import annotations

import re
from typing import Any

from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.model import SglangExtra
from servefleet.core.bootlog.python_errors import PYTHON_ERROR_RULES, PYTHON_SERVER_RULES
from servefleet.core.bootlog.rules import ALWAYS, BOOT, EngineState, Rule, excerpt

Rx = tuple[re.Pattern[str], ...]


class SglangState(EngineState):
    """What an SGLang log has shown so far."""

    def __init__(self) -> None:
        super().__init__()
        self.pools: list[int] = []
        self.first_rank: str | None = None
        self.loads = 0
        self.spec_true = False
        self.spec_false = False
        self.graph_disabled = False
        self.sigterm = False

    def same_rank(self, line: LogLine) -> bool:
        """Lines of the first rank seen; other TP ranks repeat the same pools."""
        if self.first_rank is None:
            self.first_rank = line.process
        return line.process == self.first_rank

    def contract(self) -> dict[str, Any]:
        values = dict(self.values)
        values["spec_decode"] = True if self.spec_true else (False if self.spec_false else None)
        return values

    def build_extra(self) -> SglangExtra:
        get = self.get
        captured = get("cuda_graph_captured")
        if captured is None and (self.graph_disabled or self.capturing):
            captured = False  # disabled, or a capture began and never finished
        spec = self.spec_true
        return SglangExtra(
            kv_cache_allocated_tokens=tuple(self.pools) if self.pools else None,
            kv_cache_dtype=get("kv_cache_dtype"),
            context_len=get("context_len"),
            max_running_requests=get("max_running_requests"),
            weights_mem_gb=get("weights_mem_gb"),
            cuda_graph_captured=captured,
            cuda_graph_capture_seconds=get("cuda_graph_capture_seconds"),
            spec_decode_algorithm=get("spec_decode_algorithm") if spec else None,
            draft_architecture=get("draft_architecture") if spec else None,
        )


def _version(st: SglangState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is not None:
        st.first("engine_version", m.group(1), excerpt(line, m.start(), m.end()))
    return True


def _server_args(st: SglangState, line: LogLine, rx: Rx) -> bool:
    msg = line.msg
    backend = rx[0].search(msg)
    if backend is not None:
        st.first("attention_backend", backend.group(1), excerpt(line, backend.start(),
                                                                 backend.end()))
    spec = rx[1].search(msg)
    if spec is not None:
        proof = excerpt(line, spec.start(), spec.end())
        if spec.group(1) == "None":
            st.spec_false = True
            st.first("spec_decode", False, proof)
        else:
            st.spec_true = True
            st.last("spec_decode", True, proof)
            st.first("spec_decode_algorithm", spec.group(1).strip("'"), proof)
    graph = rx[2].search(msg)
    if graph is not None and graph.group(1) == "True":
        st.graph_disabled = True
        st.prove("cuda_graph_captured", excerpt(line, graph.start(), graph.end()))
    return True


def _default_backend(st: SglangState, line: LogLine, rx: Rx) -> bool:
    for pattern in rx:
        m = pattern.search(line.msg)
        if m is not None:
            st.first("attention_backend", m.group(1), excerpt(line, m.start(), m.end()))
            return True
    return True


def _load_end(st: SglangState, line: LogLine, rx: Rx) -> bool:
    # Older SGLang prints no ``elapsed=`` (``Load weight end. type=Qwen2ForCausalLM,
    # dtype=torch.bfloat16, avail mem=8.37 GB``): the architecture is still stated.
    msg = line.msg
    elapsed = rx[0].search(msg)
    arch = rx[1].search(msg)
    if elapsed is None and arch is None:
        return False
    if not st.same_rank(line):
        return True
    st.loads += 1
    proof = excerpt(line)
    mem = rx[2].search(msg)
    if st.loads == 1:
        if elapsed is not None:
            st.first("weights_load_seconds", float(elapsed.group(1)), proof)
        if arch is not None:
            st.first("architecture", arch.group(1), proof)
        if mem is not None:
            st.first("weights_mem_gb", float(mem.group(1)), proof)
    elif arch is not None:
        st.first("draft_architecture", arch.group(1), proof)
    return True


def _pool(st: SglangState, line: LogLine, rx: Rx) -> bool:
    msg = line.msg
    tokens = rx[0].search(msg)
    if tokens is None:
        return False
    if not st.same_rank(line):
        return True
    proof = excerpt(line)
    if len(st.pools) < 16:
        st.pools.append(int(tokens.group(1)))
        st.prove("kv_cache_allocated_tokens", proof)
    dtype = rx[1].search(msg)
    if dtype is not None:
        st.first("kv_cache_dtype", dtype.group(1), proof)
    return True


def _kv_dtype(st: SglangState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.first("kv_cache_dtype", m.group(1), excerpt(line, m.start(), m.end()))
    return True


def _capacity(st: SglangState, line: LogLine, rx: Rx) -> bool:
    msg = line.msg
    total = rx[0].search(msg)
    if total is None:
        return False
    if not st.same_rank(line):
        return True
    proof = excerpt(line)
    st.first("kv_cache_tokens", int(total.group(1)), proof)
    for key, pattern in (("max_running_requests", rx[1]), ("context_len", rx[2])):
        m = pattern.search(msg)
        if m is not None:
            st.first(key, int(m.group(1)), proof)
    return True


def _graph_begin(st: SglangState, _line: LogLine, _rx: Rx) -> bool:
    st.capturing = True
    return True


def _graph_end(st: SglangState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.capturing = False
    proof = excerpt(line, m.start(), m.end())
    st.first("cuda_graph_captured", True, proof)
    st.first("cuda_graph_capture_seconds", float(m.group(2)), proof)
    return True


def _draft_runner(st: SglangState, line: LogLine, _rx: Rx) -> bool:
    st.spec_true = True
    st.prove("spec_decode", excerpt(line))
    return True


def _ready(st: SglangState, line: LogLine, _rx: Rx) -> bool:
    st.mark_ready(excerpt(line))
    return True


def _fatal(st: SglangState, line: LogLine, _rx: Rx) -> bool:
    st.mark_fatal(excerpt(line))
    return True


def _sigquit(st: SglangState, line: LogLine, _rx: Rx) -> bool:
    # After a SIGTERM the parent tears its children down and reports SIGQUIT as well.
    if not st.sigterm:
        st.mark_fatal(excerpt(line))
    return True


def _died_silently(st: SglangState, line: LogLine, _rx: Rx) -> bool:
    """multiprocessing's resource tracker complains at interpreter exit: before
    readiness that means the server process tree is gone."""
    if st.ready is None and not st.sigterm:
        st.mark_fatal(excerpt(line))
    return True


def _sigterm(st: SglangState, line: LogLine, _rx: Rx) -> bool:
    st.sigterm = True
    st.mark_stopped(excerpt(line))
    return True


def _architectures(st: SglangState, line: LogLine, rx: Rx) -> bool:
    """``hf_config.architectures=['Qwen3ForCausalLM']`` and config dumps naming the model's
    architectures: the first named is the model's."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.first("architecture", m.group(1), excerpt(line, m.start(1), m.end(1)))
    return True


def _shutdown(st: SglangState, _line: LogLine, _rx: Rx) -> bool:
    if st.ready is not None:
        st.mark_shutdown()
    return True


RULES: tuple[Rule, ...] = (
    Rule("SGLang Version ", ("SGLang Version ([0-9][A-Za-z0-9.+_-]*)",), _version),
    Rule("server_args=ServerArgs(",
         ("[(, ]attention_backend='([A-Za-z0-9_]+)'",
          "speculative_algorithm=('[A-Za-z0-9_]+'|None)",
          "disable_cuda_graph=(True|False)"), _server_args),
    Rule("Attention backend not specified",
         ("Use ([A-Za-z0-9_]+) backend by default",), _default_backend),
    Rule("as default attention backend",
         ("Use ([A-Za-z0-9_]+) as default attention backend",), _default_backend),
    Rule("Load weight end.",
         ("elapsed=([0-9.]+) s", "type=([A-Za-z0-9_]+)", "mem usage=([0-9.]+) GB"),
         _load_end),
    Rule("architectures=[", ("architectures=\\[['\"]([A-Za-z0-9_]+)['\"]",), _architectures),
    Rule("KV Cache is allocated.", ("#tokens: ([0-9]+)", "dtype: ([A-Za-z0-9_.]+),"), _pool),
    Rule("Using KV cache dtype: ", ("Using KV cache dtype: ([A-Za-z0-9_.]+)",), _kv_dtype),
    Rule("max_total_num_tokens=",
         ("max_total_num_tokens=([0-9]+)", "max_running_requests=([0-9]+)",
          "context_len=([0-9]+)"), _capacity),
    Rule("raph begin", ("[Cc]apture .*[Gg]raph begin",), _graph_begin),
    Rule("raph end.",
         ("[Gg]raph end\\. (Time elapsed: |elapsed=)([0-9.]+) ?s",), _graph_end),
    Rule("draft runner", ("[A-Z0-9_]+ draft runner",), _draft_runner),
    Rule("The server is fired up", ("The server is fired up",), _ready),
    Rule("hit an exception", ("hit an exception",), _fatal, ALWAYS),
    Rule("scheduler is dead", ("scheduler is dead",), _fatal, ALWAYS),
    Rule("Received sigquit", ("Received sigquit",), _sigquit, ALWAYS),
    Rule("SIGQUIT received", ("SIGQUIT received",), _sigquit, ALWAYS),
    Rule("resource_tracker: There appear to be", ("resource_tracker: There appear to be",),
         _died_silently, BOOT),
    Rule("SIGTERM received", ("SIGTERM received",), _sigterm, ALWAYS),
    Rule("Shutting down", ("Shutting down",), _shutdown, ALWAYS),
    *PYTHON_SERVER_RULES,
    *PYTHON_ERROR_RULES,
)

"""llama.cpp ``llama-server`` boot-log rules (classic ``func: message`` lines and the 2026
timestamped format ``0.02.254.428 I srv  llama_server: ...``).

KV cache: each cache prints per-device ``KV buffer size`` lines *and* one ``size = X MiB``
total (``src/llama-kv-cache.cpp``: ``"%s: size = %7.2f MiB (%6u cells, ..."``); iSWA models
have two caches. ``kv_cache_mib`` is the sum of the ``size =`` lines only. Recurrent state
(``llama_memory_recurrent``) is separate memory, reported on its own.

Old servers print ``HTTP server is listening, hostname: ...`` *before* loading the model;
only ``server is listening on http://...`` (after ``model loaded``) means ready.

A failed load prints a burst of lines; ``failure_reason`` is composed from the main error,
the first detail line before it and the exit line, for example ``error loading model:
llama_model_loader: failed to load model (gguf_init_from_file_impl: failed to read magic);
main: exiting due to model loading error``.
"""

from __future__ import annotations

import re
from typing import Any

from servefleet.core.bootlog.failures import classify
from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.model import Evidence, FailureClass, LlamaCppExtra
from servefleet.core.bootlog.rules import ALWAYS, BOOT, DYING, EngineState, Rule, excerpt

Rx = tuple[re.Pattern[str], ...]

_TRUE = frozenset({"1", "on", "true", "enabled", "yes"})
_FALSE = frozenset({"0", "off", "false", "disabled", "no"})
# Main error phrases, most telling first; the reason starts at the phrase.
_PRIMARY = (
    "error loading model", "failed to initialize the context", "GGML_ASSERT", "CUDA error",
    "ROCm error", "HIP error", "Vulkan error", "terminate called", "Segmentation fault",
)
_PATH_TAIL = re.compile(r" from [^ ]*[/\\][^ ]*$")


class LlamaCppState(EngineState):
    """What a llama-server log has shown so far."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[float] = []
        self.parallel: dict[str, int] = {}
        self.fa_setting: str | None = None
        self.fa_resolved: str | None = None
        self.loading = False
        self.primary: tuple[int, str, Evidence] | None = None
        self.detail: tuple[str, Evidence] | None = None
        self.terminal: tuple[str, Evidence] | None = None

    def contract(self) -> dict[str, Any]:
        values = dict(self.values)
        values["engine_version"] = self.get("build")
        values["kv_cache_mib"] = round(sum(self.parts), 2) if self.parts else None
        for source in ("n_slots", "n_parallel", "n_seq_max"):
            if source in self.parallel:
                values["n_parallel"] = self.parallel[source]
                break
        state = self.fa_resolved or self.fa_setting
        values["flash_attn"] = (
            True if state in _TRUE else False if state in _FALSE else None
        )
        return values

    def build_extra(self) -> LlamaCppExtra:
        setting = self.fa_setting
        if setting == "auto" and self.fa_resolved is not None:
            setting = f"auto -> {self.fa_resolved}"
        elif setting is None and self.fa_resolved is not None:
            setting = self.fa_resolved
        return LlamaCppExtra(
            build=self.get("build"),
            kv_cache_mib_parts=tuple(self.parts) if self.parts else None,
            n_ctx_seq=self.get("n_ctx_seq"),
            flash_attn_setting=setting,
            recurrent_state_mib=self.get("recurrent_state_mib"),
            model_loaded=bool(self.get("model_loaded", False)),
        )

    def failure(self) -> tuple[FailureClass, str, list[Evidence]] | None:
        if self.fatal is None:
            return None
        parts: list[str] = []
        proofs: list[Evidence] = []
        if self.primary is not None:
            parts.append(self.primary[1])
            proofs.append(self.primary[2])
        if self.detail is not None:
            if parts:
                parts[0] += f" ({self.detail[0]})"
            else:
                parts.append(self.detail[0])
            proofs.append(self.detail[1])
        if self.terminal is not None:
            parts.append(self.terminal[0])
            proofs.append(self.terminal[1])
        if not parts:
            parts.append(self.fatal.text)
            proofs.append(self.fatal)
        reason = "; ".join(parts)
        text = " ".join([self.primary[1] if self.primary else "",
                         self.detail[0] if self.detail else ""])
        cls = classify(text or reason)
        if cls is FailureClass.OTHER and self.primary is None and self.detail is None:
            cls = FailureClass.ENGINE_CORE_DIED
        return cls, reason, proofs


def _first(key: str, convert: Any = int) -> Any:
    def handler(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
        for pattern in rx:
            m = pattern.search(line.msg)
            if m is not None:
                st.first(key, convert(m.group(1)), excerpt(line, m.start(), m.end()))
                return True
        return False
    return handler


def _build(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    for pattern in rx:
        m = pattern.search(line.msg)
        if m is not None:
            st.first("build", m.group(1), excerpt(line, m.start(), m.end()))
            return True
    return True


def _balanced(text: str, start: int) -> str | None:
    """The text inside the parenthesis opening at ``text[start]`` (names such as
    ``AMD Radeon 780M (RADV GFX1103_R1)`` contain parentheses themselves)."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:index]
    return None


def _using_device(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    name = _balanced(line.msg, m.end() - 1)
    if name:
        st.first("device_name", name.strip(), excerpt(line, m.start(), m.end()))
    return True


def _device(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    for pattern in rx:
        m = pattern.search(line.msg)
        if m is not None:
            name = m.group(m.lastindex or 1).strip()
            # ``- CPU : AMD EPYC (…MiB free)`` names the host CPU backend, not a GPU.
            if not name.startswith("CPU") and not m.group(1).startswith("CPU"):
                st.first("device_name", name, excerpt(line, m.start(), m.end()))
            return True
    return True


def _n_ctx(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    msg = line.msg
    total = rx[0].search(msg)
    if total is not None:
        st.first("n_ctx", int(total.group(2)), excerpt(line, total.start(), total.end()))
        return True
    for pattern in rx[1:]:
        m = pattern.search(msg)
        if m is not None:
            st.first("n_ctx_seq", int(m.group(m.lastindex or 1)), excerpt(line, m.start(),
                                                                           m.end()))
            return True
    return True


def _parallel(source: str) -> Any:
    def handler(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
        m = rx[0].search(line.msg)
        if m is None:
            return False
        if source not in st.parallel:
            st.parallel[source] = int(m.group(1))
            st.prove("n_parallel", excerpt(line, m.start(), m.end()))
        return True
    return handler


def _kv_size(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    for pattern in rx:
        m = pattern.search(line.msg)
        if m is not None:
            if len(st.parts) < 16:
                st.parts.append(float(m.group(1)))
                st.prove("kv_cache_mib", excerpt(line, m.start(), m.end()))
            return True
    return True


def _flash_setting(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    if st.fa_setting is None:
        st.fa_setting = m.group(1)
        st.prove("flash_attn", excerpt(line, m.start(), m.end()))
    return True


def _flash_resolved(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    for pattern in rx:
        m = pattern.search(line.msg)
        if m is not None:
            if st.fa_resolved is None:
                st.fa_resolved = m.group(m.lastindex or 1)
                st.prove("flash_attn", excerpt(line, m.start(), m.end()))
            return True
    return True


def _loading(st: LlamaCppState, _line: LogLine, _rx: Rx) -> bool:
    st.loading = True
    return True


def _model_loaded(st: LlamaCppState, line: LogLine, _rx: Rx) -> bool:
    st.first("model_loaded", True, excerpt(line))
    return True


def _ready(st: LlamaCppState, line: LogLine, _rx: Rx) -> bool:
    st.mark_ready(excerpt(line))
    return True


def _listening(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    # 2026 servers start HTTP before loading and print this only after ``model loaded``;
    # without that line it is not readiness (a router, or a log cut in the middle).
    if rx[0].search(line.msg) is None:
        return False
    if st.get("model_loaded", False):
        st.mark_ready(excerpt(line))
    return True


def _spec_off(st: LlamaCppState, line: LogLine, _rx: Rx) -> bool:
    st.first("spec_decode", False, excerpt(line))
    return True


def _error_line(st: LlamaCppState, line: LogLine, _rx: Rx) -> bool:
    """Main error, detail or exit line of a failure burst."""
    msg = line.msg.strip()
    if st.shutdown or (st.ready is not None and not any(p in msg for p in _PRIMARY[2:])):
        return True
    if "exiting due to" in msg:
        if st.terminal is None:
            st.terminal = (msg, excerpt(line))
        st.mark_fatal(excerpt(line))
        return True
    for rank, phrase in enumerate(_PRIMARY):
        at = msg.find(phrase)
        if at >= 0:
            if st.primary is None or (rank < st.primary[0] and st.ready is None):
                st.primary = (rank, _PATH_TAIL.sub("", msg[at:]), excerpt(line))
            st.mark_fatal(excerpt(line))
            return True
    if msg.startswith("error: "):
        if st.primary is None:
            st.primary = (len(_PRIMARY), msg, excerpt(line))
        st.mark_fatal(excerpt(line))
        return True
    if (st.loading and st.primary is None and st.detail is None and st.ready is None
            and "failed to load model" not in msg):
        st.detail = (msg, excerpt(line))
    return True


def _cleanup(st: LlamaCppState, line: LogLine, _rx: Rx) -> bool:
    # Printed on every exit; after readiness it means an operator stopped the server.
    if st.ready is not None:
        st.mark_stopped(excerpt(line))
    return True


def _interrupted(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    """An operator's Ctrl-C: the terminal's ``^C`` echo, or llama-server's own
    ``Received second interrupt, terminating immediately.``"""
    if rx[0].search(line.text) is not None:
        st.mark_stopped(excerpt(line))
    return True


def _served(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    """``log_server_r: request: POST /v1/chat/completions 127.0.0.1 200``: the server
    answered, so it is up even where its listening line is not in the log."""
    if st.ready is None and rx[0].search(line.msg) is not None:
        st.mark_ready(excerpt(line))
    return True


def _architecture(st: LlamaCppState, line: LogLine, rx: Rx) -> bool:
    """The GGUF's ``general.architecture`` (loader dump) or ``print_info: arch``."""
    for pattern in rx:
        m = pattern.search(line.msg)
        if m is not None:
            st.first("architecture", m.group(1), excerpt(line, m.start(1), m.end(1)))
            return True
    return False


_FLOAT = "([0-9]+[.][0-9]+)"

RULES: tuple[Rule, ...] = (
    Rule("build_info: ", ("build_info: ([A-Za-z0-9._-]+)",), _build),
    Rule("build: ", ("^build: ([0-9]+ \\([0-9a-f]+\\))",), _build),
    Rule("common_params_print_info: build ",
         ("common_params_print_info: build ([0-9]+ \\([^)]+\\))",), _build),
    Rule("using device ", ("using device [A-Za-z0-9_]+ \\(",), _using_device),
    Rule("Device ", ("Device [0-9]+: ([^,]+), ",), _device),
    Rule("MiB free)", ("- ([A-Za-z0-9_]+) +: (.+) \\([0-9]+ MiB, [0-9]+ MiB free\\)",),
         _device),
    Rule(" layers to GPU", ("offloaded ([0-9]+/[0-9]+) layers to GPU",),
         _first("gpu_layers_offloaded", str)),
    Rule("n_ctx",
         ("(llama_context|llama_new_context_with_model): n_ctx += ([0-9]+)",
          "n_ctx_seq += ([0-9]+)", "n_ctx_per_seq += ([0-9]+)",
          "n_ctx_(per_)?seq \\(([0-9]+)\\) <", "new slot,? n_ctx(_slot)? = ([0-9]+)",
          "initializing, n_slots = [0-9]+, n_ctx_slot = ([0-9]+)"), _n_ctx),
    Rule("n_slots = ", ("n_slots = ([0-9]+)",), _parallel("n_slots")),
    Rule("n_parallel = ", ("n_parallel = ([0-9]+)",), _parallel("n_parallel")),
    Rule("n_seq_max", ("n_seq_max += ([0-9]+)",), _parallel("n_seq_max")),
    Rule("size = ",
         (f"llama_kv_cache[a-z_]*: +size = +{_FLOAT} MiB", f"KV self size += +{_FLOAT} MiB"),
         _kv_size),
    Rule("llama_memory_recurrent: size = ",
         (f"llama_memory_recurrent: size = +{_FLOAT} MiB",),
         _first("recurrent_state_mib", float)),
    Rule("flash_attn", ("flash_attn += ([A-Za-z0-9]+)",), _flash_setting),
    Rule("lash ", ("Flash Attention was [a-z]+, set to ([a-z]+)",
                   "flash attention is (enabled|disabled)",
                   "resolve_fused_ops: Flash Attention (enabled|disabled)"), _flash_resolved),
    Rule("loading model", ("loading model",), _loading),
    Rule("model loaded", ("model loaded",), _model_loaded),
    Rule("server is listening on ", ("server is listening on ",), _ready),
    Rule("llama_server: listening on ", ("llama_server: listening on [a-z]+://",),
         _listening),
    Rule("speculative decoding not supported", ("speculative decoding not supported",),
         _spec_off),
    Rule("no implementations specified for speculative decoding",
         ("no implementations specified for speculative decoding",), _spec_off),
    Rule("exiting due to", ("exiting due to",), _error_line, BOOT | DYING),
    Rule("error", ("error",), _error_line, BOOT),
    Rule("failed", ("failed",), _error_line, BOOT),
    Rule("out of memory", ("out of memory",), _error_line, BOOT),
    Rule("invalid magic", ("invalid magic",), _error_line, BOOT),
    Rule("GGML_ASSERT", ("GGML_ASSERT",), _error_line, ALWAYS),
    Rule("CUDA error", ("CUDA error",), _error_line, ALWAYS),
    Rule("ROCm error", ("ROCm error",), _error_line, ALWAYS),
    Rule("HSA_STATUS_ERROR", ("HSA_STATUS_ERROR",), _error_line, BOOT | DYING),
    Rule("terminate called", ("terminate called",), _error_line, ALWAYS),
    Rule("Segmentation fault", ("Segmentation fault",), _error_line, ALWAYS),
    Rule("cleaning up before exit", ("cleaning up before exit",), _cleanup, ALWAYS),
    Rule("econd interrupt", ("[Rr]eceived second interrupt",), _interrupted, ALWAYS),
    Rule("^C", ("^\\^C",), _interrupted, ALWAYS),
    Rule("log_server_r: ", ("request: [A-Z]+ [^ ]+ [^ ]+ 2[0-9][0-9]",), _served),
    Rule("general.architecture", ("general[.]architecture +str += ([A-Za-z0-9_]+)",),
         _architecture),
    Rule("print_info: arch ", ("print_info: arch += ([A-Za-z0-9_]+)",), _architecture),
)

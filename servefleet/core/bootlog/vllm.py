"""vLLM boot-log rules: V0 (0.5.x) and V1 from 0.8 to 0.33.

Format history that matters here (reference/serving.md section C, FORMATS.md):

* ``GPU KV cache size: N tokens`` and ``Maximum concurrency for N tokens per request: Xx``
  are two lines up to 0.27, one line from 0.28, and from 0.31 the first word names the
  device (``"%s KV cache size: ..."``). From 0.21 the token figure is
  max_concurrency × max_model_len instead of a block count.
* ``Available KV cache memory`` is ``%.2f`` up to 0.13 and ``format_gib`` (``19.7``) later.
* ``Model loading took X GiB and Y seconds`` / ``... GiB memory and ...``; V0 prints
  ``Loading model weights took X GB`` and ``# GPU blocks: N, # CPU blocks: M``.
* ``init engine (...) took X seconds`` up to 0.19; ``took X s (compilation: Y s — ...)``
  (with an em dash) from 0.20.
* CUDA-graph mode: an int enum in the 0.10/0.11 config dump, ``<CUDAGraphMode.NAME: ...>``
  later; explicit downgrades (``setting cudagraph_mode=PIECEWISE``) override the config.
"""

from __future__ import annotations

import re
from typing import Any

from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.model import SpecDecodeMetrics, VllmExtra
from servefleet.core.bootlog.python_errors import (
    PYTHON_ERROR_RULES,
    PYTHON_SERVER_RULES,
    exception_line,
)
from servefleet.core.bootlog.rules import (
    ALWAYS,
    BOOT,
    DYING,
    EngineState,
    Rule,
    excerpt,
    number,
)

Rx = tuple[re.Pattern[str], ...]

# 0.10/0.11 dump CUDAGraphMode as its JSON value: ints, tuples as lists.
_MODE_VALUES = {
    "0": "NONE", "1": "PIECEWISE", "2": "FULL",
    "[2,0]": "FULL_DECODE_ONLY", "[2,1]": "FULL_AND_PIECEWISE",
}
# Human backend names of the "Using X backend on V1 engine." era and ROCm, mapped to the
# enum names vLLM uses later.
_BACKEND_NAMES = {
    "flash attention": "FLASH_ATTN", "flashattention": "FLASH_ATTN",
    "flashattention-2": "FLASH_ATTN", "flash_attn": "FLASH_ATTN",
    "triton": "TRITON_ATTN", "triton attention": "TRITON_ATTN",
    "xformers": "XFORMERS", "flashinfer": "FLASHINFER", "flex attention": "FLEX_ATTENTION",
    "flexattention": "FLEX_ATTENTION", "flashmla": "FLASHMLA", "triton mla": "TRITON_MLA",
    "cutlass mla": "CUTLASS_MLA", "sparse mla": "ROCM_SPARSE_MLA",
    "rocm attention": "ROCM_ATTN", "rocmflashattention": "ROCM_ATTN",
    "rocm aiter fa": "ROCM_AITER_FA", "aiter mla": "ROCM_AITER_MLA",
    "rocm aiter mla": "ROCM_AITER_MLA", "pallas": "PALLAS", "torch sdpa": "TORCH_SDPA",
    "tree attention": "TREE_ATTN", "ipex": "IPEX",
}
_BANNER_CHARS = frozenset("█▄▀")
_ENUM_NAME = re.compile("[A-Z][A-Z0-9_]*")


class VllmState(EngineState):
    """What a vLLM log has shown so far."""

    def __init__(self) -> None:
        super().__init__()
        self.version_rank = 0
        self.generation: str | None = None
        self.architectures: list[str] = []
        self.weights_process: str | None = None
        self.drafter_loading: set[str] = set()
        self.mode: str | None = None
        self.mode_source: str | None = None
        self.mode_downgraded = False
        self.backend_forced = False
        self.capture_kinds: set[tuple[str, str]] = set()
        self.spec_true = False
        self.spec_false = False
        self.server = False
        self.spec_lines = 0
        self.spec_first: float | None = None
        self.spec_last: float | None = None
        self.spec_accepted = 0
        self.spec_drafted = 0
        self.spec_positions: tuple[float, ...] = ()

    def set_version(self, version: str, rank: int, line: LogLine, start: int, end: int) -> None:
        """Keep the most authoritative version statement (API server/banner > engine
        init line > container banner)."""
        if rank > self.version_rank:
            self.version_rank = rank
            self.last("engine_version", version, excerpt(line, start, end))

    def set_mode(self, mode: str, source: str, line: LogLine, start: int = 0,
                 end: int = 0) -> None:
        """A CUDA-graph mode statement; once downgraded, configuration dumps (printed by
        processes that never saw the downgrade) no longer override it."""
        if self.mode_downgraded and source != "downgrade":
            return
        self.mode, self.mode_source = mode, source
        self.mode_downgraded = self.mode_downgraded or source == "downgrade"
        self.last("cudagraph_mode", mode, excerpt(line, start, end))

    def final_mode(self) -> tuple[str | None, str | None]:
        """(mode, source): the last statement, else what the capture progress bars imply."""
        if self.mode is None and self.capture_kinds:
            return _mode_from_capture(self.capture_kinds), "capture_progress"
        return self.mode, self.mode_source

    def contract(self) -> dict[str, Any]:
        values = dict(self.values)
        values["cudagraph_mode"] = self.final_mode()[0]
        values["spec_decode"] = self.spec_decode
        return values

    @property
    def spec_decode(self) -> bool | None:
        """True on any sign of a drafter, False when the config says none, else unknown."""
        if self.spec_true:
            return True
        return False if self.spec_false else None

    def build_extra(self) -> VllmExtra:
        get = self.get
        spec = self.spec_decode
        draft = None
        if spec and self.architectures:
            draft = next((a for a in self.architectures[1:] if a != self.architectures[0]), None)
        # V0 never prints the init-engine line; V1 logs without it did not finish init.
        init_completed = None if self.generation == "v0" else "init_engine_seconds" in self.values
        metrics = None
        if self.spec_lines:
            metrics = SpecDecodeMetrics(
                lines=self.spec_lines,
                mean_acceptance_length_first=self.spec_first,
                mean_acceptance_length_last=self.spec_last,
                accepted_tokens=self.spec_accepted,
                drafted_tokens=self.spec_drafted,
                acceptance_rate=(round(self.spec_accepted / self.spec_drafted, 4)
                                 if self.spec_drafted else None),
                per_position_acceptance_last=self.spec_positions,
            )
        method = get("spec_decode_method")
        if method is None and get("mtp_detected"):
            method = "mtp"
        return VllmExtra(
            engine_generation=self.generation,
            available_kv_cache_gib=get("available_kv_cache_gib"),
            gpu_blocks=get("gpu_blocks"),
            cpu_blocks=get("cpu_blocks"),
            kv_cache_device=get("kv_cache_device"),
            kv_cache_tokens_basis=_tokens_basis(get("engine_version"))
            if "kv_cache_tokens" in self.values else None,
            max_model_len=get("max_model_len"),
            graph_capture_seconds=get("graph_capture_seconds"),
            graph_capture_gib=get("graph_capture_gib"),
            init_engine_seconds=get("init_engine_seconds"),
            compilation_seconds=get("compilation_seconds"),
            engine_init_completed=init_completed,
            cudagraph_mode_source=self.final_mode()[1],
            moe_default_config_warning=bool(get("moe_default_config_warning", False)),
            moe_config_device_name=get("moe_config_device_name"),
            async_scheduling=get("async_scheduling"),
            mtp_detected=bool(get("mtp_detected", False)),
            spec_decode_method=method if spec else None,
            draft_architecture=draft,
            drafter_weights_load_seconds=get("drafter_weights_load_seconds") if spec else None,
            mean_acceptance_length_first=self.spec_first,
            spec_decode_metrics=metrics,
        )


def _mode_from_capture(kinds: set[tuple[str, str]]) -> str:
    """Mode implied by which capture progress bars ran (when no statement names it)."""
    modes = {mode for _kind, mode in kinds}
    if "PIECEWISE" in modes and "FULL" in modes:
        return "FULL_AND_PIECEWISE"
    if ("decode", "FULL") in kinds:
        return "FULL_DECODE_ONLY"
    return "FULL" if "FULL" in modes else "PIECEWISE"


def _tokens_basis(version: str | None) -> str | None:
    """The KV-cache token figure is a pool size up to 0.20, concurrency × max_model_len
    from 0.21 (source builds report 0.1.devN and say nothing)."""
    match = re.match(r"0\.([0-9]+)", version or "")
    if match is None or version is None or version.startswith("0.1.dev"):
        return None
    return "blocks" if int(match.group(1)) <= 20 else "max_concurrency"


# -- handlers ---------------------------------------------------------------------------
def _api_version(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.server = True
    st.set_version(m.group(1), 3, line, m.start(), m.end())
    return True


def _banner_version(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None or not _BANNER_CHARS.intersection(line.msg):
        return True
    st.set_version(m.group(1), 3, line, m.start(), m.end())
    return True


def _engine_init(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.generation = "v1" if m.group(1) == "V1 " else "v0"
    st.set_version(m.group(2), 2, line, m.start(), m.end())
    return True


def _container_version(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is not None:
        st.set_version(m.group(1), 1, line, m.start(), m.end())
    return True


def _kv_size(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    proof = excerpt(line, m.start(), m.end())
    st.first("kv_cache_device", m.group(1).strip(), proof)
    st.first("kv_cache_tokens", number(m.group(2)), proof)
    return True


def _concurrency(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    proof = excerpt(line, m.start(), m.end())
    st.first("max_concurrency_at_tokens", number(m.group(1)), proof)
    st.first("max_concurrency", float(m.group(2)), proof)
    return True


def _first_float(key: str, group: int = 1) -> Any:
    def handler(st: VllmState, line: LogLine, rx: Rx) -> bool:
        m = rx[0].search(line.msg)
        if m is None:
            return False
        st.first(key, float(m.group(group)), excerpt(line, m.start(), m.end()))
        return True
    return handler


def _first_int(key: str) -> Any:
    def handler(st: VllmState, line: LogLine, rx: Rx) -> bool:
        m = rx[0].search(line.msg)
        if m is None:
            return False
        st.first(key, number(m.group(1)), excerpt(line, m.start(), m.end()))
        return True
    return handler


def _blocks(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    proof = excerpt(line, m.start(), m.end())
    st.generation = st.generation or "v0"
    st.first("gpu_blocks", int(m.group(1)), proof)
    st.first("cpu_blocks", int(m.group(2)), proof)
    return True


def _weights(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    seconds = float(m.group(1))
    proof = excerpt(line, m.start(), m.end())
    if "weights_load_seconds" not in st.values:
        st.first("weights_load_seconds", seconds, proof)
        st.weights_process = line.process
    elif line.process == st.weights_process or line.process in st.drafter_loading:
        # The same worker loading weights a second time loads the drafter; other
        # workers (TP ranks, Ray workers) print their own first load.
        st.first("drafter_weights_load_seconds", seconds, proof)
    return True


def _drafter(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    if len(st.drafter_loading) < 64:
        st.drafter_loading.add(line.process)
    st.spec_true = True
    st.prove("spec_decode", excerpt(line))
    return True


def _graph_capture(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.capturing = False
    proof = excerpt(line, m.start(), m.end())
    st.first("graph_capture_seconds", int(m.group(1)), proof)
    if m.group(3) is not None:
        st.first("graph_capture_gib", float(m.group(3)), proof)
    return True


def _init_engine(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    proof = excerpt(line, m.start(), m.end())
    st.generation = st.generation or "v1"
    st.first("init_engine_seconds", float(m.group(1)), proof)
    compilation = rx[1].search(line.msg)
    if compilation is not None:
        st.first("compilation_seconds", float(compilation.group(1)), proof)
    return True


def _architecture(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    arch = m.group(1)
    proof = excerpt(line, m.start(), m.end())
    if not st.architectures:
        st.first("architecture", arch, proof)
    if len(st.architectures) < 16:
        st.architectures.append(arch)
        if arch != st.architectures[0]:
            st.first("draft_architecture", arch, proof)
    return True


def _cudagraph_mode(st: VllmState, line: LogLine, rx: Rx) -> bool:
    msg = line.msg
    downgrade = rx[3].search(msg)
    if downgrade is not None:
        st.set_mode(downgrade.group(2).upper(), "downgrade", line, downgrade.start(),
                    downgrade.end())
        return True
    enum = rx[1].search(msg)
    if enum is not None:
        st.set_mode(enum.group(1), "config", line, enum.start(), enum.end())
        return True
    as_json = rx[0].search(msg)
    if as_json is not None:
        mode = _MODE_VALUES.get(as_json.group(1).replace(" ", ""))
        if mode is not None:
            st.set_mode(mode, "config", line, as_json.start(), as_json.end())
        return True
    as_arg = rx[2].search(msg)
    if as_arg is not None:
        st.set_mode(as_arg.group(1).upper(), "config", line, as_arg.start(), as_arg.end())
    return True


def _eager(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    st.set_mode("NONE", "eager", line)
    return True


def _capture_progress(st: VllmState, line: LogLine, rx: Rx) -> bool:
    st.capturing = True
    m = rx[0].search(line.msg)
    if m is not None and len(st.capture_kinds) < 8:
        kind = (m.group(1), m.group(2))
        if kind not in st.capture_kinds:
            st.capture_kinds.add(kind)
            st.prove("cudagraph_mode", excerpt(line, m.start(), m.end()))
    return True


def _capture_started(st: VllmState, _line: LogLine, _rx: Rx) -> bool:
    st.capturing = True
    return True


def _backend(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """Decoder attention backend selected by the engine (first = target model)."""
    msg = line.msg
    for index, pattern in enumerate(rx):
        m = pattern.search(msg)
        if m is None:
            continue
        name = m.group(1).strip()
        if index in (0, 3):
            mapped = _BACKEND_NAMES.get(name.lower())
            if mapped is None and index == 3 and _ENUM_NAME.fullmatch(name) is None:
                return True  # some other component's backend ("Using Marlin backend.")
            name = mapped or name.upper().replace(" ", "_")
        if "attention_backend" not in st.values or st.backend_forced:
            st.backend_forced = False
            st.last("attention_backend", name, excerpt(line, m.start(), m.end()))
        return True
    return True


def _forced_backend(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """Config-time decision (Gemma 4); an engine selection line overrides it."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    if "attention_backend" not in st.values:
        st.backend_forced = True
        st.last("attention_backend", m.group(1), excerpt(line, m.start(), m.end()))
    return True


def _moe(st: VllmState, line: LogLine, rx: Rx) -> bool:
    proof = excerpt(line)
    st.first("moe_default_config_warning", True, proof)
    m = rx[1].search(line.msg)
    if m is not None:
        st.first("moe_config_device_name", m.group(1), proof)
    return True


def _async(st: VllmState, line: LogLine, rx: Rx) -> bool:
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.last("async_scheduling", m.group(1) == "enabled", excerpt(line, m.start(), m.end()))
    return True


def _mtp(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    proof = excerpt(line)
    st.first("mtp_detected", True, proof)
    st.spec_true = True
    st.prove("spec_decode", proof)
    return True


def _spec_config(st: VllmState, line: LogLine, rx: Rx) -> bool:
    msg = line.msg
    m = rx[0].search(msg)
    if m is None:
        return True
    proof = excerpt(line, m.start(), m.end())
    if m.group(1) == "None":
        st.spec_false = True
        if not st.spec_true:
            st.first("spec_decode", False, proof)
        return True
    st.spec_true = True
    st.last("spec_decode", True, proof)
    method = rx[1].search(msg) or rx[2].search(msg)
    if method is not None:
        st.first("spec_decode_method", method.group(1).lower(), proof)
    return True


def _spec_metrics(st: VllmState, line: LogLine, rx: Rx) -> bool:
    # Printed every stats interval for the whole life of the server: search the raw line
    # (the prefix cannot contain these phrases) and clean it only for the first one.
    msg = line.raw
    mean = rx[0].search(msg)
    if mean is None:
        return False
    value = float(mean.group(1))
    st.spec_true = True
    st.spec_lines += 1
    if st.spec_first is None:
        st.spec_first = value
        st.first("mean_acceptance_length_first", value, excerpt(line))
    st.spec_last = value
    accepted, drafted = rx[1].search(msg), rx[2].search(msg)
    if accepted is not None and drafted is not None:
        st.spec_accepted += int(accepted.group(1))
        st.spec_drafted += int(drafted.group(1))
    positions = rx[3].search(msg)
    if positions is not None:
        st.spec_positions = tuple(
            float(p) for p in positions.group(1).replace(" ", "").split(",") if p
        )[:32]
    return True


def _ready(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    st.mark_ready(excerpt(line))
    return True


def _supported_tasks(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    """Offline ``LLM()`` runs have no HTTP server: the engine is ready once built. A
    server prints the same line before uvicorn starts listening."""
    offline = line.source == "llm.py" or (
        line.source is None and not st.server and not line.process.startswith("APIServer")
    )
    if offline and "init_engine_seconds" in st.values:
        st.mark_ready(excerpt(line), offline=True)
    return True


def _server(st: VllmState, _line: LogLine, _rx: Rx) -> bool:
    st.server = True
    return True


def _fatal(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    st.mark_fatal(excerpt(line))
    return True


def _engine_core(st: VllmState, line: LogLine, rx: Rx) -> bool:
    if rx[0].search(line.raw) is not None:
        st.mark_fatal(excerpt(line))
    return True


def _died(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    # An offline LLM() script prints this at interpreter exit after finishing its work.
    if st.ready is None or not st.offline:
        st.mark_fatal(excerpt(line))
    return True


def _shutdown(st: VllmState, _line: LogLine, _rx: Rx) -> bool:
    if st.ready is not None:
        st.mark_shutdown()
    return True


def _signal(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    st.mark_stopped(excerpt(line))
    return True


def _headless(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """A headless rank's launch line (``Launching vLLM (v0.26.0) headless multiproc
    executor, with head node address …``): the only version statement a worker prints."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.set_version(m.group(1), 2, line, m.start(1), m.end(1))
    return True


_NUM = "[0-9][0-9,]*"
_VERSION = "([0-9][A-Za-z0-9.+_-]*)"

RULES: tuple[Rule, ...] = (
    Rule("server version ", (f"vLLM API server version {_VERSION}",), _api_version),
    Rule("  version ", (f"  version {_VERSION}",), _banner_version),
    Rule("LLM engine (v", (f"Initializing an? (V[01] )?LLM engine \\(v{_VERSION}\\)",),
         _engine_init),
    Rule("vLLM Version ", (f"vLLM Version {_VERSION}",), _container_version),
    Rule("KV cache size: ", (f"([A-Za-z][A-Za-z0-9 +]*) KV cache size: ({_NUM}) tokens",),
         _kv_size, once=("kv_cache_tokens",)),
    Rule("Maximum concurrency for ",
         (f"Maximum concurrency for ({_NUM}) tokens per request: ([0-9.]+)x",), _concurrency,
         once=("max_concurrency",)),
    Rule("Available KV cache memory: ", ("Available KV cache memory: (-?[0-9.]+) ?GiB",),
         _first_float("available_kv_cache_gib"), once=("available_kv_cache_gib",)),
    Rule("# GPU blocks: ", ("# GPU blocks: ([0-9]+), # CPU blocks: ([0-9]+)",), _blocks,
         once=("gpu_blocks",)),
    Rule("Model loading took ", ("Model loading took (-?[0-9.]+) ?Gi?B",),
         _first_float("model_load_gib"), once=("model_load_gib",)),
    Rule("Loading model weights took ", ("Loading model weights took (-?[0-9.]+) ?Gi?B",),
         _first_float("model_load_gib"), once=("model_load_gib",)),
    Rule("Loading weights took ", ("Loading weights took ([0-9.]+) ?s",), _weights),
    Rule("Loading drafter model", ("Loading drafter model",), _drafter),
    Rule("Graph capturing finished in ",
         ("Graph capturing finished in ([0-9]+) secs?(, took (-?[0-9.]+) GiB)?",),
         _graph_capture),
    Rule("init engine (profile",
         ("init engine \\(profile, create kv cache, warmup model\\) took ([0-9.]+) s",
          "\\(compilation: ([0-9.]+) s"), _init_engine, once=("init_engine_seconds",)),
    Rule("Using max model len ", ("Using max model len ([0-9]+)",),
         _first_int("max_model_len"), once=("max_model_len",)),
    Rule("Resolved architecture: ", ("Resolved architecture: ([A-Za-z0-9_]+)",),
         _architecture),
    Rule("cudagraph_mode",
         ('"cudagraph_mode": ?(\\[[0-9, ]*\\]|[0-9]+|null)',
          "'cudagraph_mode': <CUDAGraphMode\\.([A-Z_]+)",
          "'cudagraph_mode': '([A-Za-z_]+)'",
          "[Ss]etting cudagraph_mode( to |=)([A-Za-z_]+)"), _cudagraph_mode,
         BOOT | DYING),
    Rule("Cudagraph is disabled under eager mode", ("Cudagraph is disabled under eager mode",),
         _eager),
    Rule("Enforce eager set", ("Enforce eager set",), _eager),
    Rule("No cudagraph will be used", ("No cudagraph will be used",), _eager),
    Rule("Capturing CUDA graphs (",
         ("Capturing CUDA graphs \\(([a-z -]+), ([A-Z_]+)\\)",), _capture_progress),
    Rule("Capturing CUDA graph shapes", ("Capturing CUDA graph shapes",), _capture_started),
    Rule("Capturing the model for CUDA graphs", ("Capturing the model for CUDA graphs",),
         _capture_started),
    Rule(" backend",
         ("Using (.+) backend on V1 engine",
          "Using ([A-Z][A-Z0-9_]*) attention backend out of",
          "Using AttentionBackendEnum\\.([A-Z0-9_]+) backend\\.",
          "^Using ([A-Za-z][A-Za-z0-9_ -]*) backend\\.$"), _backend),
    Rule("Forcing ", ("Forcing ([A-Z][A-Z0-9_]*) backend",), _forced_backend),
    Rule("Using default MoE config",
         ("Using default MoE config", "device_name=([A-Za-z0-9_-]+)"), _moe,
         once=("moe_default_config_warning",)),
    Rule("Asynchronous scheduling is ", ("Asynchronous scheduling is (enabled|disabled)",),
         _async),
    Rule("Detected MTP model", ("Detected MTP model",), _mtp),
    Rule("speculative_config",
         ("speculative_config'?[=:] ?(None|SpeculativeConfig\\(|\\{)",
          "SpeculativeConfig\\(method='([A-Za-z0-9_]+)'",
          "'speculative_config': \\{[^}]*'method': '([A-Za-z0-9_]+)'"), _spec_config),
    Rule("SpecDecoding metrics",
         ("Mean acceptance length: ([0-9.]+)", "Accepted: ([0-9]+) tokens",
          "Drafted: ([0-9]+) tokens", "Per-position acceptance rate: ([0-9., ]+)"),
         _spec_metrics, ALWAYS),
    Rule("Application startup complete", ("Application startup complete",), _ready),
    Rule("Uvicorn running on ", ("Uvicorn running on ",), _ready),
    Rule("upported_tasks: ", ("Supported_tasks: ",), _supported_tasks),
    Rule("upported tasks: ", ("Supported tasks: ",), _supported_tasks),
    Rule("Starting vLLM ", ("Starting vLLM (API )?server",), _server),
    Rule("headless multiproc executor",
         (f"Launching vLLM \\(v{_VERSION}\\) headless multiproc executor",), _headless),
    # Engine-core messages: "EngineCore failed to start." (boot), "EngineCore encountered a
    # fatal error." (0.9+ serving), "EngineCore hit an exception: Traceback ..." (<= 0.8).
    # One anchor on the header's end finds them all.
    Rule("] EngineCore ", ("EngineCore (failed to start|encountered a fatal error|hit an "
                           "exception)",), _engine_core, ALWAYS),
    Rule("WorkerProc hit an exception", ("WorkerProc hit an exception",), _fatal, BOOT | DYING),
    Rule("WorkerProc failed to start", ("WorkerProc failed to start",), _fatal,
         BOOT | DYING),
    Rule("died unexpectedly", ("died unexpectedly",), _died, ALWAYS),
    Rule("Shutting down", ("Shutting down",), _shutdown, ALWAYS),
    # uvicorn prints "Shutting down" first; these two only matter outside serving.
    Rule("Application shutdown complete", ("Application shutdown complete",), _shutdown,
         BOOT | DYING),
    Rule("SIGTERM", ("SIGTERM",), _signal, BOOT | DYING),
    # An exception that kills a serving engine without an engine-core message first (the
    # scanner does not look for "Error" while serving).
    Rule("Workspace is locked", ("Workspace is locked but allocation from",), exception_line,
         ALWAYS),
    *PYTHON_SERVER_RULES,
    *PYTHON_ERROR_RULES,
)

"""The vLLM rules' fact handlers: each reads one kind of boot message (version, KV cache,
load and capture times, CUDA-graph mode, attention backend, speculative decoding) into
:class:`VllmState`.

A handler returns False when the rule's anchor was on the line but its regex did not match
(the scanner then retries with a hard-wrapped continuation), else True.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.rules import excerpt, number
from servefleet.core.bootlog.vllm.state import Rx, VllmState

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


def api_version(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """The API server's version line: the most authoritative version statement."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.server = True
    st.set_version(m.group(1), 3, line, m.start(), m.end())
    return True


def banner_version(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """The version under the startup banner (only on a line with banner characters)."""
    m = rx[0].search(line.msg)
    if m is None or not _BANNER_CHARS.intersection(line.msg):
        return True
    st.set_version(m.group(1), 3, line, m.start(), m.end())
    return True


def engine_init(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``Initializing a V1 LLM engine (vX)``: the version and the engine generation."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.generation = "v1" if m.group(1) == "V1 " else "v0"
    st.set_version(m.group(2), 2, line, m.start(), m.end())
    return True


def container_version(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``vLLM Version X``: a container banner, the least authoritative version."""
    m = rx[0].search(line.msg)
    if m is not None:
        st.set_version(m.group(1), 1, line, m.start(), m.end())
    return True


def kv_size(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``<device> KV cache size: N tokens``: the KV pool and the device it is on."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    proof = excerpt(line, m.start(), m.end())
    st.first("kv_cache_device", m.group(1).strip(), proof)
    st.first("kv_cache_tokens", number(m.group(2)), proof)
    return True


def concurrency(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``Maximum concurrency for N tokens per request: Xx``."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    proof = excerpt(line, m.start(), m.end())
    st.first("max_concurrency_at_tokens", number(m.group(1)), proof)
    st.first("max_concurrency", float(m.group(2)), proof)
    return True


def first_value(key: str, convert: Callable[[str], Any]) -> Any:
    """A handler that sets ``key`` first-wins from the first group of the rule's first
    regex, converted (``float``, or :func:`number` for a figure with thousands commas)."""
    def handler(st: VllmState, line: LogLine, rx: Rx) -> bool:
        m = rx[0].search(line.msg)
        if m is None:
            return False
        st.first(key, convert(m.group(1)), excerpt(line, m.start(), m.end()))
        return True
    return handler


def blocks(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """V0's ``# GPU blocks: N, # CPU blocks: M``."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    proof = excerpt(line, m.start(), m.end())
    st.generation = st.generation or "v0"
    st.first("gpu_blocks", int(m.group(1)), proof)
    st.first("cpu_blocks", int(m.group(2)), proof)
    return True


def weights(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``Loading weights took X s``: the target's load, or a drafter's second load."""
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


def drafter(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    """``Loading drafter model``: speculative decoding, and the worker that loads it."""
    if len(st.drafter_loading) < 64:
        st.drafter_loading.add(line.process)
    st.spec_true = True
    st.prove("spec_decode", excerpt(line))
    return True


def graph_capture(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``Graph capturing finished in N secs, took X GiB``."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.capturing = False
    proof = excerpt(line, m.start(), m.end())
    st.first("graph_capture_seconds", int(m.group(1)), proof)
    if m.group(3) is not None:
        st.first("graph_capture_gib", float(m.group(3)), proof)
    return True


def init_engine(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``init engine (...) took X s`` (with the compilation time from 0.20)."""
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


def architecture(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``Resolved architecture: X``: the target's, then a drafter's if different."""
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


def cudagraph_mode(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """A CUDA-graph mode statement: a downgrade, or the config's enum, JSON value or
    argument."""
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


def eager(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    """Eager mode: no CUDA graphs."""
    st.set_mode("NONE", "eager", line)
    return True


def capture_progress(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """A CUDA-graph capture progress bar: which kinds and modes are captured."""
    st.capturing = True
    m = rx[0].search(line.msg)
    if m is not None and len(st.capture_kinds) < 8:
        kind = (m.group(1), m.group(2))
        if kind not in st.capture_kinds:
            st.capture_kinds.add(kind)
            st.prove("cudagraph_mode", excerpt(line, m.start(), m.end()))
    return True


def capture_started(st: VllmState, _line: LogLine, _rx: Rx) -> bool:
    """CUDA-graph capture has started."""
    st.capturing = True
    return True


def backend(st: VllmState, line: LogLine, rx: Rx) -> bool:
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


def forced_backend(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """Config-time decision (Gemma 4); an engine selection line overrides it."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    if "attention_backend" not in st.values:
        st.backend_forced = True
        st.last("attention_backend", m.group(1), excerpt(line, m.start(), m.end()))
    return True


def moe(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``Using default MoE config``: no tuned config for this device."""
    proof = excerpt(line)
    st.first("moe_default_config_warning", True, proof)
    m = rx[1].search(line.msg)
    if m is not None:
        st.first("moe_config_device_name", m.group(1), proof)
    return True


def async_scheduling(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """``Asynchronous scheduling is enabled/disabled``."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.last("async_scheduling", m.group(1) == "enabled", excerpt(line, m.start(), m.end()))
    return True


def mtp(st: VllmState, line: LogLine, _rx: Rx) -> bool:
    """``Detected MTP model``: multi-token prediction, a drafter built in."""
    proof = excerpt(line)
    st.first("mtp_detected", True, proof)
    st.spec_true = True
    st.prove("spec_decode", proof)
    return True


def spec_config(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """The config's ``speculative_config``: none, or a drafter and its method."""
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


def spec_metrics(st: VllmState, line: LogLine, rx: Rx) -> bool:
    # Printed every stats interval for the whole life of the server: search the raw line
    # (the prefix cannot contain these phrases) and clean it only for the first one.
    """``SpecDecoding metrics``: acceptance lengths, accepted and drafted tokens."""
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


def headless(st: VllmState, line: LogLine, rx: Rx) -> bool:
    """A headless rank's launch line (``Launching vLLM (v0.26.0) headless multiproc
    executor, with head node address …``): the only version statement a worker prints."""
    m = rx[0].search(line.msg)
    if m is None:
        return False
    st.set_version(m.group(1), 2, line, m.start(1), m.end(1))
    return True

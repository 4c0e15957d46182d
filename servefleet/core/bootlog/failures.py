"""Failure signatures: which class a fatal error line belongs to.

The strings come from the engines' sources and from real boot logs (FORMATS.md section 11,
vLLM issues #41565/#41726 for the TurboQuant assertion). Classification looks at the
exception text and at where it happened: an out-of-memory error raised while the KV cache is
allocated is ``kv_cache_oom``, the same error during CUDA-graph capture is
``cudagraph_capture_failed``, anywhere else ``cuda_oom``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from servefleet.core.bootlog.model import FailureClass

F = FailureClass

#: A Python exception line as the traceback printer writes it: ``ValueError: msg``,
#: ``torch.OutOfMemoryError: ...``, a bare ``AssertionError``.
EXCEPTION_LINE = re.compile(
    r"([A-Za-z_][A-Za-z0-9_]*\.)*((?:[A-Z][A-Za-z0-9_]*)?(?:Error|Exception|Interrupt|Exit))"
    r"(: .*|:)?$"
)


_NEEDLES: list[str] = []


def _any(*needles: str) -> Callable[[str], bool]:
    _NEEDLES.extend(needles)
    return lambda text: any(needle in text for needle in needles)


def _all(*needles: str) -> Callable[[str], bool]:
    _NEEDLES.append(needles[0])
    return lambda text: all(needle in text for needle in needles)


def _either(*tests: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda text: any(test(text) for test in tests)


_LOWER_DTYPE = re.compile(r"b?float16[^.]*(not supported|only supported|unsupported)", re.I)
_NEEDLES.append("float16")
_NEEDLES.append("Float16")

#: (class, test) in priority order; the first test that matches names the class.
SIGNATURES: tuple[tuple[FailureClass, Callable[[str], bool]], ...] = (
    (F.TURBOQUANT_CONTINUATION_PREFILL_ASSERTION,
     _all("Workspace is locked but allocation from", "_continuation_prefill")),
    (F.MAX_MODEL_LEN_EXCEEDS_KV_CACHE, _any(
        "To serve at least one request with the model",
        "is larger than the maximum number of tokens that can be stored in KV cache",
    )),
    (F.KV_CACHE_OOM, _any(
        "No available memory for the cache blocks",
        "less than desired GPU memory utilization",
        "failed to allocate buffer for kv cache",
        "Not enough memory. Please try to increase --mem-fraction-static",
        "insufficient memory for the KV cache",
    )),
    (F.CUDAGRAPH_CAPTURE_FAILED, _any(
        "Capture cuda graph failed", "Capture CUDA graph failed", "stream is capturing",
        "cudaErrorStreamCapture", "CUDA graph capture failed", "during CUDA graph capture",
    )),
    (F.MODEL_DOWNLOAD_OR_AUTH, _any(
        "GatedRepoError", "RepositoryNotFoundError", "RevisionNotFoundError",
        "LocalEntryNotFoundError", "HFValidationError", "Invalid repository ID or local directory",
        "401 Client Error", "403 Client Error", "gated repo", "Repo id must be",
        "is not a local folder and is not a valid model identifier",
        "couldn't connect to 'https://huggingface.co'", "Unauthorized for url",
    )),
    (F.UNSUPPORTED_QUANTIZATION_OR_DTYPE, _either(
        _any("Unknown quantization method", "not supported for quantization",
             "Unsupported dtype", "dtype is not supported", "does not support dtype"),
        _all("quantization", "not supported"),
        _all("Quantization method", "not supported"),
        lambda text: _LOWER_DTYPE.search(text) is not None,
    )),
    (F.ATTENTION_BACKEND_UNSUPPORTED, _any(
        "is not valid for this configuration", "No valid attention backend",
        "not supported by any attention backend",
    )),
    (F.CUDA_OOM, _any(
        "CUDA out of memory", "HIP out of memory", "OutOfMemoryError", "out of memory",
        "cudaErrorMemoryAllocation",
    )),
    (F.GPU_RUNTIME_ERROR, _any(
        "CUDA error", "ROCm error", "HIP error", "device kernel image is invalid",
        "no kernel image is available", "illegal memory access", "HSA_STATUS_ERROR",
        "cudaError", "Triton Error [CUDA]", "CUBLAS_STATUS_", "NCCL error",
        "unspecified launch failure",
    )),
    (F.MODEL_LOAD_FAILED, _any(
        "error loading model", "failed to load model", "gguf_init_from_file",
    )),
    (F.ENGINE_CORE_DIED, _any(
        "Engine core initialization failed", "EngineCore encountered an issue",
        "EngineDeadError", "died unexpectedly", "EngineCore failed to start",
        "EngineCore encountered a fatal error",
    )),
)

# Most error lines (request errors while serving) match no signature: one search over all
# needles answers that before the ordered checks run.
_ANY_SIGNATURE = re.compile("|".join(re.escape(n) for n in sorted(set(_NEEDLES), key=len,
                                                                    reverse=True)))

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
    it); ``capturing``: CUDA graphs were being captured when it happened.
    """
    if _ANY_SIGNATURE.search(text) is None:
        return F.CUDAGRAPH_CAPTURE_FAILED if capturing else F.OTHER
    for cls, test in SIGNATURES:
        if test(text):
            if cls is F.CUDA_OOM and kv_alloc:
                return F.KV_CACHE_OOM
            if capturing and cls in (F.CUDA_OOM, F.GPU_RUNTIME_ERROR):
                return F.CUDAGRAPH_CAPTURE_FAILED
            return cls
    return F.CUDAGRAPH_CAPTURE_FAILED if capturing else F.OTHER


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

    TOP_FRAMES = ("<module>", "_bootstrap")
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

    def context(self, process: str) -> tuple[bool, bool]:
        """(kv_alloc, capturing) of the process's current traceback."""
        tb = self._by_process.get(process)
        return (False, False) if tb is None else (tb.kv_alloc, tb.capturing)

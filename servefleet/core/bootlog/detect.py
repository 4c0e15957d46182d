"""Which engine wrote a log, from the first line that only that engine prints.

Tokens are chosen so that they cannot appear in another engine's log: plain ``vllm`` is
not one of them because file paths often contain it (a llama.cpp model folder named
``gemma4-vllm`` exists in the corpus). Two vLLM signs are *weak*: SGLang imports vLLM
modules, whose import prints ``Automatically detected platform cuda.`` and other lines in
vLLM's logger format, so a weak sign decides only when no strong sign of another engine
follows soon (:mod:`servefleet.core.bootlog.parser` holds the lines meanwhile).
"""

from __future__ import annotations

import re

from servefleet.core.bootlog.lines import LogLine
from servefleet.core.bootlog.model import Engine

#: (token, engine); a line containing a token decides the engine.
TOKENS: tuple[tuple[str, Engine], ...] = (
    ("vLLM API server version", "vllm"),
    ("LLM engine (v", "vllm"),
    ("vLLM Version ", "vllm"),
    ("(APIServer pid=", "vllm"),
    ("(EngineCore", "vllm"),
    ("kv_cache_utils.py:", "vllm"),
    ("vllm.entrypoints", "vllm"),
    ("headless multiproc executor", "vllm"),
    # argparse's usage and error lines: a command line refused before anything else ran.
    ("usage: vllm", "vllm"),
    ("vllm serve: error: ", "vllm"),
    ("vllm: error: ", "vllm"),
    ("usage: api_server.py", "vllm"),
    # vLLM's CLI lists its subcommands in its argparse usage whatever its program name
    # (`python -m vllm.entrypoints.cli.main` is main.py; wrappers rename it).
    ("{chat,complete,serve,", "vllm"),
    ("serve [model_tag] [options]", "vllm"),
    ("usage: launch_server.py", "sglang"),
    ("launch_server.py: error: ", "sglang"),
    ("SGLang Version", "sglang"),
    ("server_args=ServerArgs(", "sglang"),
    ("sglang.launch_server", "sglang"),
    ("sglang/srt/", "sglang"),
    ("The server is fired up", "sglang"),
    ("llama_model_load", "llama.cpp"),
    ("llama_context:", "llama.cpp"),
    ("llama_kv_cache", "llama.cpp"),
    ("load_tensors:", "llama.cpp"),
    ("build_info: b", "llama.cpp"),
    ("ggml_cuda_init:", "llama.cpp"),
    ("ggml_metal_", "llama.cpp"),
    ("ggml_vulkan:", "llama.cpp"),
    ("load_backend: loaded", "llama.cpp"),
    ("llama_server:", "llama.cpp"),
    ("srv    load_model:", "llama.cpp"),
    ("main: loading model", "llama.cpp"),
    ("n_parallel is set to auto", "llama.cpp"),
    ("common_download_file", "llama.cpp"),
    ("gguf_init_from_file", "llama.cpp"),
    ("system_info: n_threads", "llama.cpp"),
    ("log_server_r: ", "llama.cpp"),
    ("update_slots: ", "llama.cpp"),
    ("srv    operator(): ", "llama.cpp"),
    # common/arg.cpp's wording; argparse says "unrecognized arguments" instead.
    ("error: invalid argument: ", "llama.cpp"),
)
WEAK_TOKENS: tuple[tuple[str, Engine], ...] = (
    ("Automatically detected platform", "vllm"),
)
"""Signs that decide only when no strong sign of another engine follows (see above)."""

_LLAMA_BUILD = re.compile(r"^build: [0-9]+ \([0-9a-f]+\) with ")


def detect_engine(line: LogLine) -> Engine | None:
    """The engine a line belongs to, or None when the line is not decisive.

    Besides the tokens, llama.cpp's 2026 timestamp (``0.02.254.428 I``) is decisive.
    SGLang's ``[YYYY-MM-DD HH:MM:SS]`` is not: ROCm's aiter library prints the same inside
    vLLM logs. vLLM's logger header is a weak sign (:func:`weak_engine`).
    """
    text = line.text
    for token, engine in TOKENS:
        if token in text:
            return engine
    if text.startswith("build: ") and _LLAMA_BUILD.match(text):
        return "llama.cpp"
    # Which engine wrote the log, from its logger header: a fact of the log format the
    # readers detect before any profile is known, not a branch on a profile's engine.
    if line.header == "llama.cpp":
        return "llama.cpp"
    return None


def weak_engine(line: LogLine) -> Engine | None:
    """The engine a weak sign points to (vLLM's logger header, or a line vLLM's import
    prints), or None."""
    text = line.text
    for token, engine in WEAK_TOKENS:
        if token in text:
            return engine
    if line.header == "vllm":  # the logger header again (see detect_engine)
        return "vllm"
    return None


#: Literal anchors that find detection lines in raw bytes.
ANCHORS: tuple[bytes, ...] = (*(token.encode("ascii") for token, _ in (*TOKENS, *WEAK_TOKENS)),
                              b"build: ")

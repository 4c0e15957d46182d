"""Which engine wrote a log, from the first line that only that engine prints.

Tokens are chosen so that they cannot appear in another engine's log: plain ``vllm`` is
not one of them because file paths often contain it (a llama.cpp model folder named
``gemma4-vllm`` exists in the corpus).
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
    ("Automatically detected platform", "vllm"),
    ("kv_cache_utils.py:", "vllm"),
    ("vllm.entrypoints", "vllm"),
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
)

_LLAMA_BUILD = re.compile(r"^build: [0-9]+ \([0-9a-f]+\) with ")


def detect_engine(line: LogLine) -> Engine | None:
    """The engine a line belongs to, or None when the line is not decisive.

    Besides the tokens, vLLM's logger header (``INFO 05-12 02:45:59 [file.py:634]``) and
    llama.cpp's 2026 timestamp (``0.02.254.428 I``) are decisive. SGLang's
    ``[YYYY-MM-DD HH:MM:SS]`` is not: ROCm's aiter library prints the same inside vLLM logs.
    """
    text = line.text
    for token, engine in TOKENS:
        if token in text:
            return engine
    if text.startswith("build: ") and _LLAMA_BUILD.match(text):
        return "llama.cpp"
    if line.header == "vllm":
        return "vllm"
    if line.header == "llama.cpp":
        return "llama.cpp"
    return None


#: Literal anchors that find detection lines in raw bytes.
ANCHORS: tuple[bytes, ...] = (*(token.encode("ascii") for token, _ in TOKENS), b"build: ")

"""One physical log line, cleaned of everything that is not the engine's own message.

Engines rarely write straight to the file an operator reads: docker adds a service prefix
(``engine-1  | ``) and maybe an RFC 3339 timestamp, vLLM adds a process tag
(``(EngineCore_DP0 pid=165)``; Ray nests two and appends ``[repeated 2x across cluster]``),
terminals add ANSI colours, and each engine has its own header (vLLM
``INFO 05-12 02:45:59 [kv_cache_utils.py:634]``, SGLang ``[2026-06-07 18:31:50 TP0]``,
llama.cpp's 2026 format ``0.02.254.428 I``). :class:`LogLine` peels these off (on first
use) so that the rules see the message, and keeps the level, process and source file
because failure rules need them (a traceback printed at WARNING level is not a crash).

Only lines that contain an interesting literal reach this module, so it may use regexes.
"""

from __future__ import annotations

import re

# CSI sequences (colours, cursor moves) and the two-byte escapes; terminals and Ray both
# colour the process tag, and SGLang colours whole warning lines.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})? ")
# `docker compose logs` pads the service name with spaces before the bar; a single token
# followed by spaces and a bar never starts an engine message.
_COMPOSE = re.compile(r"[A-Za-z0-9][\w.-]*\s+\| ?")
_PROCESS = re.compile(r"\(([A-Za-z_][\w ]*?) pid=(\d+)(?:, ip=[0-9a-fA-F.:]+)?\) ?")
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# vLLM V1 puts the file in brackets, V0 does not: "INFO 04-28 16:55:11 api_server.py:440] ".
_VLLM_HEADER = re.compile(
    r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
    r"\[?([\w.-]+\.py):\d+\] ?"
)
_UVICORN = re.compile(r"(INFO|WARNING|ERROR|DEBUG|CRITICAL):\s+")
_SGLANG_STAMP = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}((?: [A-Z]+\d+)*)\] ")
_SGLANG_LEVEL = re.compile(r"(INFO|WARNING|ERROR|DEBUG|CRITICAL) ([\w.-]+\.py):\d+: ")
_LLAMA_STAMP = re.compile(r"\d+\.\d\d\.\d{3}\.\d{3} ([IWEDT]) ")
# llama.cpp's "__func__: message"; plain words ("quest: 28.37x") are wrapped text.
_LLAMA_FUNC = re.compile(r"(?:[a-z0-9]+_[a-z0-9_]+|main|srv|slot|load|init|build|warmup|start): ")
_LLAMA_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "D": "DEBUG", "T": "DEBUG"}
# torch / glog style "[rank0]:W0607 13:27:42.911000 96 file.py:1731] message".
_GLOG = re.compile(r"(?:\[rank\d+\]:)?([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]]*\] ")
_GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}

#: Longest line kept for rules; longer lines (config dumps are ~10 kB) are cut, which
#: keeps a rogue line without a terminator from holding memory.
MAX_TEXT = 65536


class LogLine:
    """A log line as the rules see it, cleaned lazily: most rules only search ``raw``, so
    the prefix regexes run only for lines whose facts are kept or whose level matters."""

    __slots__ = ("_header", "_level", "_msg", "_process", "_source", "_text", "lineno", "raw")

    def __init__(self, raw: str, lineno: int) -> None:
        self.raw = raw[:MAX_TEXT]
        """The decoded physical line (ANSI codes and prefixes still in)."""
        self.lineno = lineno
        """1-based physical line number (lines counted by ``\\n``)."""
        self._text: str | None = None
        self._msg = ""
        self._level: str | None = None
        self._process = ""
        self._source: str | None = None
        self._header: str | None = None

    @property
    def text(self) -> str:
        """The line without ANSI codes, docker prefixes and the Ray repeat suffix; the
        process tag and the engine's header are kept so that evidence reads like the log."""
        if self._text is None:
            self._parse()
        return self._text  # type: ignore[return-value]

    @property
    def msg(self) -> str:
        """The engine's message: ``text`` without process tags and level/time/file header."""
        if self._text is None:
            self._parse()
        return self._msg

    @property
    def level(self) -> str | None:
        """``INFO``/``WARNING``/``ERROR``/... when the header states it, else None (raw
        stderr, e.g. traceback lines printed by Python itself)."""
        if self._text is None:
            self._parse()
        return self._level

    @property
    def process(self) -> str:
        """The innermost process tag (``EngineCore pid=96``) or SGLang rank (``TP0``);
        empty when the line has none."""
        if self._text is None:
            self._parse()
        return self._process

    @property
    def source(self) -> str | None:
        """The Python file named in a vLLM/SGLang header (``kv_cache_utils.py``), if any."""
        if self._text is None:
            self._parse()
        return self._source

    @property
    def header(self) -> str | None:
        """Which header the line had: ``vllm``, ``sglang``, ``llama.cpp`` (timestamped),
        ``uvicorn``, ``glog`` or None."""
        if self._text is None:
            self._parse()
        return self._header

    def _parse(self) -> None:
        text = _strip_transport(strip_ansi(self.raw).rstrip("\r\n"))
        if "across cluster]" in text:
            text = _RAY_REPEAT.sub("", text)
        msg = text
        process = ""
        while msg.startswith("("):
            match = _PROCESS.match(msg)
            if match is None:
                break
            process = f"{match.group(1)} pid={match.group(2)}"
            msg = msg[match.end():]
        level: str | None = None
        source: str | None = None
        header: str | None = None
        first = msg[:1]
        if first in "DIWEC":
            if (vllm_header := _VLLM_HEADER.match(msg)) is not None:
                level, header = _normal_level(vllm_header.group(1)), "vllm"
                source = vllm_header.group(2)
                msg = msg[vllm_header.end():]
            elif (uvicorn := _UVICORN.match(msg)) is not None:
                level, header = uvicorn.group(1), "uvicorn"
                msg = msg[uvicorn.end():]
            elif (glog := _split_glog(msg)) is not None:
                (level, msg), header = glog, "glog"
        elif first == "[":
            if (stamp := _SGLANG_STAMP.match(msg)) is not None:
                header = "sglang"
                if stamp.group(1):
                    process = stamp.group(1).strip()
                msg = msg[stamp.end():]
                if (sg_level := _SGLANG_LEVEL.match(msg)) is not None:
                    level, source = sg_level.group(1), sg_level.group(2)
                    msg = msg[sg_level.end():]
                elif (uvicorn := _UVICORN.match(msg)) is not None:
                    level = uvicorn.group(1)
                    msg = msg[uvicorn.end():]
            elif (glog := _split_glog(msg)) is not None:
                (level, msg), header = glog, "glog"
        elif first.isdigit():
            stamp = _LLAMA_STAMP.match(msg)
            if stamp is not None:
                level, header = _LLAMA_LEVELS[stamp.group(1)], "llama.cpp"
                msg = msg[stamp.end():]
        self._text, self._msg, self._level = text, msg, level
        self._process, self._source, self._header = process, source, header


def _split_glog(msg: str) -> tuple[str, str] | None:
    """A glog line's level and the message after its header; None when it is not one."""
    glog = _GLOG.match(msg)
    return None if glog is None else (_GLOG_LEVELS[glog.group(1)], msg[glog.end():])


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (only scanned for when an ESC byte is present)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def clean_line(raw: str, lineno: int) -> LogLine:
    """One decoded physical line, split into its parts on demand (see :class:`LogLine`)."""
    return LogLine(raw, lineno)


def looks_like_record_start(text: str) -> bool:
    """Whether a physical line starts a new log record rather than continuing a line that
    a terminal hard-wrapped (used to decide whether two physical lines may be joined)."""
    text = _strip_transport(strip_ansi(text))
    if not text:
        return True
    if text[0] in "([" or text.startswith(("Traceback", "  File ")):
        return True
    return bool(
        _VLLM_HEADER.match(text) or _UVICORN.match(text) or _LLAMA_STAMP.match(text)
        or _LLAMA_FUNC.match(text)
    )


def _strip_transport(text: str) -> str:
    """Remove what docker (compose) and `docker logs --timestamps` put before a line."""
    for _ in range(2):
        if text[:1].isdigit():
            stamp = _RFC3339.match(text)
            if stamp is not None:
                text = text[stamp.end():]
                continue
        if " |" in text[:80]:
            compose = _COMPOSE.match(text)
            if compose is not None:
                text = text[compose.end():]
                continue
        break
    return text


def _normal_level(level: str) -> str:
    return "WARNING" if level == "WARN" else level

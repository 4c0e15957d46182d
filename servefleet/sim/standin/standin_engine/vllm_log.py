"""vLLM's boot-log line anatomy.

``(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:line] message`` (the process prefix
comes from vLLM's stdout decorator; ``EngineCore_DP0`` up to 0.18, ``EngineCore``
from 0.19). Multi-line messages continue with ``\\r\\n`` plus the full prefix, as
vLLM's ``NewLineFormatter`` does. Uvicorn lines are ``INFO:     text`` behind the same
process prefix.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from .vllm_versions import VersionTuple, log_site

API = "api"
CORE = "core"


class VllmLog:
    """Writes lines the way a vLLM process tree does, to one stream."""

    def __init__(
        self,
        version: VersionTuple,
        api_pid: int,
        core_pid: int,
        stream: TextIO | None = None,
    ) -> None:
        self.version = version
        self.api_pid = api_pid
        self.core_pid = core_pid
        self.stream = stream or sys.stdout
        self._lock = threading.Lock()

    def prefix(self, proc: str) -> str:
        """``(APIServer pid=N) `` or ``(EngineCore pid=M) ``."""
        if proc == API:
            return f"(APIServer pid={self.api_pid}) "
        name = "EngineCore" if self.version >= (0, 19, 0) else "EngineCore_DP0"
        return f"({name} pid={self.core_pid}) "

    def write_raw(self, text: str) -> None:
        """Write text as is and flush (docker logs must see it at once)."""
        with self._lock:
            self.stream.write(text)
            self.stream.flush()

    def emit(self, proc: str, level: str, site_key: str, message: str) -> None:
        """One logger record; ``site_key`` names its ``file.py:line`` in the release."""
        site = log_site(self.version, site_key)
        self.emit_at(proc, level, site, message)

    def emit_at(self, proc: str, level: str, site: str, message: str) -> None:
        """One logger record with an explicit ``file.py:line``."""
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
        head = f"{self.prefix(proc)}{level} {stamp} [{site}] "
        body = message.replace("\n", "\r\n" + head)
        self.write_raw(head + body + "\n")

    def info(self, proc: str, site_key: str, message: str) -> None:
        """INFO record."""
        self.emit(proc, "INFO", site_key, message)

    def warning(self, proc: str, site_key: str, message: str) -> None:
        """WARNING record."""
        self.emit(proc, "WARNING", site_key, message)

    def plain(self, proc: str, text: str) -> None:
        """A line printed without the logger (uvicorn, tracebacks, warnings)."""
        self.write_raw(self.prefix(proc) + text + "\n")

    def uvicorn(self, text: str) -> None:
        """``INFO:     text`` from uvicorn in the API server."""
        self.plain(API, f"INFO:     {text}")

    def progress(self, proc: str, frames: list[str]) -> None:
        """A tqdm bar: every update rewritten after a carriage return."""
        self.write_raw(self.prefix(proc) + "".join("\r" + f for f in frames) + "\n")

    def error_block(self, proc: str, site: str, lines: list[str]) -> None:
        """An ``ERROR`` record spanning several lines, each with the full prefix."""
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
        head = f"{self.prefix(proc)}ERROR {stamp} [{site}] "
        self.write_raw("".join(head + line + "\n" for line in lines))


def format_gib(value_gib: float) -> str:
    """vLLM's ``format_gib``: ``str(round(x, 2))`` (``19.7``, not ``19.70``)."""
    return str(round(value_gib, 2))


def tqdm_bar(desc: str, done: int, total: int, elapsed: float, unit: str = "it") -> str:
    """One tqdm frame like ``desc:  33%|███▎      | 1/3 [01:40<03:20, 100.00s/it]``."""
    frac = done / total if total else 1.0
    width = 10
    filled = int(frac * width)
    partial = ""
    if filled < width:
        eighths = int((frac * width - filled) * 8)
        partial = " ▏▎▍▌▋▊▉"[eighths] if eighths else " "
        bar = "█" * filled + partial + " " * (width - filled - 1)
    else:
        bar = "█" * width

    def clock(seconds: float) -> str:
        seconds = int(seconds)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"

    if done == 0:
        rate = f"?{unit}/s"
        remaining = "?"
    else:
        per = elapsed / done
        rate = f"{per:.2f}s/{unit}" if per >= 1 else f"{1 / per:5.2f}{unit}/s"
        remaining = clock(per * (total - done))
    timing = f"[{clock(elapsed)}<{remaining}, {rate}]"
    return f"{desc}: {int(frac * 100):3d}%|{bar}| {done}/{total} {timing}"

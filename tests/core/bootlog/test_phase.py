"""The phase of a boot in progress, read from real boot logs cut short."""

from __future__ import annotations

from pathlib import Path

from servefleet.core.bootlog import BootLogParser
from servefleet.core.bootlog.phase import (
    API_SERVER,
    BOOT_PHASES,
    FAILED,
    GRAPHS,
    LOADING_WEIGHTS,
    PROFILING,
    READY,
    boot_phase,
)

GB10_LOG = "vllm-0.20.0-gb10-gemma-4-26b-a4b-it-04.log"


def phase_after(lines: list[bytes], count: int, engine: str = "vllm") -> str:
    parser = BootLogParser(engine)
    for line in lines[:count]:
        parser.feed(line)
    return boot_phase(parser.close())


def test_each_step_of_a_gb10_boot(logs_dir: Path) -> None:
    lines = (logs_dir / GB10_LOG).read_bytes().splitlines(keepends=True)
    # Line 41 says the weights are loaded, 57 ends the memory profiling (``Available KV
    # cache memory``), 109 ends the graph capture (``Graph capturing finished``), 118 starts
    # the API server, 150 is ``Application startup complete.``
    assert [phase_after(lines, n) for n in (40, 41, 56, 57, 108, 109, 149, 150)] == [
        LOADING_WEIGHTS, PROFILING, PROFILING, GRAPHS, GRAPHS, API_SERVER, API_SERVER, READY]


def test_phases_only_move_forward_in_every_real_log(logs_dir: Path) -> None:
    engines = {"vllm": "vllm", "llamacpp": "llama.cpp", "sglang": "sglang"}
    for path in sorted(logs_dir.glob("*.log")):
        engine = engines[path.name.split("-")[0]]
        lines = path.read_bytes().splitlines(keepends=True)
        step = max(1, len(lines) // 40)
        seen = [phase_after(lines, n, engine) for n in range(1, len(lines) + 1, step)]
        final = phase_after(lines, len(lines), engine)
        assert final in (READY, FAILED), path.name
        order = [BOOT_PHASES.index(p) for p in seen if p != FAILED]
        assert order == sorted(order), (path.name, seen)

"""Shared pieces of the boot-log parser tests.

* where the real boot logs are (shared fixtures, never copied into the repository):
  ``<repo>/../shared/fixtures/boot-logs`` or ``$SERVEFLEET_FIXTURES`` (the fixtures folder
  or the boot-logs folder itself); tests that need them skip with a reason when absent;
* ``manifest_entry``: parametrizes a test over every log of MANIFEST.json;
* ``lines``: builders of log lines that follow the engines' own format strings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.shared_data import shared_missing

REPO = Path(__file__).resolve().parents[3]
SKIP_REASON = ("shared boot-log fixtures not found (../shared/fixtures/boot-logs or "
               "$SERVEFLEET_FIXTURES)")


def boot_logs_dir() -> Path | None:
    """The folder holding MANIFEST.json and the logs, or None."""
    override = os.environ.get("SERVEFLEET_FIXTURES")
    if override:
        candidates = [Path(override) / "boot-logs", Path(override)]
    else:
        candidates = [REPO.parent / "shared" / "fixtures" / "boot-logs"]
    for candidate in candidates:
        if (candidate / "MANIFEST.json").is_file():
            return candidate
    return None


@pytest.fixture
def logs_dir() -> Path:
    """The real boot logs; skips when the shared fixtures are not checked out."""
    found = boot_logs_dir()
    if found is None:
        shared_missing(SKIP_REASON)
    return found


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``manifest_entry`` (a MANIFEST.json log entry plus its ``path``)."""
    if "manifest_entry" not in metafunc.fixturenames:
        return
    folder = boot_logs_dir()
    if folder is None:
        metafunc.parametrize("manifest_entry", [pytest.param(None, id="no-fixtures")],
                             indirect=True)
        return
    entries: list[dict[str, Any]] = json.loads(
        (folder / "MANIFEST.json").read_text(encoding="utf-8"))["logs"]
    metafunc.parametrize("manifest_entry", [
        pytest.param({**entry, "path": folder / entry["file"]}, id=entry["file"])
        for entry in entries
    ], indirect=True)


@pytest.fixture
def manifest_entry(request: pytest.FixtureRequest) -> dict[str, Any]:
    """One MANIFEST.json entry; without the shared fixtures, fails (CI) or skips."""
    if request.param is None:
        shared_missing(SKIP_REASON)
    entry: dict[str, Any] = request.param
    return entry


class Lines:
    """Log-line builders (vLLM's logger format, Python's traceback printer)."""

    @staticmethod
    def v1(msg: str, *, level: str = "INFO", process: str = "EngineCore pid=96",
           source: str = "core.py:100") -> str:
        """A vLLM V1 line: ``(proc) LEVEL MM-DD HH:MM:SS [file.py:NNN] msg``."""
        prefix = f"({process}) " if process else ""
        return f"{prefix}{level} 06-07 13:28:13 [{source}] {msg}\n"

    @staticmethod
    def v0(msg: str, *, level: str = "INFO", source: str = "llm_engine.py:184") -> str:
        """A vLLM V0 (0.5.x) line: no brackets around the file."""
        return f"{level} 04-28 16:55:11 {source}] {msg}\n"

    @staticmethod
    def api(msg: str, *, level: str = "INFO", source: str = "api_server.py:600") -> str:
        """A line of vLLM's API server process."""
        return Lines.v1(msg, level=level, process="APIServer pid=1", source=source)

    @staticmethod
    def raw(msg: str, process: str = "EngineCore pid=96") -> str:
        """A raw stderr line (Python's traceback printer) with vLLM's process tag."""
        return f"({process}) {msg}\n" if process else f"{msg}\n"

    @staticmethod
    def engine_config(*, version: str = "0.21.0", spec: str = "None", extra: str = "") -> str:
        """The ``Initializing a V1 LLM engine`` config dump (shortened)."""
        return Lines.v1(f"Initializing a V1 LLM engine (v{version}) with config: model='m', "
                        f"speculative_config={spec}, tokenizer='m', enforce_eager=False{extra}")

    @staticmethod
    def traceback(frames: list[str], exception: str, *, process: str = "EngineCore pid=96",
                  level: str | None = None) -> str:
        """A traceback as Python prints it (raw), or logged line by line at ``level``."""
        body = ["Traceback (most recent call last):"]
        for func in frames:
            body += [f'  File "/venv/lib/python3.12/site-packages/x.py", line 10, in {func}',
                     "    call()"]
        body.append(exception)
        if level is None:
            return "".join(Lines.raw(item, process) for item in body)
        return "".join(Lines.v1(item, level=level, process=process) for item in body)


@pytest.fixture
def lines() -> type[Lines]:
    """The line builders."""
    return Lines

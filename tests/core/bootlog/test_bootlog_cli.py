"""``servefleet logs parse`` through click's CliRunner, and the rule patterns' grep syntax."""

# The logs below are verbatim engine output; their lines are as long as the engines make them.
# ruff: noqa: E501

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servefleet.cli.logs import logs_group
from servefleet.core.bootlog import CONTRACT_KEYS
from servefleet.core.bootlog.parser import ENGINES
from servefleet.core.errors import BootLogError
from tests.conftest import require_program

LLAMA_LOG = """\
build: 8179 (ecbcb7ea9) with Clang 19.1.5 for Windows x86_64
main: loading model
llama_model_load_from_file_impl: using device Vulkan1 (NVIDIA GeForce RTX 3060 Laptop GPU) (0000:01:00.0) - 5223 MiB free
load_tensors: offloaded 35/37 layers to GPU
llama_context: n_seq_max     = 4
llama_context: n_ctx         = 2048
llama_context: flash_attn    = auto
llama_kv_cache:        CPU KV buffer size =     4.00 MiB
llama_kv_cache:    Vulkan1 KV buffer size =    68.00 MiB
llama_kv_cache: size =   72.00 MiB (  2048 cells,  36 layers,  4/1 seqs), K (f16):   36.00 MiB, V (f16):   36.00 MiB
sched_reserve: Flash Attention was auto, set to enabled
main: model loaded
main: server is listening on http://127.0.0.1:8080
"""


def test_parse_json_prints_the_contract(tmp_path: Path) -> None:
    log = tmp_path / "llama-server.log"
    log.write_text(LLAMA_LOG)
    result = CliRunner().invoke(logs_group, ["parse", str(log), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert list(out) == [*CONTRACT_KEYS, "extra"]
    assert out["engine"] == "llama.cpp" and out["engine_version"] == "8179 (ecbcb7ea9)"
    assert out["outcome"] == "ready" and out["failure_reason"] is None
    assert out["kv_cache_mib"] == 72.0 and out["n_ctx"] == 2048 and out["n_parallel"] == 4
    assert out["gpu_layers_offloaded"] == "35/37" and out["flash_attn"] is True
    assert out["device_name"] == "NVIDIA GeForce RTX 3060 Laptop GPU"
    assert out["kv_cache_tokens"] is None and out["cudagraph_mode"] is None
    assert out["extra"]["flash_attn_setting"] == "auto -> enabled"
    assert out["extra"]["evidence"]["outcome"] == [
        {"line": 13, "text": "main: server is listening on http://127.0.0.1:8080"}]


def test_parse_table_and_stdin(tmp_path: Path) -> None:
    result = CliRunner().invoke(logs_group, ["parse", "-"], input=LLAMA_LOG)
    assert result.exit_code == 0, result.output
    assert "llama.cpp 8179 (ecbcb7ea9) — ready" in result.output
    assert re.search(r"kv_cache_mib\s+72\s+10", result.output)
    assert "lines that decide the outcome:" in result.output


def test_forced_engine_and_unreadable_file(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(LLAMA_LOG)
    out = json.loads(CliRunner().invoke(logs_group, ["parse", str(log), "--json",
                                                     "--engine", "vllm"]).output)
    assert out["engine"] == "vllm" and out["kv_cache_mib"] is None
    result = CliRunner().invoke(logs_group, ["parse", str(tmp_path / "missing.log")])
    assert isinstance(result.exception, BootLogError)
    assert "cannot read the log" in str(result.exception)
    bad = CliRunner().invoke(logs_group, ["parse", str(log), "--engine", "tgi"])
    assert bad.exit_code == 2


_PYTHON_ONLY = re.compile(r"\\[dwsDWSbB]|\(\?|[*+?}]\?")


def _all_patterns() -> list[Any]:
    return [pytest.param(p, id=f"{name}:{rule.anchor}") for name, (_s, rules) in ENGINES.items()
            for rule in rules for p in rule.patterns]


@pytest.mark.parametrize("pattern", _all_patterns())
def test_rule_patterns_are_plain_ere(pattern: str) -> None:
    """The benchmark hands the rules' patterns to ``grep -E``: they must mean the same in
    Python and POSIX ERE (no \\d, \\w, \\s, no (?...) groups, no lazy quantifiers)."""
    assert _PYTHON_ONLY.search(pattern) is None
    re.compile(pattern)


def test_grep_accepts_every_pattern(tmp_path: Path) -> None:
    grep = require_program("grep")
    patterns = sorted({p for _n, (_s, rules) in ENGINES.items() for r in rules
                       for p in r.patterns})
    pattern_file = tmp_path / "patterns"
    pattern_file.write_text("\n".join(patterns) + "\n")
    log = tmp_path / "log"
    log.write_text(LLAMA_LOG)
    done = subprocess.run([grep, "-E", "-c", "-f", str(pattern_file), str(log)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 10

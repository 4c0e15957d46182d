"""Streaming and the hazards of real log files: chunks that split lines and characters,
ANSI colours, docker and process prefixes, carriage returns, hard-wrapped lines, invalid
UTF-8, logs that stop half-way, and memory that must not grow with the log."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from servefleet.core.bootlog import BootLogParser, parse_bytes, parse_file, parse_text


def boot(lines: Any) -> str:
    """A compact vLLM 0.25-style boot, ready at the end."""
    return (
        lines.api(" ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.25.1", source="api_utils.py:339")
        + lines.api("Resolved architecture: Qwen3_5MoeForConditionalGeneration",
                    source="model.py:619")
        + lines.engine_config(version="0.25.1", extra=", compilation_config={'cudagraph_mode': "
                              "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}")
        + lines.v1("Using FLASH_ATTN attention backend out of potential backends: "
                   "['FLASH_ATTN', 'FLASHINFER'].", source="cuda.py:476")
        + lines.v1("Loading weights took 107.31 seconds", source="default_loader.py:430")
        + lines.v1("Model loading took 23.45 GiB memory and 125.681271 seconds")
        + lines.v1("Available KV cache memory: 74.22 GiB", source="gpu_worker.py:538")
        + lines.v1("GPU KV cache size: 3,366,051 tokens", source="kv_cache_utils.py:2146")
        + lines.v1("Maximum concurrency for 262,144 tokens per request: 12.84x",
                   source="kv_cache_utils.py:2147")
        + "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|  | 0/33\r"
        + "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##| 33/33\n"
        + lines.v1("Graph capturing finished in 6 secs, took 0.73 GiB")
        + lines.v1("init engine (profile, create kv cache, warmup model) took 755.17 s "
                   "(compilation: 40.93 s)", source="core.py:337")
        + lines.api("Supported tasks: ['generate']")
        + "(APIServer pid=1) INFO:     Application startup complete.\n"
    )


def contract(facts: Any) -> dict[str, Any]:
    out = facts.to_json_dict()
    return {k: v for k, v in out.items() if k != "extra"} | {
        "extra": {k: v for k, v in out["extra"].items() if k != "evidence"},
        "evidence_lines": {k: [e["line"] for e in v] for k, v in out["extra"]["evidence"].items()},
    }


def feed_in_chunks(data: bytes, sizes: list[int]) -> Any:
    parser = BootLogParser()
    at, index = 0, 0
    while at < len(data):
        size = sizes[index % len(sizes)]
        parser.feed(data[at:at + size])
        at += size
        index += 1
    return parser.close()


def test_boot_facts(lines: Any) -> None:
    facts = parse_text(boot(lines))
    assert (facts.engine, facts.engine_version, facts.outcome) == ("vllm", "0.25.1", "ready")
    assert facts.kv_cache_tokens == 3366051 and facts.cudagraph_mode == "FULL_AND_PIECEWISE"


def test_byte_by_byte_and_random_chunks_give_the_same_facts(lines: Any) -> None:
    data = boot(lines).encode()
    whole = contract(parse_bytes(data))
    assert contract(feed_in_chunks(data, [1])) == whole
    rng = random.Random(7)
    for _ in range(20):
        assert contract(feed_in_chunks(data, [rng.randint(1, 300) for _ in range(50)])) == whole


def test_real_logs_in_random_chunks(logs_dir: Path) -> None:
    rng = random.Random(11)
    for path in sorted(logs_dir.glob("*.log")):
        data = path.read_bytes()
        sizes = [rng.randint(1, 8192) for _ in range(64)]
        assert contract(feed_in_chunks(data, sizes)) == contract(parse_file(path)), path.name


def test_facts_at_any_time_and_early_stop(lines: Any) -> None:
    text = boot(lines).encode()
    parser = BootLogParser()
    fed = b""
    for raw in text.splitlines(keepends=True):
        assert not parser.done
        parser.feed(raw)
        fed += raw
        if parser.done:
            break
    assert fed == text  # ready exactly on the last line
    snapshot = parser.facts()
    assert snapshot.outcome == "ready" and snapshot.kv_cache_tokens == 3366051
    partial = BootLogParser()
    partial.feed(text[: text.index(b"GPU KV cache size")])
    assert partial.facts().kv_cache_tokens is None
    assert partial.facts().weights_load_seconds == 107.31
    assert partial.outcome == "incomplete"


def test_ansi_docker_and_timestamp_prefixes(lines: Any) -> None:
    plain = boot(lines)
    decorated = "".join(
        f"vllm-qwen-1  | 2026-06-07T13:19:24.123456789Z {line}"
        .replace("(APIServer pid=1)", "\x1b[1;36m(APIServer pid=1)\x1b[0;0m")
        .replace("(EngineCore pid=96)", "\x1b[0;36m(EngineCore pid=96)\x1b[0;0m")
        for line in plain.splitlines(keepends=True)
    )
    got, want = contract(parse_text(decorated)), contract(parse_text(plain))
    assert got == want
    evidence = parse_text(decorated).evidence["kv_cache_tokens"][0].text
    assert evidence.startswith("(EngineCore pid=96) INFO")


def test_ray_nested_prefixes_and_repeat_suffix(lines: Any) -> None:
    text = ("\x1b[1;36m(EngineCore_0 pid=1159)\x1b[0;0m \x1b[36m(RayWorkerWrapper pid=343, "
            "ip=10.42.9.224)\x1b[0m INFO 09-10 23:47:57 [default_loader.py:262] Loading "
            "weights took 1226.39 seconds\x1b[32m [repeated 2x across cluster]\x1b[0m\n")
    facts = parse_text(lines.engine_config() + text)
    assert facts.weights_load_seconds == 1226.39
    assert facts.evidence["weights_load_seconds"][0].text.endswith("1226.39 seconds")


def test_carriage_returns_split_lines_but_line_numbers_count_newlines(lines: Any) -> None:
    text = (lines.engine_config()
            + "Loading safetensors checkpoint shards:  50% | 1/2\r"
            + "Loading safetensors checkpoint shards: 100% | 2/2\r\n"
            + "\r\n"
            + lines.v1("Loading weights took 4.45 seconds").replace("\n", "\r\n"))
    facts = parse_text(text)
    assert facts.weights_load_seconds == 4.45
    assert facts.evidence["weights_load_seconds"][0].line == 4


def test_hard_wrapped_lines_are_joined(lines: Any) -> None:
    line = lines.v1("Maximum concurrency for 16,384 tokens per request: 28.37x")
    cut = line.index("per re") + 6
    wrapped = lines.engine_config() + line[:cut] + "\n" + line[cut:]
    assert parse_text(wrapped).max_concurrency == 28.37
    # The same wrap falling on a feed boundary.
    split_at = len((lines.engine_config() + line[:cut] + "\n").encode())
    data = wrapped.encode()
    assert feed_in_chunks(data, [split_at, len(data)]).max_concurrency == 28.37
    # A following line that starts a new record is not glued on.
    broken = lines.engine_config() + line[:cut] + "\n" + lines.v1("Loading weights took 1 s")
    assert parse_text(broken).max_concurrency is None


def test_invalid_utf8_and_split_characters(lines: Any) -> None:
    data = (boot(lines).encode()
            .replace(b"Loading weights", "Lädt → Loading weights".encode(), 0)
            + b"slot update_slots: token '\xe4\xbd' \xff\xfe truncated\n")
    whole = contract(parse_bytes(data))
    assert whole["outcome"] == "ready"
    assert contract(feed_in_chunks(data, [3, 5, 7])) == whole
    mixed = b"\xe4\xbd\xa0\xff\n" + boot(lines).encode()
    assert parse_bytes(mixed).kv_cache_tokens == 3366051


def test_unterminated_last_line_is_parsed_at_close(lines: Any) -> None:
    text = boot(lines).rstrip("\n")
    parser = BootLogParser()
    parser.feed(text)
    assert parser.outcome == "incomplete"  # the last line may still grow
    assert parser.close().outcome == "ready"


def test_lines_before_the_engine_is_known_are_replayed() -> None:
    text = ("  Device 0: NVIDIA GeForce RTX 5080, compute capability 12.0, VMM: yes\n"
            "load_tensors: offloaded 48/49 layers to GPU\n")
    facts = parse_text(text)
    assert facts.engine == "llama.cpp"
    assert facts.device_name == "NVIDIA GeForce RTX 5080"


def test_unknown_log_and_forced_engine(lines: Any) -> None:
    unknown = parse_text("hello\nworld\n")
    assert (unknown.engine, unknown.outcome, unknown.extra) == (None, "incomplete", None)
    forced = parse_text(lines.v1("GPU KV cache size: 1,000 tokens", source="x.py:1"), "vllm")
    assert forced.engine == "vllm" and forced.kv_cache_tokens == 1000
    with pytest.raises(ValueError, match="engine must be one of"):
        BootLogParser("tgi")


def test_memory_stays_flat_while_streaming(lines: Any) -> None:
    """Peak memory of feeding 12 MiB in 64 KiB chunks (with a 3 MiB line that never ends
    in the middle) stays a small constant, far below the input size."""
    noise = (b"(APIServer pid=1) INFO:     127.0.0.1:5000 - \"POST /v1/chat/completions "
             b"HTTP/1.1\" 200 OK\n")
    chunk = noise * (65536 // len(noise))
    parser = BootLogParser()
    parser.feed(boot(lines))
    tracemalloc.start()
    try:
        for index in range(192):
            parser.feed(chunk)
            if index == 96:
                for _ in range(48):
                    parser.feed(b"x" * 65536)   # one 3 MiB line without a terminator
                parser.feed(b"\n")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak
    assert parser.facts().outcome == "ready"


def test_feed_lines_without_terminators(lines: Any) -> None:
    parser = BootLogParser()
    parser.feed_lines(line for line in boot(lines).splitlines())
    assert parser.done and parser.facts().kv_cache_tokens == 3366051
    assert parser.engine == "vllm"


def test_serving_phase_searches_few_anchors() -> None:
    """Once ready, a log is request traffic: the scanner looks for a handful of literals
    (each costs one bytes.find pass per block), not for every boot message or "Error"."""
    from servefleet.core.bootlog.parser import _COMPILED
    from servefleet.core.bootlog.rules import BOOT, SERVING

    for name, compiled in _COMPILED.items():
        serving, boot = compiled.anchors[SERVING], compiled.anchors[BOOT]
        assert len(serving) <= 8, (name, serving)
        assert serving.set <= boot.set, name  # becoming ready never needs a rescan
        assert b"Error" not in serving.set

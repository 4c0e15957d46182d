"""Boot-log parser throughput and memory, against ``grep -E`` with the same patterns.

Generates logs from real-format vLLM lines (boot messages, uvicorn access lines, periodic
stats, speculative-decoding metrics, request-level errors with tracebacks, tqdm bars with
carriage returns, ANSI-coloured process tags) in two shapes:

* ``steady``: one boot, then request traffic (per ~10 s stats interval: ~50 request lines,
  the stats line, the speculative-decoding metrics line; a failed request with its
  traceback every fifth interval) - what a log that has been followed for a while looks
  like; the parser switches to its small post-readiness anchor set;
* ``dense``: boot messages repeated without a ready line, each followed by one interval of
  traffic - the worst case, every anchor stays active and a third of the lines are
  boot messages.

For each shape it times :func:`parse_file` and ``grep -E -c -f PATTERNS`` (``-c`` so that
grep reads the whole file; the patterns are every regex of the vLLM rule set, the same ones
the parser applies behind its anchors) on the same 100 MB file in the same run, best of
three. grep runs twice: in the environment's locale (a UTF-8 locale makes GNU grep much
slower on these patterns) and with ``LC_ALL=C`` (the stricter baseline). Throughput is MB
per CPU second (user + system of the parser process / of the grep child), because on a
shared machine wall time mostly measures the neighbours; wall-time figures are printed
beside. Then the peak memory traced while parsing 25, 50 and 100 MB, which should not grow
with the file.

Run: ``python bench/bench_bootlog.py [--mb 100] [--runs 3] [--keep DIR]`` (the memory
figures are taken at a quarter, half and all of ``--mb``; smallest run: ``--mb 4 --runs 1``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

from servefleet.core.bootlog import parse_file
from servefleet.core.bootlog.parser import ENGINES

MB = 1_000_000
API = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m"
CORE = "\x1b[0;36m(EngineCore_DP0 pid=165)\x1b[0;0m"


def _v(process: str, msg: str, level: str = "INFO", source: str = "core.py:100") -> str:
    return f"{process} {level} 06-07 13:28:13 [{source}] {msg}\n"


BOOT = "".join([
    _v(API, "vLLM API server version 0.13.0+faa43dbf.nv26.01", source="api_server.py:1354"),
    _v(API, "non-default args: {'model_tag': 'm', 'host': '0.0.0.0', 'max_model_len': 8192}",
       source="utils.py:253"),
    _v(API, "Resolved architecture: GptOssForCausalLM", source="model.py:514"),
    _v(API, "Using max model len 8192", source="model.py:1661"),
    _v(CORE, "Initializing a V1 LLM engine (v0.13.0+faa43dbf.nv26.01) with config: model='m', "
             "speculative_config=None, tokenizer='m', enforce_eager=False, compilation_config="
             "{'level': 3, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}"),
    _v(CORE, "Using TRITON_ATTN attention backend out of potential backends: ('TRITON_ATTN',)",
       source="cuda.py:351"),
    "Loading safetensors checkpoint shards:  33% Completed | 1/3 [00:00<00:01,  1.42it/s]\r"
    "Loading safetensors checkpoint shards: 100% Completed | 3/3 [00:02<00:00,  1.34it/s]\n",
    _v(CORE, "Loading weights took 2.36 seconds", source="default_loader.py:308"),
    _v(CORE, "Model loading took 13.7193 GiB memory and 26.704744 seconds",
       source="gpu_model_runner.py:3659"),
    _v(CORE, "Available KV cache memory: 12.94 GiB", source="gpu_worker.py:375"),
    _v(CORE, "GPU KV cache size: 282,624 tokens", source="kv_cache_utils.py:1291"),
    _v(CORE, "Maximum concurrency for 8,192 tokens per request: 54.44x",
       source="kv_cache_utils.py:1296"),
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  50%|#####     | 41/83\r"
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 83/83\n",
    "Capturing CUDA graphs (decode, FULL): 100%|##########| 35/35 [00:09<00:00,  3.57it/s]\n",
    _v(CORE, "Graph capturing finished in 17 secs, took 0.86 GiB",
       source="gpu_model_runner.py:4587"),
    _v(CORE, "init engine (profile, create kv cache, warmup model) took 72.48 seconds",
       source="core.py:259"),
    _v(API, "Supported tasks: ['generate']", source="api_server.py:1102"),
])
READY = f"{API} INFO:     Application startup complete.\n"
_ACCESS = f'{API} INFO:     172.17.0.1:{{port}} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
_REQUEST = _v(API, "Received request chatcmpl-{rid}: prompt: '<|im_start|>user\\nSolve 27x36."
                   "<|im_end|>', params: SamplingParams(n=1, temperature=0.6, top_p=0.95, "
                   "max_tokens=2048)", source="logger.py:39")
_ADDED = _v(API, "Added request chatcmpl-{rid}.", source="async_llm.py:252")
_STATS = (
    _v(API, "Engine 000: Avg prompt throughput: 231.0 tokens/s, Avg generation throughput: "
            "22.6 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.6%, "
            "Prefix cache hit rate: 0.0%", source="loggers.py:271")
    + _v(API, "SpecDecoding metrics: Mean acceptance length: 3.43, Accepted throughput: 0.09 "
              "tokens/s, Drafted throughput: 0.11 tokens/s, Accepted: 85 tokens, Drafted: 105 "
              "tokens, Per-position acceptance rate: 0.886, 0.771, 0.771, Avg Draft "
              "acceptance rate: 81.0%", source="metrics.py:120")
)
_REQUEST_ERROR = (
    _v(API, "Error with model object='error' message='The model `x` does not exist.' "
            "type='NotFoundError' param=None code=404", level="ERROR",
       source="serving_chat.py:136")
    + f'{API} INFO:     172.17.0.1:50000 - "POST /v1/chat/completions HTTP/1.1" 404 Not Found\n'
    + _v(API, "Error in preprocessing prompt inputs", level="ERROR", source="serving_chat.py:200")
    + _v(API, "Traceback (most recent call last):", level="ERROR", source="serving_chat.py:200")
    + _v(API, '  File "/usr/lib/python3.12/site-packages/vllm/entrypoints/openai/serving_chat.py"'
              ", line 196, in create_chat_completion", level="ERROR",
         source="serving_chat.py:200")
    + _v(API, "    request_prompts, engine_prompts = await self._preprocess_chat(", level="ERROR",
         source="serving_chat.py:200")
    + _v(API, "ValueError: This model's maximum context length is 8192 tokens. However, you "
              "requested 9000 tokens.", level="ERROR", source="serving_chat.py:200")
)


def _interval(index: int) -> str:
    """About ten seconds of a busy server: ~50 request lines, the periodic stats and
    speculative-decoding metrics, and a failed request every fifth interval."""
    lines = []
    for n in range(30):
        rid = f"{index:08x}{n:024x}"
        lines.append(_ACCESS.format(port=40000 + n))
        if n % 3 == 0:
            lines.append(_REQUEST.format(rid=rid) + _ADDED.format(rid=rid))
    lines.append(_STATS)
    if index % 5 == 0:
        lines.append(_REQUEST_ERROR)
    return "".join(lines)


NOISE = "".join(_interval(index) for index in range(10))


def write_log(path: Path, size: int, dense: bool) -> None:
    """Write about ``size`` bytes of real-format log lines."""
    unit = (BOOT + _interval(0)) if dense else NOISE
    with open(path, "w", encoding="utf-8") as handle:
        written = 0
        if not dense:
            handle.write(BOOT + READY)
            written = len(BOOT) + len(READY)
        block = unit * max(1, (1 << 20) // len(unit))
        while written < size:
            handle.write(block)
            written += len(block)


def grep_patterns() -> list[str]:
    """Every regex of the vLLM rule set, as the parser uses it."""
    _state, rules = ENGINES["vllm"]
    return sorted({pattern for rule in rules for pattern in rule.patterns})


def _cpu() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def best_of(runs: int, action: Callable[[], object]) -> tuple[float, float]:
    """Fastest (wall, CPU) seconds of ``runs`` calls. CPU time is what the comparison
    uses: on a shared machine, wall time mostly measures the neighbours."""
    wall = cpu = float("inf")
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), _cpu()
        action()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, _cpu() - start_cpu)
    return wall, cpu


def run_grep(path: Path, patterns: Path, locale: str | None) -> None:
    env = dict(os.environ)
    if locale:
        env["LC_ALL"] = locale
    done = subprocess.run(["grep", "-E", "-c", "-f", str(patterns), str(path)],
                          capture_output=True, env=env, check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"grep failed: {done.stderr.decode()}")


def peak_memory(path: Path) -> int:
    """Peak bytes traced by tracemalloc while parsing ``path``."""
    tracemalloc.start()
    try:
        parse_file(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the timed logs (MB)")
    parser.add_argument("--runs", type=int, default=3, help="timing runs (best is kept)")
    parser.add_argument("--keep", type=Path, help="write the logs here and keep them")
    args = parser.parse_args()
    if shutil.which("grep") is None:
        raise SystemExit("grep not found")
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench-bootlog-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        patterns = workdir / "patterns.ere"
        patterns.write_text("\n".join(grep_patterns()) + "\n")
        print(f"python {sys.version.split()[0]}, {len(grep_patterns())} patterns, "
              f"best of {args.runs}, load average {os.getloadavg()[0]:.1f}, {workdir}")
        print("throughput in MB per CPU second (per wall second in brackets); grep is run in "
              f"the environment's locale ({os.environ.get('LC_ALL') or os.environ.get('LANG')})"
              " and with LC_ALL=C")
        print(f"{'log':<8} {'MB':>5} {'parser':>14} {'grep':>14} {'grep C':>14} "
              f"{'parser/grep':>12} {'parser/grep C':>14}")
        for shape in ("steady", "dense"):
            path = workdir / f"{shape}-{args.mb}.log"
            write_log(path, args.mb * MB, dense=shape == "dense")
            size = path.stat().st_size / MB
            facts = parse_file(path)
            assert facts.kv_cache_tokens == 282624, facts
            parse = best_of(args.runs, partial(parse_file, path))
            grep = best_of(args.runs, partial(run_grep, path, patterns, None))
            grep_c = best_of(args.runs, partial(run_grep, path, patterns, "C"))

            def rate(times: tuple[float, float], mb: float = size) -> str:
                return f"{mb / times[1]:.0f} ({mb / times[0]:.0f})"

            print(f"{shape:<8} {size:>5.0f} {rate(parse):>14} {rate(grep):>14} "
                  f"{rate(grep_c):>14} {grep[1] / parse[1]:>12.2f} "
                  f"{grep_c[1] / parse[1]:>14.2f}   outcome={facts.outcome}")
        print("peak traced memory of parse_file (KiB):")
        sizes = sorted({max(1, args.mb // 4), max(1, args.mb // 2), args.mb})
        for shape in ("steady", "dense"):
            peaks = []
            for mb in sizes:
                path = workdir / f"{shape}-{mb}.log"
                if not path.exists():
                    write_log(path, mb * MB, dense=shape == "dense")
                peaks.append(f"{mb} MB: {peak_memory(path) / 1024:,.0f}")
            print(f"  {shape:<8} " + ", ".join(peaks))
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Run one scenario with one seed inside a container on the node (standard library only).

Sent on standard input to ``python3 -`` in the engine's own container, or in a vLLM image
beside it (either has ``vllm bench serve``, the real load generator), with one JSON
argument. While the load generator runs, a thread samples the engine's ``/metrics`` for
the KV usage gauges and keeps the peak; every two seconds a line ``@@bench-alive SECONDS``
tells the controller it is still going, and a write that fails (the controller went away:
``docker exec`` keeps a process running when its client dies) stops the load generator. At
the end one line: ``@@bench-result {json}`` with the figures, or ``@@bench-error reason``.
A run whose only failures are requests lost to a connection the engine had closed runs
again (at most :data:`RERUNS` times; the figures' ``reruns`` say so).
"""

import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ALIVE_SECONDS = 2.0
RERUNS = 2
"""Runs of one seed again after requests lost to a closed connection (see
:func:`dropped_connections`), at most."""
DROPPED = "ServerDisconnectedError"
SAMPLE_SECONDS = 0.5
KEPT = (
    "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput", "total_token_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
    "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms",
    "p99_e2el_ms", "spec_decode_acceptance_rate", "spec_decode_acceptance_length",
    "spec_decode_num_drafts", "max_concurrent_requests",
)


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def get(url, timeout=5.0):
    request = urllib.request.Request(url)
    key = os.environ.get("VLLM_API_KEY") or os.environ.get("LLAMA_API_KEY")
    if key:
        request.add_header("Authorization", "Bearer " + key)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=timeout) as response:
        return response.read().decode("utf-8", "replace")


class KvSampler(threading.Thread):
    """The highest value any of ``gauges`` reached on ``/metrics`` while it ran."""

    def __init__(self, url, gauges):
        super().__init__(daemon=True)
        self.url, self.gauges = url, tuple(gauges)
        self.peak = None
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            try:
                text = get(self.url)
            except Exception:
                text = ""
            for line in text.splitlines():
                name = line.split("{", 1)[0].split(" ", 1)[0]
                if name in self.gauges:
                    try:
                        value = float(line.rsplit(" ", 1)[1])
                    except (IndexError, ValueError):
                        continue
                    self.peak = value if self.peak is None else max(self.peak, value)
            self.stopped.wait(SAMPLE_SECONDS)


def served_model(base):
    """The engine's own answer to what it serves (its first ``/v1/models`` entry): the
    model name to ask for, and what it loaded (``root``), the tokenizer the load
    generator counts tokens with."""
    entries = json.loads(get(base + "/v1/models")).get("data") or []
    if not entries:
        raise ValueError("it serves no model")
    return entries[0]["id"], entries[0].get("root") or entries[0]["id"]


def argv_for(job, tokenizer, result_dir):
    argv = [
        job["vllm"], "bench", "serve", "--backend", job.get("backend", "openai"),
        "--endpoint", job.get("endpoint", "/v1/completions"),
        "--base-url", job["base_url"], "--model", job["model"], "--tokenizer", tokenizer,
        "--max-concurrency", str(job["concurrency"]), "--num-prompts", str(job["prompts"]),
        "--num-warmups", str(job["warmups"]), "--seed", str(job["seed"]),
        "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99", "--disable-tqdm", "--save-result",
        # Without --save-detailed the saved result drops its per-request "errors": a run
        # with failed requests would say how many failed but never why.
        "--save-detailed",
        "--result-dir", result_dir, "--result-filename", "result.json",
    ]
    if job.get("trace"):
        # A recorded request mix: each request leaves at its timestamp.
        trace_path = os.path.join(result_dir, "trace.jsonl")
        with open(trace_path, "wb") as handle:
            handle.write(gzip.decompress(base64.b64decode(job["trace"])))
        argv += ["--dataset-name", "timed_trace", "--dataset-path", trace_path,
                 "--timed-trace-sec-multiplier", str(job.get("time_scale", 1.0)),
                 "--timed-trace-chunk-hash-size", str(job.get("block_tokens", 16))]
    else:
        argv += ["--dataset-name", "random", "--random-input-len", str(job["input_len"]),
                 "--random-output-len", str(job["output_len"])]
    argv.append("--ignore-eos")
    return argv


def run_once(job, tokenizer, env):
    """One ``vllm bench serve`` run: (its saved result, the KV gauges' peak), or the exit
    status after an ``@@bench-error`` line."""
    sampler = KvSampler(job["base_url"] + "/metrics", job.get("kv_gauges", ()))
    sampler.start()
    with tempfile.TemporaryDirectory(prefix="servefleet-bench-") as folder:
        log_path = os.path.join(folder, "out.log")
        started = time.monotonic()
        with open(log_path, "wb") as log:
            child = subprocess.Popen(argv_for(job, tokenizer, folder), stdout=log,
                                     stderr=subprocess.STDOUT, env=env)
            try:
                while child.poll() is None:
                    try:
                        child.wait(ALIVE_SECONDS)
                    except subprocess.TimeoutExpired:
                        say(f"@@bench-alive {time.monotonic() - started:.0f}")
            except (BrokenPipeError, KeyboardInterrupt):
                child.terminate()
                child.wait()
                return 130
        sampler.stopped.set()
        sampler.join(timeout=5)
        with open(log_path, encoding="utf-8", errors="replace") as log:
            tail = log.read()[-3000:]
        result_path = os.path.join(folder, "result.json")
        if child.returncode != 0 or not os.path.exists(result_path):
            last = [line for line in tail.splitlines() if line.strip()][-8:]
            if job.get("trace") and "invalid choice" in tail and "timed_trace" in tail:
                say("@@bench-error this vLLM's `vllm bench serve` cannot replay a trace (no "
                    "timed_trace dataset: it came with vLLM PR #39795); bench the "
                    "scenarios without `replay` here, or use a newer image")
                return 1
            say("@@bench-error vllm bench serve exited with status "
                f"{child.returncode}: " + " | ".join(last))
            return 1
        with open(result_path, encoding="utf-8") as handle:
            return json.load(handle), sampler.peak


def request_errors(result):
    """The saved result's per-request errors, without the successful requests' empty
    ones."""
    return [e for e in result.get("errors") or [] if e]


def dropped_connections(result):
    """The errors of a run whose every failed request found its connection closed before
    any byte of an answer (aiohttp's ``ServerDisconnectedError``); none for any other run.

    llama-server (cpp-httplib) closes the connection after each streamed answer while its
    headers say ``Keep-Alive: timeout=5, max=100``; ``vllm bench serve`` keeps the
    connection in its pool and sends the next request on it at once. When the request
    leaves before the server's close arrives (a busy machine), it fails without having
    reached the engine. Any other error (an HTTP error, a refused connection, an answer
    cut off midway) is the engine's and stands."""
    errors = request_errors(result)
    if not result.get("failed") or len(errors) != result["failed"]:
        return []
    return errors if all(DROPPED in e for e in errors) else []


def main():
    job = json.loads(sys.argv[1])
    vllm = shutil.which("vllm")
    if vllm is None:
        say("@@bench-error no `vllm` command in this container: the load generator is "
            "vLLM's `vllm bench serve`")
        return 3
    job["vllm"] = vllm
    base = job["base_url"]
    try:
        job["model"], tokenizer = served_model(base)
    except Exception as error:
        say(f"@@bench-error the engine did not answer /v1/models at {base}: {error}")
        return 3
    # The container may name its own tokenizer (one baked into a load image, or a local
    # copy where the hub is out of reach); else the profile's, else the engine's answer.
    tokenizer = (os.environ.get("SERVEFLEET_BENCH_TOKENIZER") or job.get("tokenizer")
                 or tokenizer)
    env = dict(os.environ)
    key = env.get("VLLM_API_KEY") or env.get("LLAMA_API_KEY")
    if key and not env.get("OPENAI_API_KEY"):
        env["OPENAI_API_KEY"] = key  # what `vllm bench serve` sends as a bearer token
    if job.get("trace"):
        # The trace's prompt tokens are drawn from Python's hash() of each block: fixed by
        # the seed, the same seed replays the same prompts.
        env["PYTHONHASHSEED"] = str(job["seed"] % 2**32)
    reruns = []  # type: list[dict]
    while True:
        outcome = run_once(job, tokenizer, env)
        if isinstance(outcome, int):
            return outcome
        result, kv_peak = outcome
        dropped = dropped_connections(result)
        if not dropped or len(reruns) >= RERUNS:
            break
        # Figures with a request lost to a closed keep-alive connection measure the client's
        # pool, not the engine: the seed runs again, and the result says so.
        reruns.append({"failed": len(dropped), "error": dropped[0].strip().splitlines()[-1]})
    figures = {k: result[k] for k in KEPT if result.get(k) is not None}
    figures["errors"] = request_errors(result)[:3]
    figures["kv_peak"] = kv_peak
    if reruns:
        figures["reruns"] = reruns
    figures["model"] = job["model"]
    figures["tokenizer"] = tokenizer
    if job.get("texts"):
        figures["texts"] = result.get("generated_texts") or []
    say("@@bench-result " + json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Record real `vllm serve` boot logs on a GPU machine (the script that made this folder).

Usage: python3 record.py OUTDIR DEADLINE_S NAME [NAME ...]

Each NAME is a row of BOOTS, or tp2 (two ranks of one TP=2 engine, see tp2()). For
each row: start `vllm serve` with stdout and stderr to OUTDIR/NAME.log, poll GET /health
every 0.5 s until 200 or until the process exits, and if it became ready send the
requests of the row (responses to NAME.completion*.json), optionally wait for the
periodic stats line and read /metrics, then SIGTERM the server and wait for it to exit.
A boot is not started when less than its budget is left before DEADLINE_S (seconds
after this script started); OUTDIR/summary-*.json says what ran.
With REC_TAR set, OUTDIR is packed into that file after every boot.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

VLLM = "/tmp/site/bin/vllm"
MODEL = "/tmp/sf/models/qwen3-moe-tiny"
PORT = 18200

BASE_ENV = {
    "PYTHONUNBUFFERED": "1",
    "PYTHONPATH": "/tmp/site",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

COMMON = ["--served-model-name", "qwen36"]
PROMPT = "hello the model is a good"
REPEAT = "the cache the node the cache the node the cache the node the cache the node the"

# name: (args, extra env, budget_s, requests, wait for stats + /metrics)
BOOTS = {
    "default": ([*COMMON, "--max-model-len", "2048"], {}, 200, [PROMPT, REPEAT], True),
    "kv-fp8": (
        [*COMMON, "--max-model-len", "2048", "--kv-cache-dtype", "fp8"],
        {},
        170,
        [PROMPT],
        False,
    ),
    "spec-ngram": (
        [
            *COMMON,
            "--max-model-len",
            "2048",
            "--speculative-config",
            '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3}',
        ],
        {},
        190,
        [PROMPT, REPEAT],
        True,
    ),
    "eager": ([*COMMON, "--max-model-len", "2048", "--enforce-eager"], {}, 120, [PROMPT], False),
    "kv-nofit": (
        [*COMMON, "--max-model-len", "262144", "--kv-cache-memory-bytes", "67108864"],
        {},
        150,
        [],
        False,
    ),
    "bad-flag": ([*COMMON, "--max-model-len", "2048", "--no-such-flag"], {}, 40, [], False),
    "max-model-len-over": ([*COMMON, "--max-model-len", "1048576"], {}, 60, [], False),
    "gpu-util-tiny": (
        [*COMMON, "--max-model-len", "2048", "--gpu-memory-utilization", "0.01"],
        {},
        150,
        [],
        False,
    ),
}


def http(method: str, path: str, body: dict | None = None, timeout: float = 5.0):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def gpu_used() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except Exception as exc:
        return f"nvidia-smi failed: {exc}"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def boot(out: str, name: str) -> dict:
    args, extra, _budget, prompts, stats = BOOTS[name]
    argv = [VLLM, "serve", MODEL, *args, "--host", "127.0.0.1", "--port", str(PORT)]
    env = {**os.environ, **BASE_ENV, **extra}
    rec: dict = {
        "name": name,
        "argv": argv,
        "env_added": {**BASE_ENV, **extra},
        "gpu_before": gpu_used(),
    }
    t0 = time.monotonic()
    with open(os.path.join(out, f"{name}.log"), "wb") as log:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            process_group=0,
        )
    ready = False
    while time.monotonic() - t0 < 420:
        if proc.poll() is not None:
            break
        try:
            if http("GET", "/health", timeout=2)[0] == 200:
                ready = True
                break
        except Exception:
            pass
        time.sleep(0.5)
    rec["ready"] = ready
    rec["t_ready_s"] = round(time.monotonic() - t0, 1) if ready else None
    if ready:
        for i, prompt in enumerate(prompts):
            body = {"model": "qwen36", "prompt": prompt, "max_tokens": 24, "temperature": 0}
            try:
                status, data = http("POST", "/v1/completions", body, timeout=60)
                suffix = "" if i == 0 else f"-{i + 1}"
                with open(os.path.join(out, f"{name}.completion{suffix}.json"), "wb") as f:
                    f.write(data)
                rec.setdefault("completions", []).append({"prompt": prompt, "status": status})
            except Exception as exc:
                rec.setdefault("completions", []).append({"prompt": prompt, "error": repr(exc)})
        if stats:
            time.sleep(11)
            try:
                with open(os.path.join(out, f"{name}.metrics.txt"), "wb") as f:
                    f.write(http("GET", "/metrics")[1])
            except Exception as exc:
                rec["metrics_error"] = repr(exc)
        rec["gpu_while_ready"] = gpu_used()
        rec["t_sigterm_s"] = round(time.monotonic() - t0, 1)
        proc.send_signal(signal.SIGTERM)
    elif proc.poll() is None:
        rec["timed_out"] = True
        proc.send_signal(signal.SIGTERM)
    try:
        rec["rc"] = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rec["rc"] = proc.wait()
        rec["killed"] = True
    for _ in range(30):
        if not group_alive(proc.pid):
            break
        time.sleep(1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        rec["group_killed"] = True
    rec["t_total_s"] = round(time.monotonic() - t0, 1)
    rec["gpu_after"] = gpu_used()
    return rec


TP2_ARGS = [
    *COMMON,
    "--max-model-len",
    "2048",
    "--tensor-parallel-size",
    "2",
    "--distributed-executor-backend",
    "mp",
    "--nnodes",
    "2",
    "--master-addr",
    "127.0.0.1",
    "--master-port",
    "29501",
]
TP2_ENV = {"NCCL_DEBUG": "INFO", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}


def tp2(out: str) -> dict:
    """Two ranks of one TP=2 engine on one host, as two nodes: rank 0 serves (GPU 0),
    rank 1 runs headless (GPU 1); logs tp2-head.log and tp2-worker.log."""
    tail = ["--host", "127.0.0.1", "--port", str(PORT)]
    head_argv = [VLLM, "serve", MODEL, *TP2_ARGS, "--node-rank", "0", *tail]
    worker_argv = [VLLM, "serve", MODEL, *TP2_ARGS, "--node-rank", "1", "--headless", *tail]
    rec: dict = {
        "name": "tp2",
        "head_argv": head_argv,
        "worker_argv": worker_argv,
        "head_env_added": {**BASE_ENV, **TP2_ENV, "CUDA_VISIBLE_DEVICES": "0"},
        "worker_env_added": {**BASE_ENV, **TP2_ENV, "CUDA_VISIBLE_DEVICES": "1"},
        "gpu_before": gpu_used(),
    }
    t0 = time.monotonic()
    procs = {}
    for role, argv, dev in (("head", head_argv, "0"), ("worker", worker_argv, "1")):
        env = {**os.environ, **BASE_ENV, **TP2_ENV, "CUDA_VISIBLE_DEVICES": dev}
        with open(os.path.join(out, f"tp2-{role}.log"), "wb") as log:
            procs[role] = subprocess.Popen(
                argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                process_group=0,
            )
    head, worker = procs["head"], procs["worker"]
    ready = False
    while time.monotonic() - t0 < 360:
        if head.poll() is not None:
            break
        try:
            if http("GET", "/health", timeout=2)[0] == 200:
                ready = True
                break
        except Exception:
            pass
        time.sleep(0.5)
    rec["ready"] = ready
    rec["t_ready_s"] = round(time.monotonic() - t0, 1) if ready else None
    rec["worker_rc_at_ready"] = worker.poll()
    if ready:
        for i, prompt in enumerate([PROMPT, REPEAT]):
            body = {"model": "qwen36", "prompt": prompt, "max_tokens": 24, "temperature": 0}
            try:
                status, data = http("POST", "/v1/completions", body, timeout=60)
                suffix = "" if i == 0 else f"-{i + 1}"
                with open(os.path.join(out, f"tp2.completion{suffix}.json"), "wb") as f:
                    f.write(data)
                rec.setdefault("completions", []).append({"prompt": prompt, "status": status})
            except Exception as exc:
                rec.setdefault("completions", []).append({"prompt": prompt, "error": repr(exc)})
        time.sleep(11)
        try:
            with open(os.path.join(out, "tp2.metrics.txt"), "wb") as f:
                f.write(http("GET", "/metrics")[1])
        except Exception as exc:
            rec["metrics_error"] = repr(exc)
        rec["gpu_while_ready"] = gpu_used()
    rec["t_sigterm_head_s"] = round(time.monotonic() - t0, 1)
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
    for role, proc in (("head", head), ("worker", worker)):
        try:
            rec[f"{role}_rc"] = proc.wait(timeout=60 if role == "head" else 30)
        except subprocess.TimeoutExpired:
            if role == "worker":
                rec["worker_sigterm_s"] = round(time.monotonic() - t0, 1)
                proc.send_signal(signal.SIGTERM)
                try:
                    rec["worker_rc"] = proc.wait(timeout=30)
                    continue
                except subprocess.TimeoutExpired:
                    pass
            os.killpg(proc.pid, signal.SIGKILL)
            rec[f"{role}_rc"] = proc.wait()
            rec[f"{role}_killed"] = True
        rec[f"t_{role}_exit_s"] = round(time.monotonic() - t0, 1)
    for proc in (head, worker):
        for _ in range(20):
            if not group_alive(proc.pid):
                break
            time.sleep(1)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            rec["group_killed"] = True
    rec["t_total_s"] = round(time.monotonic() - t0, 1)
    rec["gpu_after"] = gpu_used()
    return rec


def main() -> None:
    out, deadline, names = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    start = time.monotonic()
    summary = []
    tag = "-".join(names)[:60]
    for name in names:
        left = deadline - (time.monotonic() - start)
        if name == "tp2":
            rec = tp2(out)
            summary.append(rec)
            print(json.dumps(rec), flush=True)
            save(out, tag, summary)
            continue
        if left < BOOTS[name][2]:
            summary.append({"name": name, "skipped": f"{left:.0f} s left"})
            continue
        rec = boot(out, name)
        summary.append(rec)
        print(json.dumps(rec), flush=True)
        save(out, tag, summary)
    save(out, tag, summary)


def save(out: str, tag: str, summary: list) -> None:
    """Write the summary and pack OUTDIR into $REC_TAR (brought back even if a later boot hangs)."""
    with open(os.path.join(out, f"summary-{tag}.json"), "w") as f:
        json.dump(summary, f, indent=1)
    if os.environ.get("REC_TAR"):
        subprocess.run(["tar", "-czf", os.environ["REC_TAR"], "-C", out, "."], check=False)


if __name__ == "__main__":
    main()

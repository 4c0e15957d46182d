#!/usr/bin/env python3
"""The watcher's read of one node, run there with ``python3 -I -S``: standard library only.

Reads a JSON spec on stdin::

    {"deployments": [{"name": "main", "port": 8000, "engine": "vllm",
                      "model": "served-name", "api_key": null}],
     "canary": true, "canary_timeout": 30, "http_timeout": 5}

and prints one JSON object: per deployment the container's state and restart count, the
HTTP status of ``/health``, the ``/metrics`` lines the watcher needs (nothing else leaves
the node, so the bytes stay bounded), the canary's result; for the node the nvidia-smi
power/utilisation/memory CSV and MemAvailable. Every failure is an ``errors`` line, never
a traceback: a node that answers always yields a sample.
"""

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

PROJECT_LABEL = "com.docker.compose.project=servefleet-"
INSPECT = ('{"status":{{json .State.Status}},"restart_count":{{json .RestartCount}},'
           '"started_at":{{json .State.StartedAt}}}')
KEPT = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total",
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc", "llamacpp:tokens_predicted_total",
        "llamacpp:prompt_tokens_total", "llamacpp:requests_processing",
        "llamacpp:requests_deferred", "llamacpp:kv_cache_usage_ratio")
MAX_METRICS_LINES = 64
GPU_QUERY = "index,power.draw,utilization.gpu,memory.used,memory.free"


def run(argv, timeout=10):
    """(exit status, stdout text); 127 when the program is missing."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 127, str(error)
    return done.returncode, done.stdout.decode("utf-8", "replace")


def http(url, timeout, data=None, api_key=None):
    """(status or None, body text, seconds, error or None)."""
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    request = urllib.request.Request(url, data=data, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body = answer.read(1 << 20).decode("utf-8", "replace")
            return answer.status, body, time.monotonic() - started, None
    except urllib.error.HTTPError as error:
        return error.code, "", time.monotonic() - started, None
    except (OSError, ValueError) as error:
        return None, "", time.monotonic() - started, str(getattr(error, "reason", error))


def container(name, errors):
    status, ids = run(["docker", "ps", "-aq", "--filter", "label=" + PROJECT_LABEL + name])
    if status != 0:
        errors.append("docker ps: " + ids.strip()[-200:])
        return {}
    ids = ids.split()
    if not ids:
        return {}
    status, out = run(["docker", "inspect", "--format", INSPECT, *ids])
    found = []
    for line in out.splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    # The running one when there is one, else the latest started.
    found.sort(key=lambda c: (c.get("status") == "running", c.get("started_at") or ""))
    return found[-1] if found else {}


def deployment(spec, options):
    errors: list[str] = []
    result: dict[str, Any] = {"errors": errors}
    result.update(container(spec["name"], errors))
    base = f"http://127.0.0.1:{int(spec['port'])}"
    key = spec.get("api_key")
    health, _, _, error = http(base + "/health", options["http_timeout"], api_key=key)
    result["health"] = health
    if error:
        errors.append("/health: " + error)
    status, body, _, error = http(base + "/metrics", options["http_timeout"], api_key=key)
    if status == 200:
        lines = [ln for ln in body.splitlines() if ln.startswith(KEPT)]
        result["metrics"] = "\n".join(lines[:MAX_METRICS_LINES]) + "\n"
    elif error:
        errors.append("/metrics: " + error)
    result["canary"] = "skipped"
    if options.get("canary") and health == 200 and spec.get("model"):
        payload = json.dumps({"model": spec["model"], "prompt": "ok", "max_tokens": 1,
                              "temperature": 0}).encode()
        status, _, seconds, error = http(base + "/v1/completions", options["canary_timeout"],
                                         data=payload, api_key=key)
        result["canary_seconds"] = round(seconds, 3)
        if status == 200:
            result["canary"] = "ok"
        elif error is not None and "timed out" in error:
            result["canary"] = "timeout"
        else:
            result["canary"] = "error"
            errors.append("canary: " + (error or f"HTTP {status}"))
    return result


def main():
    spec = json.loads(sys.stdin.read())
    out: dict[str, Any] = {"deployments": {}, "errors": []}
    for dep in spec["deployments"]:
        out["deployments"][dep["name"]] = deployment(dep, spec)
    status, csv = run(["nvidia-smi", "--query-gpu=" + GPU_QUERY,
                       "--format=csv,noheader,nounits"])
    if status != 0:
        # A driver (or the simulated tool) that does not know power.draw: the rest.
        status, csv = run(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,"
                           "memory.free", "--format=csv,noheader,nounits"])
    out["gpu_csv"] = csv if status == 0 else ""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    out["mem_available_bytes"] = int(line.split()[1]) * 1024
    except OSError as error:
        out["errors"].append(f"meminfo: {error}")
    sys.stdout.write(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""vLLM's HTTP side: OpenAI endpoints, health, metrics, periodic stats, runtime faults."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import chat
from .faults import current_faults
from .node import SimClock
from .prom import Family, render
from .vllm_boot import BootResult, tq_assert_message, tq_frames, tq_workspace_sizes
from .vllm_config import Resolved
from .vllm_log import API, CORE, VllmLog
from .vllm_versions import log_site

# Per-position acceptance of Qwen3.6's MTP head (reference fleet: 81.6 %, 63.5 %, …).
ACCEPT_POS0 = 0.8157
ACCEPT_DECAY = 0.7782
DECODE_TOKENS_PER_S = 55.0


# What an engine core that dies mid-run prints (an asynchronous CUDA fault).
CRASH_TRACE = (
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
    "line 1156, in run_busy_loop",
    "    self._process_engine_step()",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
    "line 1192, in _process_engine_step",
    "    outputs, model_executed = self.step_fn()",
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/"
    "cuda-runtime-api/group__CUDART__TYPES.html for more information.",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
)


@dataclass
class Counters:
    """Engine counters behind ``/metrics`` and the periodic stats lines."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests_ok: int = 0
    running: int = 0
    waiting: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    prefix_queries: int = 0
    prefix_hits: int = 0
    latencies: list[float] = field(default_factory=list)
    # Since the last stats line.
    window_prompt: int = 0
    window_gen: int = 0
    window_drafts: int = 0
    window_draft_tokens: int = 0
    window_accepted: list[int] = field(default_factory=list)


def _acceptance(pos: int) -> float:
    return ACCEPT_POS0 * ACCEPT_DECAY**pos


class VllmServer:
    """Serves one booted engine until it is stopped or dies."""

    def __init__(
        self, cfg: Resolved, boot: BootResult, log: VllmLog, clock: SimClock, sock: socket.socket
    ) -> None:
        self.cfg = cfg
        self.boot = boot
        self.log = log
        self.clock = clock
        self.sock = sock
        self.counters = Counters(
            accepted_per_pos=[0] * cfg.num_spec_tokens, window_accepted=[0] * cfg.num_spec_tokens
        )
        self.lock = threading.Lock()
        self.dead = False
        self.exit_code = 0
        self.stop_event = threading.Event()
        self.calls = 0
        self.started = time.time()
        self.httpd: ThreadingHTTPServer | None = None
        self._active_tokens = 0

    # --- lifecycle ------------------------------------------------------------------

    def serve(self) -> int:
        """Listen, print uvicorn's startup lines, serve until stopped; returns exit status."""
        server = _Server(self.sock, self)
        self.httpd = server
        pid = self.log.api_pid
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True, name="http"
        )
        thread.start()
        self.log.uvicorn(f"Started server process [{pid}]")
        self.log.uvicorn("Waiting for application startup.")
        self.log.uvicorn("Application startup complete.")
        threading.Thread(target=self._stats_loop, daemon=True, name="stats").start()
        threading.Thread(target=self._fault_loop, daemon=True, name="faults").start()
        self.stop_event.wait()
        server.shutdown()
        server.server_close()
        return self.exit_code

    def stop(self, code: int = 0) -> None:
        """Shut down (SIGTERM or engine death)."""
        self.exit_code = code
        self.stop_event.set()

    def shutdown_lines(self) -> None:
        """What a clean stop prints."""
        self.log.uvicorn("Shutting down")
        self.log.uvicorn("Waiting for application shutdown.")
        self.log.uvicorn("Application shutdown complete.")
        self.log.uvicorn(f"Finished server process [{self.log.api_pid}]")

    def die(self, exc_lines: list[str]) -> None:
        """The engine core died: its traceback, the API server's error, exit 1."""
        with self.lock:
            if self.dead:
                return
            self.dead = True
        site = log_site(self.cfg.version, "core_fatal")
        self.log.error_block(CORE, site, ["EngineCore encountered a fatal error.", *exc_lines])
        out_site = log_site(self.cfg.version, "output_handler")
        vdir = "/usr/local/lib/python3.12/dist-packages/vllm"
        self.log.error_block(
            API,
            out_site,
            [
                "AsyncLLM output_handler failed.",
                "Traceback (most recent call last):",
                f'  File "{vdir}/v1/engine/async_llm.py", line {int(out_site.split(":")[1]) - 45}, '
                "in output_handler",
                "    outputs = await engine_core.get_output_async()",
                "              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
                f'  File "{vdir}/v1/engine/core_client.py", line 998, in get_output_async',
                "    raise self._format_exception(outputs) from None",
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                "See stack "
                "trace (above) for the root cause.",
            ],
        )
        # The watchdog notices the dead engine and stops uvicorn (5 s in vLLM).
        time.sleep(min(5.0, max(0.5, 5.0 * max(self.clock.scale, 0.1))))
        self.shutdown_lines()
        self.stop(1)

    # --- runtime threads ------------------------------------------------------------

    def _fault_loop(self) -> None:
        crash_at: float | None = None
        while not self.stop_event.wait(1.0):
            faults = current_faults()
            if faults.has("crash_after_boot") and crash_at is None:
                crash_at = time.time() + faults.value("crash_after_boot", 3.0)
            if crash_at is not None and time.time() >= crash_at and not self.dead:
                self.die(list(CRASH_TRACE))
                return

    def _stats_loop(self) -> None:
        interval = float(os.environ.get("STANDIN_STATS_INTERVAL", "") or 10.0)
        idle_logged = True
        while not self.stop_event.wait(interval):
            if self.dead or self.cfg.disable_log_stats:
                continue
            with self.lock:
                c = self.counters
                busy = c.window_prompt or c.window_gen or c.running or c.waiting
                if not busy and idle_logged:
                    continue
                idle_logged = not busy
                prompt_rate = c.window_prompt / interval
                gen_rate = c.window_gen / interval
                usage = self.kv_usage() * 100
                line = (
                    f"Engine 000: Avg prompt throughput: {prompt_rate:.1f} tokens/s, Avg "
                    f"generation throughput: {gen_rate:.1f} tokens/s, Running: {c.running} reqs, "
                    f"Waiting: {c.waiting} reqs, GPU KV cache usage: {usage:.1f}%, Prefix cache "
                    f"hit rate: {self.prefix_hit_rate() * 100:.1f}%"
                )
                spec_line = None
                if self.cfg.num_spec_tokens and c.window_drafts:
                    accepted = sum(c.window_accepted)
                    per_pos = ", ".join(f"{a / c.window_drafts:.3f}" for a in c.window_accepted)
                    spec_line = (
                        f"SpecDecoding metrics: Mean acceptance length: "
                        f"{1 + accepted / c.window_drafts:.2f}, Accepted throughput: "
                        f"{accepted / interval:.2f} tokens/s, Drafted throughput: "
                        f"{c.window_draft_tokens / interval:.2f} tokens/s, Accepted: {accepted} "
                        f"tokens, Drafted: {c.window_draft_tokens} tokens, Per-position acceptance "
                        f"rate: {per_pos}, Avg Draft acceptance rate: "
                        f"{accepted / c.window_draft_tokens * 100:.1f}%"
                    )
                c.window_prompt = c.window_gen = c.window_drafts = c.window_draft_tokens = 0
                c.window_accepted = [0] * self.cfg.num_spec_tokens
            self.log.info(API, "stats", line)
            if spec_line:
                self.log.info(API, "specmetrics", spec_line)

    # --- figures ----------------------------------------------------------------------

    def kv_usage(self) -> float:
        """Fraction of the KV pool in use (running requests' tokens)."""
        pool = max(1, self.boot.kv_tokens)
        return min(1.0, self._active_tokens / pool)

    def prefix_hit_rate(self) -> float:
        """Prefix-cache hits / queries."""
        c = self.counters
        return c.prefix_hits / c.prefix_queries if c.prefix_queries else 0.0

    def metrics_text(self) -> str:
        """``/metrics`` with vLLM's metric names."""
        labels = {"engine": "0", "model_name": self.cfg.served_name}
        c = self.counters
        fams: list[Family] = []

        def gauge(name: str, text: str, value: float) -> None:
            fam = Family(name, "gauge", text)
            fam.add(dict(labels), value)
            fams.append(fam)

        def counter(
            name: str, text: str, value: float, extra: dict[str, str] | None = None
        ) -> None:
            fam = Family(name, "counter", text)
            fam.add({**labels, **(extra or {})}, value)
            fams.append(fam)

        with self.lock:
            gauge(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                c.running,
            )
            gauge(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                c.waiting,
            )
            gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                self.kv_usage(),
            )
            counter(
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                c.prefix_queries,
            )
            counter(
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                c.prefix_hits,
            )
            counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0)
            counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens)
            counter(
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                c.generation_tokens,
            )
            fam = Family(
                "vllm:request_success", "counter", "Count of successfully processed requests."
            )
            for reason, value in (("stop", c.requests_ok), ("length", 0), ("abort", 0)):
                fam.add({**labels, "finished_reason": reason}, value)
            fams.append(fam)
            hist = Family(
                "vllm:e2e_request_latency_seconds",
                "histogram",
                "Histogram of e2e request latency in seconds.",
            )
            for bound in (
                0.3,
                0.5,
                0.8,
                1.0,
                1.5,
                2.0,
                2.5,
                5.0,
                10.0,
                15.0,
                20.0,
                30.0,
                40.0,
                50.0,
                60.0,
                120.0,
                240.0,
                480.0,
                960.0,
                1920.0,
                7680.0,
                float("inf"),
            ):
                le = "+Inf" if bound == float("inf") else repr(bound)
                hist.add({**labels, "le": le}, sum(1 for x in c.latencies if x <= bound), "_bucket")
            hist.add(dict(labels), len(c.latencies), "_count")
            hist.add(dict(labels), sum(c.latencies), "_sum")
            fams.append(hist)
            info = Family(
                "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig"
            )
            info.add(
                {
                    "block_size": str(self.boot.figures.block_size),
                    "cache_dtype": self.cfg.kv_cache_dtype,
                    "calculate_kv_scales": "False",
                    "cpu_offload_gb": "0",
                    "enable_prefix_caching": str(self.cfg.enable_prefix_caching),
                    "engine": "0",
                    "gpu_memory_utilization": str(self.cfg.gpu_memory_utilization),
                    "is_attention_free": "False",
                    "mamba_cache_mode": ("align" if self.cfg.enable_prefix_caching else "none")
                    if self.cfg.model.is_hybrid
                    else "none",
                    "model_name": self.cfg.served_name,
                    "num_cpu_blocks": "None",
                    "num_gpu_blocks": str(self.boot.figures.num_blocks),
                    "num_gpu_blocks_override": "None",
                    "prefix_caching_hash_algo": "sha256",
                },
                1.0,
            )
            fams.append(info)
            if self.cfg.num_spec_tokens:
                counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", c.drafts)
                counter(
                    "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", c.draft_tokens
                )
                counter(
                    "vllm:spec_decode_num_accepted_tokens",
                    "Number of accepted tokens.",
                    sum(c.accepted_per_pos),
                )
                fam = Family(
                    "vllm:spec_decode_num_accepted_tokens_per_pos",
                    "counter",
                    "Accepted tokens per draft position.",
                )
                for pos, value in enumerate(c.accepted_per_pos):
                    fam.add({**labels, "position": str(pos)}, value)
                fams.append(fam)
        return render(fams)

    # --- requests -------------------------------------------------------------------

    def chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | list[dict[str, Any]]]:
        """One chat completion (or a stream of chunks)."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, _error("messages must be a non-empty list", "BadRequestError", 400)
        prompt = chat.prompt_text(messages)
        question = chat.last_user_text(messages)
        prompt_tokens = chat.count_tokens(prompt) + 12
        if prompt_tokens > self.cfg.max_model_len:
            return 400, _error(
                f"This model's maximum context length is {self.cfg.max_model_len} tokens. However, "
                f"your request has {prompt_tokens} input tokens. Please reduce the length of the "
                "input messages.",
                "BadRequestError",
                400,
            )
        if self.boot.tq_unpatched_continuation and prompt_tokens > self.cfg.max_num_batched_tokens:
            self._tq_crash(self.cfg.max_num_batched_tokens)
            return 500, _error(
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
                500,
            )
        kwargs = dict(self.cfg.default_chat_template_kwargs)
        if isinstance(body.get("chat_template_kwargs"), dict):
            kwargs.update(body["chat_template_kwargs"])
        thinking = bool(kwargs.get("enable_thinking", self.cfg.model.thinks_by_default))
        with self.lock:
            self.calls += 1
            call = self.calls
        # Speculative decoding makes identical greedy requests diverge now and then
        # (every third call here); without it the answer is stable.
        variant = call // 3 if (self.cfg.num_spec_tokens and call % 3 == 0) else 0
        text = chat.answer(question, variant)
        reasoning_text = chat.reasoning(question) if thinking else None
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        full = text if reasoning_text is None else reasoning_text + " " + text
        _, truncated = chat.truncate_tokens(
            full, max_tokens if isinstance(max_tokens, int) else None
        )
        if truncated and reasoning_text is not None:
            budget = int(max_tokens)  # type: ignore[arg-type]
            reasoning_text, _ = chat.truncate_tokens(reasoning_text, budget)
            text_out: str | None = None
            if chat.count_tokens(reasoning_text) < budget:
                text_out, _ = chat.truncate_tokens(text, budget - chat.count_tokens(reasoning_text))
        else:
            text_out, _ = chat.truncate_tokens(
                text, max_tokens if isinstance(max_tokens, int) else None
            )
        gen_tokens = chat.count_tokens((reasoning_text or "") + " " + (text_out or ""))
        content: str | None = text_out
        reasoning_field: str | None = None
        if reasoning_text is not None:
            if self.cfg.reasoning_parser:
                reasoning_field = reasoning_text
            else:
                content = f"<think>\n{reasoning_text}\n</think>\n\n{text_out or ''}"
        started = time.time()
        with self.lock:
            self.counters.running += 1
            self._active_tokens += prompt_tokens + gen_tokens
        try:
            self.clock.spend(gen_tokens / DECODE_TOKENS_PER_S)
        finally:
            with self.lock:
                self.counters.running -= 1
                self._active_tokens -= prompt_tokens + gen_tokens
        self._account(prompt_tokens, gen_tokens, time.time() - started)
        finish = "length" if truncated else "stop"
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning": reasoning_field,
        }
        if self.cfg.version < (0, 13, 0):
            message["reasoning_content"] = reasoning_field
        if body.get("stream"):
            return 200, self._chunks(
                rid,
                created,
                message,
                finish,
                prompt_tokens,
                gen_tokens,
                bool((body.get("stream_options") or {}).get("include_usage")),
            )
        return 200, {
            "id": rid,
            "object": "chat.completion",
            "created": created,
            "model": str(body.get("model") or self.cfg.served_name),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                    "token_ids": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + gen_tokens,
                "completion_tokens": gen_tokens,
                "prompt_tokens_details": None,
            },
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }

    def _chunks(
        self,
        rid: str,
        created: int,
        message: dict[str, Any],
        finish: str,
        prompt_tokens: int,
        gen_tokens: int,
        usage: bool,
    ) -> list[dict[str, Any]]:
        base = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": self.cfg.served_name,
        }
        chunks: list[dict[str, Any]] = [
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
        ]
        if message.get("reasoning"):
            for piece in str(message["reasoning"]).split(" "):
                chunks.append(
                    {
                        **base,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"reasoning": piece + " "},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                    }
                )
        words = (message.get("content") or "").split(" ")
        for i, piece in enumerate(words):
            text = piece if i == len(words) - 1 else piece + " "
            chunks.append(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": text},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                }
            )
        chunks.append(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": ""},
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                    }
                ],
            }
        )
        if usage:
            chunks.append(
                {
                    **base,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "total_tokens": prompt_tokens + gen_tokens,
                        "completion_tokens": gen_tokens,
                    },
                }
            )
        return chunks

    def _account(self, prompt_tokens: int, gen_tokens: int, seconds: float) -> None:
        with self.lock:
            c = self.counters
            c.prompt_tokens += prompt_tokens
            c.generation_tokens += gen_tokens
            c.window_prompt += prompt_tokens
            c.window_gen += gen_tokens
            c.requests_ok += 1
            c.latencies.append(
                seconds / max(self.clock.scale, 1e-9) if self.clock.scale else seconds
            )
            if self.cfg.enable_prefix_caching:
                c.prefix_queries += prompt_tokens
            k = self.cfg.num_spec_tokens
            if k:
                mean_extra = sum(_acceptance(p) for p in range(k))
                drafts = max(1, round(gen_tokens / (1 + mean_extra)))
                c.drafts += drafts
                c.window_drafts += drafts
                c.draft_tokens += drafts * k
                c.window_draft_tokens += drafts * k
                for pos in range(k):
                    got = round(drafts * _acceptance(pos))
                    c.accepted_per_pos[pos] += got
                    c.window_accepted[pos] += got

    def _tq_crash(self, cached_len: int) -> None:
        required, current = tq_workspace_sizes(self.cfg, cached_len)
        vdir = "/usr/local/lib/python3.12/dist-packages/vllm"
        frames = tq_frames(vdir, self.boot.tq_call_line)
        lines = ["Traceback (most recent call last):"]
        for path, line, func, code in frames:
            lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
        lines.append(tq_assert_message(self.boot.tq_call_line, required, current))
        threading.Thread(target=self.die, args=(lines,), daemon=True).start()


def _error(message: str, kind: str, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _as_completion(result: dict[str, Any]) -> dict[str, Any]:
    """A chat result reshaped as a ``/v1/completions`` answer."""
    choice = result["choices"][0]
    return {
        "id": result["id"].replace("chatcmpl-", "cmpl-"),
        "object": "text_completion",
        "created": result["created"],
        "model": result["model"],
        "choices": [
            {
                "index": 0,
                "text": choice["message"]["content"] or "",
                "logprobs": None,
                "finish_reason": choice["finish_reason"],
                "stop_reason": None,
                "prompt_logprobs": None,
            }
        ],
        "usage": result["usage"],
        "service_tier": None,
        "system_fingerprint": None,
        "kv_transfer_params": None,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, sock: socket.socket, app: VllmServer) -> None:
        self.app = app
        super().__init__(sock.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()[:2]
        self.socket.listen(128)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """Silence http.server's own logging (uvicorn's access line is printed instead)."""

    def _access(self, status: int) -> None:
        phrase = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            405: "Method Not Allowed",
            500: "Internal Server Error",
            503: "Service Unavailable",
        }.get(status, "")
        host, port = self.client_address[:2]
        self.server.app.log.uvicorn(
            f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {phrase}'
        )

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._access(status)

    def _json(self, status: int, obj: Any) -> None:
        # Compact, as FastAPI's JSONResponse writes it.
        self._send(status, json.dumps(obj, separators=(",", ":")).encode())

    def _authorized(self) -> bool:
        keys = self.server.app.cfg.api_keys
        path = self.path.split("?", 1)[0]
        if not keys or not path.startswith("/v1"):
            return True
        auth = self.headers.get("Authorization", "")
        return auth.startswith("Bearer ") and auth[len("Bearer ") :] in keys

    def do_GET(self) -> None:
        """GET endpoints."""
        app = self.server.app
        path = self.path.split("?", 1)[0]
        if not self._authorized():
            self._json(401, {"error": "Unauthorized"})
            return
        if path == "/health":
            faults = current_faults()
            self._send(503 if (app.dead or faults.has("health_fail")) else 200, b"")
        elif path == "/ping":
            self._send(503 if app.dead else 200, b"")
        elif path == "/version":
            self._json(200, {"version": app.cfg.version_str})
        elif path == "/load":
            self._json(200, {"server_load": app.counters.running})
        elif path == "/v1/models":
            now = int(app.started)
            data = [
                {
                    "id": name,
                    "object": "model",
                    "created": now,
                    "owned_by": "vllm",
                    "root": app.cfg.model_arg,
                    "parent": None,
                    "max_model_len": app.cfg.max_model_len,
                    "permission": [
                        {
                            "id": f"modelperm-{uuid.uuid5(uuid.NAMESPACE_DNS, name).hex}",
                            "object": "model_permission",
                            "created": now,
                            "allow_create_engine": False,
                            "allow_sampling": True,
                            "allow_logprobs": True,
                            "allow_search_indices": False,
                            "allow_view": True,
                            "allow_fine_tuning": False,
                            "organization": "*",
                            "group": None,
                            "is_blocking": False,
                        }
                    ],
                }
                for name in app.cfg.served_names
            ]
            self._json(200, {"object": "list", "data": data})
        elif path == "/metrics":
            self._send(200, app.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._json(404, {"detail": "Not Found"})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        """POST endpoints."""
        app = self.server.app
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorized():
            self._json(401, {"error": "Unauthorized"})
            return
        if app.dead:
            self._json(
                500,
                _error(
                    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                    "InternalServerError",
                    500,
                ),
            )
            return
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._json(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, _error("Invalid JSON body", "BadRequestError", 400))
            return
        if not isinstance(body, dict):
            self._json(400, _error("Invalid request body", "BadRequestError", 400))
            return
        if path == "/v1/completions":
            body = {
                **body,
                "messages": [{"role": "user", "content": str(body.get("prompt", ""))}],
                "chat_template_kwargs": {"enable_thinking": False},
            }
        status, result = app.chat(body)
        if path == "/v1/completions" and isinstance(result, dict) and "choices" in result:
            result = _as_completion(result)
        if isinstance(result, list):
            payload = (
                "".join(f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n" for chunk in result)
                + "data: [DONE]\n\n"
            )
            self._send(status, payload.encode(), "text/event-stream; charset=utf-8")
        else:
            self._json(status, result)

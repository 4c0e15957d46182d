"""``llama-server`` as the stand-in runs it: boot log, HTTP API, faults.

Log lines follow the classic (non-timestamped) format of llama.cpp builds b7xxx-b8xxx
(``function_name: message``). The HTTP server listens while the model loads, as
llama-server does, answering ``/health`` with 503 until the model is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from . import chat
from .faults import Faults, current_faults, read_faults
from .llamacpp_cli import ArgError, ServerArgs, parse
from .node import MIB, Node, SimClock
from .prom import Family, render

DEFAULT_BUILD = "b8680"
# Commit of the real b8680 build (from its published log); others get a stable fake.
KNOWN_COMMITS = {8680: "15f786e65", 8179: "ecbcb7ea9", 7780: "b1e3b6e0d"}
# Bits per weight of common GGUF quantizations (llama.cpp's file-type names).
QUANTS = {
    "IQ2_M": ("IQ2_M - 2.7 bpw", 2.66),
    "IQ3_M": ("IQ3_S mix - 3.66 bpw", 3.66),
    "Q3_K_M": ("Q3_K - Medium", 3.91),
    "Q4_0": ("Q4_0", 4.55),
    "Q4_K_S": ("Q4_K - Small", 4.67),
    "Q4_K_M": ("Q4_K - Medium", 4.88),
    "Q4_K_XL": ("Q4_K - Medium", 4.98),
    "MXFP4": ("MXFP4 MoE", 4.25),
    "Q5_K_M": ("Q5_K - Medium", 5.69),
    "Q6_K": ("Q6_K", 6.56),
    "Q8_0": ("Q8_0", 8.5),
    "BF16": ("BF16", 16.0),
    "F16": ("F16", 16.0),
}
CACHE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}


@dataclass(frozen=True)
class GgufModel:
    """What the stand-in assumes about a GGUF file, from its name."""

    path: str
    name: str
    arch: str
    params_b: float
    quant: str
    file_type: str
    bpw: float
    n_layer: int
    n_attn_layers: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_embd: int
    n_ctx_train: int
    n_vocab: int
    hybrid: bool
    n_expert: int

    @property
    def size_gib(self) -> float:
        """File size."""
        return self.params_b * 1e9 * self.bpw / 8 / (1 << 30)


def guess_model(path: str) -> GgufModel:
    """Guess the architecture and size of a GGUF from its file name."""
    base = os.path.basename(path.rstrip("/")) or path
    name = re.sub(r"\.gguf$", "", base, flags=re.I)
    upper = name.upper()
    quant = next((q for q in QUANTS if q in upper.replace("-", "_")), "Q4_K_M")
    file_type, bpw = QUANTS[quant]
    lower = name.lower()
    if re.search(r"qwen3\.[56].*35b.*a3b", lower):
        return GgufModel(
            path,
            name.split("-" + quant.split("_")[0])[0],
            "qwen35moe",
            34.66,
            quant,
            file_type,
            bpw,
            40,
            10,
            16,
            2,
            256,
            2048,
            262144,
            248320,
            True,
            256,
        )
    size = re.search(r"(\d+(?:\.\d+)?)b", lower)
    params = float(size.group(1)) if size else 7.0
    layers = 28 if params < 10 else 48 if params < 40 else 80
    arch = "qwen3" if "qwen" in lower else "gemma3" if "gemma" in lower else "llama"
    return GgufModel(
        path,
        name,
        arch,
        params,
        quant,
        file_type,
        bpw,
        layers,
        layers,
        32,
        8,
        128,
        4096,
        32768 if "qwen" in lower else 131072,
        151936 if "qwen" in lower else 128256,
        False,
        0,
    )


def build_number(version: str) -> int:
    """``b8680`` -> 8680."""
    digits = re.sub(r"\D", "", version)
    return int(digits or "8680")


def commit_for(build: int) -> str:
    """Short commit hash shown next to the build number."""
    return KNOWN_COMMITS.get(build) or hashlib.sha1(f"b{build}".encode()).hexdigest()[:9]


@dataclass
class Settings:
    """The server's effective settings."""

    model: GgufModel
    alias: str
    host: str
    port: int
    n_ctx: int
    n_parallel: int
    parallel_auto: bool
    kv_unified: bool
    n_gpu_layers: int
    flash_attn: str
    cache_type_k: str
    cache_type_v: str
    n_batch: int
    n_ubatch: int
    metrics: bool
    slots: bool
    api_keys: list[str]
    reasoning_budget: int
    reasoning_format: str
    cache_prompt: bool
    jinja: bool
    auto_ctx: bool


class Log:
    """llama.cpp's plain ``function: message`` lines on stdout."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        """One line, flushed."""
        with self.lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()


def _kv_mib(model: GgufModel, cells: int, cache_type: str) -> float:
    per = cells * model.n_attn_layers * model.n_head_kv * model.head_dim * CACHE_BYTES[cache_type]
    return per / MIB


def _recurrent_mib(model: GgufModel, seqs: int) -> tuple[float, float]:
    if not model.hybrid:
        return 0.0, 0.0
    gdn = model.n_layer - model.n_attn_layers
    r = seqs * gdn * 3 * (4096 + 2 * 16 * 128) * 4 / MIB
    s = seqs * gdn * 32 * 128 * 128 * 4 / MIB
    return r, s


class LlamaServer:
    """One ``llama-server`` process."""

    def __init__(
        self, settings: Settings, node: Node, build: int, clock: SimClock, faults: Faults
    ) -> None:
        self.s = settings
        self.node = node
        self.build = build
        self.clock = clock
        self.faults = faults
        self.log = Log()
        self.loaded = False
        self.dead = False
        self.stop_event = threading.Event()
        self.exit_code = 0
        self.lock = threading.Lock()
        self.task = 0
        self.prompt_tokens = 0
        self.predicted_tokens = 0
        self.prompt_seconds = 0.0
        self.predicted_seconds = 0.0
        self.decodes = 0
        self.processing = 0
        self.started = int(time.time())

    # --- boot ---------------------------------------------------------------------------

    def boot(self) -> bool:
        """Print the load log; returns False after a logged failure."""
        s, m, node, log = self.s, self.s.model, self.node, self.log
        total_mib = node.total_mib
        free_mib = int(total_mib * 0.985)
        log.line(f"ggml_cuda_init: found 1 CUDA devices (Total VRAM: {total_mib} MiB):")
        log.line(
            f"  Device 0: {node.gpu_name}, compute capability {node.capability_str}, VMM: yes, "
            f"VRAM: {total_mib} MiB"
        )
        log.line("load_backend: loaded CUDA backend from /app/libggml-cuda.so")
        log.line("load_backend: loaded CPU backend from /app/libggml-cpu-haswell.so")
        if s.parallel_auto:
            log.line(
                f"main: n_parallel is set to auto, using n_parallel = {s.n_parallel} and "
                "kv_unified = true"
            )
        commit = commit_for(self.build)
        if self.build >= 8300:
            log.line(f"build_info: b{self.build}-{commit}")
        else:
            log.line(f"build: {self.build} ({commit}) with GNU 14.3.0 for Linux x86_64")
        cpus = os.cpu_count() or 8
        arch = f"{node.capability[0]}{node.capability[1]}0"
        log.line(
            f"system_info: n_threads = {cpus} (n_threads_batch = {cpus}) / {cpus} | CUDA : "
            f"ARCHS = {arch} | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : SSE3 = 1 | "
            "SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | "
            "OPENMP = 1 | REPACK = 1 | "
        )
        log.line("Running without SSL")
        log.line(f"init: using {max(1, cpus - 1)} threads for HTTP server")
        log.line("start: binding port with default address family")
        log.line("main: loading model")
        log.line(f"srv    load_model: loading model '{m.path}'")
        model_mib = m.size_gib * 1024
        if s.auto_ctx:
            s.n_ctx = self._fit_ctx(model_mib, free_mib)
        kv_mib = _kv_mib(m, s.n_ctx, s.cache_type_k) + _kv_mib(m, s.n_ctx, s.cache_type_v)
        r_mib, s_mib = _recurrent_mib(m, s.n_parallel)
        projected = int(model_mib + kv_mib + r_mib + s_mib + 497 + 164)
        log.line(
            "common_init_result: fitting params to device memory, for bugs during this step try "
            "to reproduce them with -fit off, or provide --verbose logs if the bug only occurs "
            "with -fit on"
        )
        log.line(
            f"llama_params_fit_impl: projected to use {projected} MiB of device memory vs. "
            f"{free_mib} MiB of free device memory"
        )
        if free_mib - projected >= 1024:
            log.line(
                f"llama_params_fit_impl: will leave {free_mib - projected} >= 1024 MiB of free "
                "device memory, no changes needed"
            )
        log.line("llama_params_fit: successfully fit params to free device memory")
        log.line(
            f"llama_params_fit: fitting params to free memory took {self.clock.spend(0.5):.2f} "
            "seconds"
        )
        log.line(
            f"llama_model_load_from_file_impl: using device CUDA0 ({node.gpu_name}) "
            f"(0000:01:00.0) - {free_mib} MiB free"
        )
        log.line(
            f"llama_model_loader: loaded meta data with 43 key-value pairs and 733 tensors from "
            f"{m.path} (version GGUF V3 (latest))"
        )
        log.line(
            "llama_model_loader: Dumping metadata keys/values. Note: KV overrides do not apply "
            "in this output."
        )
        log.line("print_info: file format = GGUF V3 (latest)")
        log.line(f"print_info: file type   = {m.file_type}")
        log.line(f"print_info: file size   = {m.size_gib:.2f} GiB ({m.bpw:.2f} BPW) ")
        for key, value in (
            ("arch", m.arch),
            ("n_ctx_train", m.n_ctx_train),
            ("n_embd", m.n_embd),
            ("n_layer", m.n_layer),
            ("n_head", m.n_head),
            ("n_head_kv", m.n_head_kv),
            ("n_embd_head_k", m.head_dim),
            ("n_embd_head_v", m.head_dim),
            ("n_expert", m.n_expert),
            ("model params", f"{m.params_b:.2f} B"),
            ("general.name", m.name),
            ("n_vocab", m.n_vocab),
        ):
            log.line(f"print_info: {key:<21} = {value}")
        log.line(
            "load_tensors: loading model tensors, this can take a while... (mmap = true, "
            "direct_io = false)"
        )
        layers = m.n_layer + 1
        offloaded = min(layers, s.n_gpu_layers)
        if offloaded >= layers:
            log.line("load_tensors: offloading output layer to GPU")
        log.line(
            f"load_tensors: offloading {max(0, min(offloaded, m.n_layer) - 1)} repeating layers "
            "to GPU"
        )
        log.line(f"load_tensors: offloaded {offloaded}/{layers} layers to GPU")
        gpu_share = offloaded / layers
        log.line(
            "load_tensors:   CPU_Mapped model buffer size = "
            f"{model_mib * (1 - gpu_share) + 208.4:10.2f} MiB"
        )
        log.line(
            f"load_tensors:        CUDA0 model buffer size = {model_mib * gpu_share:10.2f} MiB"
        )
        self._dots(m.size_gib)
        log.line("llama_context: constructing llama_context")
        n_seq_ctx = s.n_ctx if s.kv_unified else s.n_ctx // max(1, s.n_parallel)
        for key, value in (
            ("n_seq_max", s.n_parallel),
            ("n_ctx", s.n_ctx),
            ("n_ctx_seq", n_seq_ctx),
            ("n_batch", s.n_batch),
            ("n_ubatch", s.n_ubatch),
            ("causal_attn", 1),
            ("flash_attn", s.flash_attn),
            ("kv_unified", str(s.kv_unified).lower()),
            ("freq_base", "10000000.0"),
            ("freq_scale", 1),
        ):
            log.line(f"llama_context: {key:<13} = {value}")
        if n_seq_ctx < m.n_ctx_train:
            log.line(
                f"llama_context: n_ctx_seq ({n_seq_ctx}) < n_ctx_train ({m.n_ctx_train}) -- the "
                "full capacity of the model will not be utilized"
            )
        log.line("llama_context:  CUDA_Host  output buffer size =     3.79 MiB")
        k_mib = _kv_mib(m, s.n_ctx, s.cache_type_k)
        v_mib = _kv_mib(m, s.n_ctx, s.cache_type_v)
        total_kv = k_mib + v_mib
        if self.faults.has("kv_oom") or model_mib * gpu_share + total_kv > free_mib:
            return self._kv_oom(total_kv)
        streams = 1 if s.kv_unified else s.n_parallel
        log.line(f"llama_kv_cache:      CUDA0 KV buffer size = {total_kv:8.2f} MiB")
        log.line(
            f"llama_kv_cache: size = {total_kv:7.2f} MiB ({s.n_ctx:6d} cells, "
            f"{m.n_attn_layers:3d} layers, {s.n_parallel:2d}/{streams} seqs), "
            f"K ({s.cache_type_k}): "
            f"{k_mib:7.2f} MiB, V ({s.cache_type_v}): {v_mib:7.2f} MiB"
        )
        if m.hybrid:
            log.line(
                f"llama_memory_recurrent:      CUDA0 RS buffer size = {r_mib + s_mib:8.2f} MiB"
            )
            log.line(
                f"llama_memory_recurrent: size = {r_mib + s_mib:7.2f} MiB "
                f"({s.n_parallel:6d} cells, {m.n_layer:3d} layers, {s.n_parallel:2d} seqs), "
                f"R (f32): {r_mib:7.2f} MiB, S (f32): "
                f"{s_mib:7.2f} MiB"
            )
        log.line("sched_reserve: reserving ...")
        if s.flash_attn == "auto":
            log.line("sched_reserve: Flash Attention was auto, set to enabled")
        if m.hybrid:
            log.line("sched_reserve: resolving fused Gated Delta Net support:")
            log.line("sched_reserve: fused Gated Delta Net (autoregressive) enabled")
            log.line("sched_reserve: fused Gated Delta Net (chunked) enabled")
        log.line("sched_reserve:      CUDA0 compute buffer size =   497.00 MiB")
        log.line("sched_reserve:  CUDA_Host compute buffer size =    21.52 MiB")
        log.line("sched_reserve: graph nodes  = 3729")
        log.line("sched_reserve: graph splits = 2")
        log.line(
            f"sched_reserve: reserve took {self.clock.spend(0.013) * 1000:.2f} ms, sched copies = 1"
        )
        log.line(
            "common_init_from_params: warming up the model with an empty run - please wait ... "
            "(--no-warmup to disable)"
        )
        self.clock.spend(2.5)
        log.line(f"srv    load_model: initializing slots, n_slots = {s.n_parallel}")
        if m.hybrid:
            log.line(
                "common_speculative_is_compat: the target context does not support partial "
                "sequence removal"
            )
            log.line("srv    load_model: speculative decoding not supported by this context")
        for slot in range(s.n_parallel):
            log.line(f"slot   load_model: id {slot:2d} | task -1 | new slot, n_ctx = {n_seq_ctx}")
        log.line("srv    load_model: prompt cache is enabled, size limit: 8192 MiB")
        log.line("srv    load_model: use `--cache-ram 0` to disable the prompt cache")
        log.line(
            "srv    load_model: for more info see https://github.com/ggml-org/llama.cpp/pull/16391"
        )
        log.line(
            "init: chat template, example_format: '<|im_start|>system\nYou are a helpful "
            "assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi "
            "there<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n"
            + ("<think>\n" if m.hybrid else "")
            + "'"
        )
        thinking = 1 if (m.hybrid and s.reasoning_budget != 0) else 0
        log.line(f"srv          init: init: chat template, thinking = {thinking}")
        log.line("main: model loaded")
        host = s.host
        if self.build >= 7000:
            log.line(f"main: server is listening on http://{host}:{s.port}")
            log.line("main: starting the main loop...")
        else:
            log.line(
                f"main: server is listening on http://{host}:{s.port} - starting the main loop"
            )
        log.line("srv  update_slots: all slots are idle")
        return True

    def _fit_ctx(self, model_mib: float, free_mib: int) -> int:
        """``-c 0``: the training context, lowered by ``--fit`` until it fits (min 4096)."""
        s, m = self.s, self.s.model
        r_mib, s_mib = _recurrent_mib(m, s.n_parallel)
        budget = free_mib - 1024 - model_mib - r_mib - s_mib - 661
        if self.faults.has("kv_small"):
            # Something else holds device memory: less room for the KV cache.
            budget *= 1.0 - self.faults.value("kv_small", 0.3)
        per_cell = _kv_mib(m, 1, s.cache_type_k) + _kv_mib(m, 1, s.cache_type_v)
        fit = int(budget / per_cell) if per_cell > 0 else m.n_ctx_train
        n_ctx = min(m.n_ctx_train, fit) // 256 * 256
        return max(4096, n_ctx)

    def _dots(self, size_gib: float) -> None:
        """The load progress dots; ``hang_loading`` stops them for good."""
        total = 98
        seconds = max(2.0, size_gib * 1.2)
        written = 0
        with self.log.lock:
            for _ in range(total):
                if self.faults.has("hang_loading") and written > total // 3:
                    sys.stdout.flush()
                    threading.Event().wait(10**9)
                sys.stdout.write(".")
                sys.stdout.flush()
                written += 1
                self.clock.spend(seconds / total)
            sys.stdout.write("\n")
            sys.stdout.flush()

    def _kv_oom(self, kv_mib: float) -> bool:
        log, m = self.log, self.s.model
        size = int(kv_mib * MIB)
        log.line(
            f"ggml_backend_cuda_buffer_type_alloc_buffer: allocating {kv_mib:.2f} MiB on device 0: "
            "cudaMalloc failed: out of memory"
        )
        log.line(f"alloc_tensor_range: failed to allocate CUDA0 buffer of size {size}")
        log.line(
            "llama_init_from_model: failed to initialize the context: failed to allocate buffer "
            "for kv cache"
        )
        log.line(f"common_init_from_params: failed to create context with model '{m.path}'")
        log.line(f"srv    load_model: failed to load model, '{m.path}'")
        log.line("srv    operator(): operator(): cleaning up before exit...")
        log.line("main: exiting due to model loading error")
        return False

    # --- runtime ------------------------------------------------------------------------

    def watch_faults(self) -> None:
        """crash_after_boot: abort some seconds after the model is loaded."""
        crash_at: float | None = None
        while not self.stop_event.wait(1.0):
            faults = current_faults()
            if faults.has("crash_after_boot") and crash_at is None:
                crash_at = time.time() + faults.value("crash_after_boot", 3.0)
            if crash_at is not None and time.time() >= crash_at:
                self.log.line("CUDA error: an illegal memory access was encountered")
                self.log.line(
                    "  current device: 0, in function ggml_backend_cuda_synchronize at "
                    "/app/ggml/src/ggml-cuda/ggml-cuda.cu:2786"
                )
                self.log.line("  cudaStreamSynchronize(cuda_ctx->stream())")
                self.log.line("/app/ggml/src/ggml-cuda/ggml-cuda.cu:88: CUDA error")
                self.dead = True
                sys.stdout.flush()
                os._exit(134)

    def chat(self, body: dict[str, Any], client: str) -> tuple[int, Any]:
        """One chat completion."""
        s = self.s
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, {
                "error": {
                    "code": 400,
                    "message": "'messages' is required",
                    "type": "invalid_request_error",
                }
            }
        question = chat.last_user_text(messages)
        n_prompt = chat.count_tokens(chat.prompt_text(messages)) + 10
        n_ctx_slot = s.n_ctx if s.kv_unified else s.n_ctx // max(1, s.n_parallel)
        with self.lock:
            task = self.task
            self.task += 1
        if n_prompt > n_ctx_slot:
            self.log.line(
                f"srv    send_error: task id = {task}, error: request ({n_prompt} tokens) "
                f"exceeds the available context size ({n_ctx_slot} tokens), try increasing it"
            )
            return 400, {
                "error": {
                    "code": 400,
                    "message": f"request ({n_prompt} tokens) exceeds the "
                    f"available context size ({n_ctx_slot} tokens), try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": n_prompt,
                    "n_ctx": n_ctx_slot,
                }
            }
        raw_kwargs = body.get("chat_template_kwargs")
        kwargs: dict[str, Any] = raw_kwargs if isinstance(raw_kwargs, dict) else {}
        thinking = (
            s.model.hybrid and s.reasoning_budget != 0 and kwargs.get("enable_thinking", True)
        )
        answer = chat.answer(question)
        reasoning = chat.reasoning(question) if thinking else None
        max_tokens = body.get("max_tokens") or body.get("n_predict")
        answer, truncated = chat.truncate_tokens(
            answer, max_tokens if isinstance(max_tokens, int) else None
        )
        n_gen = chat.count_tokens(answer + " " + (reasoning or ""))
        slot = task % s.n_parallel
        self.log.line("srv  params_from_: Chat format: peg-native")
        self.log.line(
            f"slot get_availabl: id {slot:2d} | task -1 | selected slot by LRU, t_last = -1"
        )
        self.log.line(
            f"slot launch_slot_: id {slot:2d} | task {task} | processing task, is_child = 0"
        )
        self.log.line(
            f"slot update_slots: id {slot:2d} | task {task} | new prompt, n_ctx_slot = "
            f"{n_ctx_slot}, n_keep = 0, task.n_tokens = {n_prompt}"
        )
        with self.lock:
            self.processing += 1
        try:
            pp_s = self.clock.spend(n_prompt / 2000.0)
            tg_s = self.clock.spend(n_gen / 204.0)
        finally:
            with self.lock:
                self.processing -= 1
        self.log.line(
            f"slot update_slots: id {slot:2d} | task {task} | prompt processing done, n_tokens "
            f"= {n_prompt}, batch.n_tokens = {n_prompt}"
        )
        self.log.line(f"slot print_timing: id {slot:2d} | task {task} | ")
        self.log.line(
            f"prompt eval time = {pp_s * 1000:10.2f} ms / {n_prompt:5d} tokens ("
            f"{pp_s * 1000 / n_prompt:8.2f} ms per token, {n_prompt / max(pp_s, 1e-9):8.2f} "
            "tokens per second)"
        )
        self.log.line(
            f"       eval time = {tg_s * 1000:10.2f} ms / {n_gen:5d} tokens ("
            f"{tg_s * 1000 / n_gen:8.2f} ms per token, {n_gen / max(tg_s, 1e-9):8.2f} tokens "
            "per second)"
        )
        self.log.line(
            f"      total time = {(pp_s + tg_s) * 1000:10.2f} ms / {n_prompt + n_gen:5d} tokens"
        )
        self.log.line(
            f"slot      release: id {slot:2d} | task {task} | stop processing: n_tokens = "
            f"{n_prompt + n_gen}, truncated = 0"
        )
        self.log.line("srv  update_slots: all slots are idle")
        with self.lock:
            self.prompt_tokens += n_prompt
            self.predicted_tokens += n_gen
            self.prompt_seconds += pp_s
            self.predicted_seconds += tg_s
            self.decodes += n_gen + 1
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        if reasoning is not None:
            if s.reasoning_format == "none":
                message["content"] = f"<think>\n{reasoning}\n</think>\n\n{answer}"
            else:
                message["reasoning_content"] = reasoning
        created = int(time.time())
        return 200, {
            "choices": [
                {"finish_reason": "length" if truncated else "stop", "index": 0, "message": message}
            ],
            "created": created,
            "model": str(body.get("model") or s.alias),
            "system_fingerprint": f"b{self.build}-{commit_for(self.build)}",
            "object": "chat.completion",
            "usage": {
                "completion_tokens": n_gen,
                "prompt_tokens": n_prompt,
                "total_tokens": n_prompt + n_gen,
            },
            "id": f"chatcmpl-{uuid.uuid4().hex[:32]}",
            "timings": {
                "cache_n": 0,
                "prompt_n": n_prompt,
                "prompt_ms": pp_s * 1000,
                "prompt_per_token_ms": pp_s * 1000 / n_prompt,
                "prompt_per_second": n_prompt / max(pp_s, 1e-9),
                "predicted_n": n_gen,
                "predicted_ms": tg_s * 1000,
                "predicted_per_token_ms": tg_s * 1000 / n_gen,
                "predicted_per_second": n_gen / max(tg_s, 1e-9),
            },
        }

    def props(self) -> dict[str, Any]:
        """``GET /props``."""
        s = self.s
        n_ctx_slot = s.n_ctx if s.kv_unified else s.n_ctx // max(1, s.n_parallel)
        return {
            "default_generation_settings": {
                "id": 0,
                "id_task": -1,
                "n_ctx": n_ctx_slot,
                "speculative": False,
                "is_processing": False,
                "params": {
                    "n_predict": -1,
                    "seed": 4294967295,
                    "temperature": 0.8,
                    "top_k": 40,
                    "top_p": 0.95,
                    "min_p": 0.05,
                    "cache_prompt": s.cache_prompt,
                    "reasoning_format": s.reasoning_format,
                },
            },
            "total_slots": s.n_parallel,
            "model_alias": s.alias,
            "model_path": s.model.path,
            "modalities": {"vision": False, "audio": False},
            "chat_template": "{%- for message in messages %}...{%- endfor %}",
            "chat_template_caps": {
                "supports_tools": True,
                "supports_system_role": True,
                "supports_parallel_tool_calls": True,
            },
            "bos_token": ",",
            "eos_token": "<|im_end|>",
            "build_info": f"b{self.build}-{commit_for(self.build)}",
            "is_sleeping": False,
        }

    def slots(self) -> list[dict[str, Any]]:
        """``GET /slots``."""
        s = self.s
        n_ctx_slot = s.n_ctx if s.kv_unified else s.n_ctx // max(1, s.n_parallel)
        return [
            {
                "id": i,
                "id_task": -1,
                "n_ctx": n_ctx_slot,
                "speculative": False,
                "is_processing": False,
                "params": {
                    "n_predict": -1,
                    "chat_format": "peg-native",
                    "reasoning_format": s.reasoning_format,
                    "speculative.n_max": 16,
                    "speculative.n_min": 0,
                    "speculative.p_min": 0.75,
                },
                "next_token": {
                    "has_next_token": True,
                    "has_new_line": False,
                    "n_remain": -1,
                    "n_decoded": 0,
                },
            }
            for i in range(s.n_parallel)
        ]

    def metrics_text(self) -> str:
        """``/metrics`` with llama.cpp's names."""
        fams = []

        def add(name: str, kind: str, text: str, value: float) -> None:
            fam = Family(name, kind, text)
            fam.add({}, value)
            fams.append(fam)

        with self.lock:
            add(
                "llamacpp:prompt_tokens",
                "counter",
                "Number of prompt tokens processed.",
                self.prompt_tokens,
            )
            add("llamacpp:prompt_seconds", "counter", "Prompt process time", self.prompt_seconds)
            add(
                "llamacpp:tokens_predicted",
                "counter",
                "Number of generation tokens processed.",
                self.predicted_tokens,
            )
            add(
                "llamacpp:tokens_predicted_seconds",
                "counter",
                "Predict process time",
                self.predicted_seconds,
            )
            add(
                "llamacpp:n_decode", "counter", "Total number of llama_decode() calls", self.decodes
            )
            add(
                "llamacpp:n_tokens_max",
                "counter",
                "Largest observed n_tokens.",
                max(0, self.prompt_tokens and self.s.n_ctx),
            )
            add(
                "llamacpp:prompt_tokens_seconds",
                "gauge",
                "Average prompt throughput in tokens/s.",
                self.prompt_tokens / self.prompt_seconds if self.prompt_seconds else 0.0,
            )
            add(
                "llamacpp:predicted_tokens_seconds",
                "gauge",
                "Average generation throughput in tokens/s.",
                self.predicted_tokens / self.predicted_seconds if self.predicted_seconds else 0.0,
            )
            add(
                "llamacpp:n_busy_slots_per_decode",
                "gauge",
                "Average number of busy slots per llama_decode() call",
                1.0 if self.decodes else 0.0,
            )
            add(
                "llamacpp:requests_processing",
                "gauge",
                "Number of requests processing.",
                self.processing,
            )
            add("llamacpp:requests_deferred", "gauge", "Number of requests deferred.", 0)
        return render(fams)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTP
    protocol_version = "HTTP/1.1"
    server_version = "llama.cpp"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """llama-server logs requests itself (``log_server_r``)."""

    def _send(self, status: int, obj: Any, ctype: str = "application/json; charset=utf-8") -> None:
        # Compact, as nlohmann::json::dump() writes it.
        body = obj if isinstance(obj, bytes) else json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        app = self.server.app
        if app.loaded and self.path.split("?")[0] not in ("/health", "/v1/health"):
            app.log.line(
                f"srv  log_server_r: done request: {self.command} {self.path} "
                f"{self.client_address[0]} {status}"
            )

    def _auth(self) -> bool:
        keys = self.server.app.s.api_keys
        path = self.path.split("?")[0]
        if not keys or path in ("/health", "/v1/health", "/models", "/v1/models", "/"):
            return True
        auth = self.headers.get("Authorization", "")
        token = (
            auth[len("Bearer ") :]
            if auth.startswith("Bearer ")
            else self.headers.get("X-Api-Key", "")
        )
        if token in keys:
            return True
        self._send(
            401,
            {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}},
        )
        return False

    def _loading(self) -> bool:
        if self.server.app.loaded:
            return False
        self._send(
            503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
        )
        return True

    def do_GET(self) -> None:
        """GET endpoints."""
        app = self.server.app
        path = self.path.split("?")[0]
        if path in ("/health", "/v1/health"):
            if self._loading():
                return
            if current_faults().has("health_fail"):
                self._send(
                    503,
                    {
                        "error": {
                            "code": 503,
                            "message": "Loading model",
                            "type": "unavailable_error",
                        }
                    },
                )
                return
            self._send(200, {"status": "ok"})
            return
        if not self._auth() or self._loading():
            return
        if path == "/props":
            self._send(200, app.props())
        elif path == "/slots":
            if not app.s.slots:
                self._send(
                    501,
                    {
                        "error": {
                            "code": 501,
                            "message": "This server does not support slots endpoint.",
                            "type": "not_supported_error",
                        }
                    },
                )
            else:
                self._send(200, app.slots())
        elif path in ("/v1/models", "/models"):
            m = app.s.model
            meta = {
                "vocab_type": 2,
                "n_vocab": m.n_vocab,
                "n_ctx_train": m.n_ctx_train,
                "n_embd": m.n_embd,
                "n_params": int(m.params_b * 1e9),
                "size": int(m.size_gib * (1 << 30)),
            }
            self._send(
                200,
                {
                    "models": [
                        {
                            "name": app.s.alias,
                            "model": app.s.alias,
                            "modified_at": "",
                            "size": "",
                            "digest": "",
                            "type": "model",
                            "description": "",
                            "tags": [""],
                            "capabilities": ["completion"],
                            "parameters": "",
                            "details": {
                                "parent_model": "",
                                "format": "gguf",
                                "family": "",
                                "families": [""],
                                "parameter_size": "",
                                "quantization_level": "",
                            },
                        }
                    ],
                    "object": "list",
                    "data": [
                        {
                            "id": app.s.alias,
                            "object": "model",
                            "created": app.started,
                            "owned_by": "llamacpp",
                            "meta": meta,
                        }
                    ],
                },
            )
        elif path == "/metrics":
            if not app.s.metrics:
                self._send(
                    501,
                    {
                        "error": {
                            "code": 501,
                            "message": "This server does not support "
                            "metrics endpoint. Start it with `--metrics`",
                            "type": "not_supported_error",
                        }
                    },
                )
            else:
                self._send(200, app.metrics_text().encode(), "text/plain; version=0.0.4")
        else:
            self._send(
                404,
                {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}},
            )

    def do_POST(self) -> None:
        """POST endpoints."""
        app = self.server.app
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._auth() or self._loading():
            return
        path = self.path.split("?")[0]
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send(
                404,
                {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}},
            )
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "Invalid JSON",
                        "type": "invalid_request_error",
                    }
                },
            )
            return
        status, result = app.chat(body if isinstance(body, dict) else {}, self.client_address[0])
        self._send(status, result)


class _HTTP(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: LlamaServer) -> None:
        self.app = app
        super().__init__(address, _Handler)


def settings_from(args: ServerArgs, build: int) -> Settings:
    """Apply llama-server's defaults to the parsed options."""
    model_path = args.get("--model") or "models/7B/ggml-model-f16.gguf"
    model = guess_model(model_path)
    parallel_raw = args.integer("--parallel", -1 if build >= 7000 else 1)
    auto = parallel_raw < 0
    n_parallel = 4 if auto else max(1, parallel_raw)
    kv_unified = args.flag("--kv-unified", default=auto)
    ctx = args.integer("--ctx-size", 0 if build >= 6500 else 4096)
    n_ctx = ctx if ctx > 0 else model.n_ctx_train
    ngl_raw = (args.get("--n-gpu-layers") or "auto").lower()
    ngl = model.n_layer + 1 if ngl_raw in ("auto", "all", "-1") else int(ngl_raw)
    fa_raw = (args.get("--flash-attn") or ("auto" if build >= 6200 else "0")).lower()
    fa = {
        "on": "enabled",
        "1": "enabled",
        "true": "enabled",
        "enabled": "enabled",
        "off": "disabled",
        "0": "disabled",
        "false": "disabled",
        "disabled": "disabled",
    }.get(fa_raw, "auto")
    if build < 7000 and fa != "auto":
        fa = "1" if fa == "enabled" else "0"
    alias = (args.get("--alias") or "").split(",")[0] or model_path
    keys = [k for k in (args.get("--api-key") or "").split(",") if k]
    port = args.integer("--port", 8080 if build < 9000 else 9931)
    return Settings(
        model=model,
        alias=alias,
        host=args.get("--host") or "127.0.0.1",
        port=port,
        n_ctx=n_ctx,
        n_parallel=n_parallel,
        parallel_auto=auto,
        kv_unified=kv_unified,
        n_gpu_layers=ngl,
        flash_attn=fa,
        cache_type_k=args.get("--cache-type-k") or "f16",
        cache_type_v=args.get("--cache-type-v") or "f16",
        n_batch=args.integer("--batch-size", 2048),
        n_ubatch=args.integer("--ubatch-size", 512),
        metrics=args.flag("--metrics"),
        slots=args.flag("--slots", default=True),
        api_keys=keys,
        reasoning_budget=args.integer("--reasoning-budget", -1),
        reasoning_format=args.get("--reasoning-format") or "deepseek",
        cache_prompt=args.flag("--cache-prompt", default=True),
        jinja=args.flag("--jinja", True),
        auto_ctx=ctx <= 0,
    )


def main(argv: list[str] | None = None) -> int:
    """``llama-server [options]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    version = os.environ.get("STANDIN_ENGINE_VERSION", "").strip() or DEFAULT_BUILD
    if not version.lower().startswith("b"):
        version = DEFAULT_BUILD
    build = build_number(version)
    env = dict(os.environ)
    try:
        args = parse(argv, env, build)
    except ArgError as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return 1
    if args.flag("--help"):
        print("----- common params -----\n", flush=True)
        return 0
    if args.flag("--version"):
        print(
            f"version: {build} ({commit_for(build)})\nbuilt with GNU 14.3.0 for Linux x86_64",
            file=sys.stderr,
            flush=True,
        )
        return 0
    faults = read_faults(env)
    settings = settings_from(args, build)
    server = LlamaServer(
        settings, Node.from_env(env), build, SimClock.from_env(env, faults.slowdown), faults
    )
    try:
        httpd = _HTTP((settings.host, settings.port), server)
    except OSError as exc:
        print(
            f"start: couldn't bind HTTP server socket, hostname: {settings.host}, port: "
            f"{settings.port}: {exc.strerror}",
            flush=True,
        )
        return 1

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server.log.line("srv    operator(): operator(): cleaning up before exit...")
        server.stop_event.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    if not server.boot():
        httpd.server_close()
        return 1
    server.loaded = True
    threading.Thread(target=server.watch_faults, daemon=True).start()
    try:
        server.stop_event.wait()
    finally:
        httpd.shutdown()
    return server.exit_code


if __name__ == "__main__":
    sys.exit(main())

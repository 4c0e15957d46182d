"""The vLLM boot sequence: the log lines a real ``vllm serve`` prints, in order.

Each phase sleeps its simulated duration (scaled by ``STANDIN_TIME_SCALE``) so the
timing of the log looks like a boot, only faster. Failures print the real messages
and tracebacks and raise ``BootFailed`` with the exit status.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from dataclasses import dataclass

from .faults import Faults
from .node import GIB, SimClock
from .vllm_config import Resolved, tq_continuation_call_line, tq_workspace_reserved
from .vllm_figures import KvFigures, ServeSettings, capture_sizes, compute
from .vllm_log import API, CORE, VllmLog, format_gib, tqdm_bar
from .vllm_versions import log_site, traceback_line

SITE = "/usr/local/lib/python3.12/dist-packages"
# Where tracebacks say vLLM lives: the official image's install (python3.12).
VLLM_DIR = SITE + "/vllm"
ROUTES = [
    ("/openapi.json", "HEAD, GET"),
    ("/docs", "HEAD, GET"),
    ("/docs/oauth2-redirect", "HEAD, GET"),
    ("/redoc", "HEAD, GET"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/load", "GET"),
    ("/version", "GET"),
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/v1/models", "GET"),
    ("/ping", "GET"),
    ("/ping", "POST"),
    ("/invocations", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/v1/chat/completions/batch", "POST"),
    ("/v1/responses", "POST"),
    ("/v1/responses/{response_id}", "GET"),
    ("/v1/responses/{response_id}/cancel", "POST"),
    ("/v1/completions", "POST"),
    ("/v1/messages", "POST"),
    ("/v1/messages/count_tokens", "POST"),
    ("/inference/v1/generate", "POST"),
    ("/scale_elastic_ep", "POST"),
    ("/is_scaling_elastic_ep", "POST"),
    ("/v1/chat/completions/render", "POST"),
    ("/v1/completions/render", "POST"),
]
CG_MODE_REPR = {
    "NONE": "<CUDAGraphMode.NONE: 0>",
    "PIECEWISE": "<CUDAGraphMode.PIECEWISE: 1>",
    "FULL": "<CUDAGraphMode.FULL: 2>",
    "FULL_DECODE_ONLY": "<CUDAGraphMode.FULL_DECODE_ONLY: (2, 0)>",
    "FULL_AND_PIECEWISE": "<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>",
}
COMPILE_MODE_REPR = {
    0: "<CompilationMode.NONE: 0>",
    1: "<CompilationMode.STOCK_TORCH_COMPILE: 1>",
    2: "<CompilationMode.DYNAMO_TRACE_ONCE: 2>",
    3: "<CompilationMode.VLLM_COMPILE: 3>",
}


class BootFailed(Exception):
    """The boot ended in a failure that was logged; ``code`` is the exit status."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class BootResult:
    """What the server needs after a successful boot."""

    figures: KvFigures
    kv_tokens: int
    tq_unpatched_continuation: bool
    tq_call_line: int


def _hex(seed: str, n: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:n]


def _traceback_lines(frames: list[tuple[str, int, str, str]], exc: str) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.extend(exc.split("\n"))
    return lines


def fail_api(
    log: VllmLog, exc_type: str, message: str, frames: list[tuple[str, int, str, str]]
) -> BootFailed:
    """An exception in the API server while it builds the engine config."""
    vdir = VLLM_DIR
    head = [
        ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
        (f"{vdir}/entrypoints/cli/main.py", 75, "main", "args.dispatch_function(args)"),
        (f"{vdir}/entrypoints/cli/serve.py", 118, "cmd", "uvloop.run(run_server(args))"),
        (
            f"{vdir}/entrypoints/openai/api_server.py",
            672,
            "run_server",
            "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
        ),
        (
            f"{vdir}/entrypoints/openai/api_server.py",
            99,
            "build_async_engine_client",
            "async with build_async_engine_client_from_engine_args(",
        ),
        (
            f"{vdir}/entrypoints/openai/api_server.py",
            125,
            "build_async_engine_client_from_engine_args",
            "vllm_config = engine_args.create_engine_config(usage_context=usage_context)",
        ),
    ]
    for line in _traceback_lines(head + frames, f"{exc_type}: {message}"):
        log.plain(API, line)
    return BootFailed(1)


def print_preamble(
    log: VllmLog, version_str: str, model_arg: str, non_default: dict[str, object]
) -> None:
    """Version banner (0.15+; the one-line version before) and the non-default args."""
    v = log.version
    if v >= (0, 15, 0):
        art = (
            "\n       █     █     █▄   ▄█\n"
            f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version_str}\n"
            f"  █▄█▀ █     █     █     █  model   {model_arg}\n"
            "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n"
        )
        log.info(API, "banner", art)
    else:
        log.emit_at(API, "INFO", "api_server.py:1354", f"vLLM API server version {version_str}")
    log.info(API, "nondefault", f"non-default args: {non_default!r}")
    if not os.environ.get("HF_TOKEN") and os.environ.get("HF_HUB_OFFLINE", "") not in ("1", "true"):
        log.plain(
            API,
            "Warning: You are sending unauthenticated requests to the HF Hub. "
            "Please set a HF_TOKEN to enable higher rate limits and faster downloads.",
        )


class VllmBoot:
    """Prints the boot log of one ``vllm serve`` run."""

    def __init__(self, cfg: Resolved, log: VllmLog, clock: SimClock, faults: Faults) -> None:
        self.cfg = cfg
        self.log = log
        self.clock = clock
        self.faults = faults
        self.v = cfg.version
        self.vllm_dir = VLLM_DIR

    # --- helpers -------------------------------------------------------------------

    def _info(self, proc: str, key: str, msg: str) -> None:
        self.log.info(proc, key, msg)

    def _warn(self, proc: str, key: str, msg: str) -> None:
        self.log.warning(proc, key, msg)

    def _has(self, key: str) -> bool:
        try:
            log_site(self.v, key)
        except KeyError:
            return False
        return True

    def _core_traceback(self, frames: list[tuple[str, int, str, str]], exc: str) -> list[str]:
        return _traceback_lines(frames, exc)

    def fail_engine_core(self, frames: list[tuple[str, int, str, str]], exc: str) -> BootFailed:
        """``EngineCore failed to start.`` with the traceback twice, then the API server's end."""
        site = log_site(self.v, "core_failed")
        tb = self._core_traceback(frames, exc)
        self.log.error_block(CORE, site, ["EngineCore failed to start.", *tb])
        self.log.plain(CORE, "Process EngineCore:")
        run_line = traceback_line(self.v, "run_engine_core")
        outer = [
            ("/usr/lib/python3.12/multiprocessing/process.py", 314, "_bootstrap", "self.run()"),
            (
                "/usr/lib/python3.12/multiprocessing/process.py",
                108,
                "run",
                "self._target(*self._args, **self._kwargs)",
            ),
            (f"{self.vllm_dir}/v1/engine/core.py", run_line + 30, "run_engine_core", "raise e"),
        ]
        for line in self._core_traceback(outer + frames, exc):
            self.log.plain(CORE, line)
        api = [
            ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
            (
                f"{self.vllm_dir}/entrypoints/cli/main.py",
                75,
                "main",
                "args.dispatch_function(args)",
            ),
            (
                f"{self.vllm_dir}/entrypoints/cli/serve.py",
                118,
                "cmd",
                "uvloop.run(run_server(args))",
            ),
            (
                f"{self.vllm_dir}/entrypoints/openai/api_server.py",
                672,
                "run_server",
                "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
            ),
            (
                f"{self.vllm_dir}/entrypoints/openai/api_server.py",
                686,
                "run_server_worker",
                "async with build_async_engine_client(",
            ),
            (
                f"{self.vllm_dir}/v1/engine/async_llm.py",
                146,
                "__init__",
                "self.engine_core = EngineCoreClient.make_async_mp_client(",
            ),
            (
                f"{self.vllm_dir}/v1/engine/core_client.py",
                570,
                "__init__",
                "with launch_core_engines(",
            ),
            (
                f"{self.vllm_dir}/v1/engine/utils.py",
                1249,
                "wait_for_engine_startup",
                "raise RuntimeError(",
            ),
        ]
        for line in self._core_traceback(
            api,
            "RuntimeError: Engine core initialization failed. "
            "See root cause above. Failed core proc(s): {}",
        ):
            self.log.plain(API, line)
        return BootFailed(1)

    # --- phases ---------------------------------------------------------------------

    def api_phase(self) -> None:
        """API server: model config, scheduler config."""
        cfg, m = self.cfg, self.cfg.model
        self.clock.spend(4.5)
        self._info(API, "resolved", f"Resolved architecture: {m.architecture}")
        for key, text in cfg.warnings:
            if key == "model_cast":
                self.log.emit_at(
                    API, "WARNING", log_site(self.v, "resolved").split(":")[0] + ":2016", text
                )
        self._info(API, "maxlen", f"Using max model len {cfg.max_model_len}")
        if cfg.kv_cache_dtype.startswith(("fp8", "turboquant", "int8", "nvfp4")) and self._has(
            "kvdtype"
        ):
            self._info(
                API,
                "kvdtype",
                f"Using {cfg.kv_cache_dtype} data type to store kv cache. It reduces the GPU "
                "memory footprint and boosts the performance. Meanwhile, it may cause "
                "accuracy drop without a proper scaling factor",
            )
        if cfg.kv_cache_dtype.startswith("turboquant_") and m.is_hybrid:
            self._info(
                API, "tq_hybrid", f"TQ hybrid: full-attention layers {m.attention_layer_indices()}"
            )
        if cfg.spec_method is not None:
            for key, text in cfg.warnings:
                if key == "spec_deprecated":
                    self._warn(API, "mtp_deprecated", text)
            if cfg.mtp and m.draft_architecture:
                self.clock.spend(4.8)
                self._info(API, "resolved", f"Resolved architecture: {m.draft_architecture}")
                self._info(API, "maxlen", f"Using max model len {cfg.max_model_len}")
            for key, text in cfg.warnings:
                if key == "spec_warn":
                    self._warn(API, "spec_warn", text)
        if cfg.enable_chunked_prefill:
            self._info(
                API,
                "chunked",
                "Chunked prefill is enabled with "
                f"max_num_batched_tokens={cfg.max_num_batched_tokens}.",
            )
        if m.is_hybrid and cfg.enable_prefix_caching and self.v < (0, 25, 0):
            self.log.emit_at(
                API,
                "WARNING",
                "config.py:359",
                f"Mamba cache mode is set to 'align' for {m.architecture} by default "
                "when prefix caching is enabled",
            )
            self.log.emit_at(
                API,
                "INFO",
                "config.py:379",
                "Warning: Prefix caching in Mamba cache 'align' mode is currently "
                "enabled. Its support for Mamba layers is experimental. Please report "
                "any issues you may observe.",
            )
        if cfg.enforce_eager:
            self._warn(
                API,
                "eager1",
                "Enforce eager set, disabling torch.compile and CUDAGraphs. "
                "This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none",
            )
        if self.v >= (0, 15, 0) and self._has("async") and self.v < (0, 28, 0):
            self._info(
                API,
                "async",
                f"Asynchronous scheduling is {'enabled' if cfg.async_scheduling else 'disabled'}.",
            )
        if cfg.enforce_eager:
            self._info(API, "eager2", "Cudagraph is disabled under eager mode")

    def engine_config_line(self, mixed: list[int]) -> None:
        """``Initializing a V1 LLM engine (vX) with config: …``."""
        cfg = self.cfg
        spec = "None"
        if cfg.spec_method is not None:
            drafter = cfg.model_arg if cfg.spec_method == "mtp" else "None"
            spec = (
                f"SpeculativeConfig(method='{cfg.spec_method}', model='{drafter}', "
                f"num_spec_tokens={cfg.num_spec_tokens})"
            )
        sizes = mixed if cfg.configured_cudagraph_mode != "NONE" else []
        cc = (
            f"{{'mode': {COMPILE_MODE_REPR.get(cfg.compile_mode, COMPILE_MODE_REPR[3])}, "
            "'debug_dump_path': None, 'cache_dir': '', 'compile_cache_save_format': 'binary', "
            "'backend': 'inductor', 'custom_ops': ['none'], "
            "'splitting_ops': ['vllm::unified_attention_with_output', "
            "'vllm::unified_mla_attention_with_output', 'vllm::mamba_mixer2', 'vllm::mamba_mixer', "
            "'vllm::short_conv', 'vllm::linear_attention', 'vllm::plamo2_mamba_mixer', "
            "'vllm::gdn_attention_core', 'vllm::kda_attention', 'vllm::sparse_attn_indexer'], "
            "'compile_mm_encoder': False, 'compile_sizes': [], "
            f"'compile_ranges_endpoints': [{cfg.max_num_batched_tokens}], "
            "'inductor_compile_config': {'enable_auto_functionalized_v2': False, "
            "'size_asserts': False, 'alignment_asserts': False, 'scalar_asserts': False, "
            "'combo_kernels': True, 'benchmark_combo_kernel': True}, 'inductor_passes': {}, "
            f"'cudagraph_mode': {CG_MODE_REPR[cfg.configured_cudagraph_mode]}, "
            "'cudagraph_num_of_warmups': 1, "
            f"'cudagraph_capture_sizes': {sizes}, "
            "'cudagraph_copy_inputs': False, 'cudagraph_specialize_lora': True, "
            "'use_inductor_graph_partition': False, 'pass_config': {'fuse_norm_quant': False, "
            "'fuse_act_quant': False, 'fuse_attn_quant': False, 'enable_sp': False, "
            "'fuse_gemm_comms': False, 'fuse_allreduce_rms': False}, "
            f"'max_cudagraph_capture_size': {max(sizes) if sizes else 0}, "
            "'dynamic_shapes_config': {'type': <DynamicShapesType.BACKED: 'backed'>, "
            "'evaluate_guards': False, 'assume_32_bit_indexing': False}, 'local_cache_dir': None}"
        )
        quant = cfg.quantization or "None"
        text = (
            f"Initializing a V1 LLM engine (v{cfg.version_str}) with config: "
            f"model='{cfg.model_arg}', speculative_config={spec}, tokenizer='{cfg.model_arg}', "
            "skip_tokenizer_init=False, tokenizer_mode=auto, "
            f"revision={cfg.revision!r}, tokenizer_revision=None, "
            f"trust_remote_code={cfg.trust_remote_code}, dtype=torch.{cfg.dtype}, "
            f"max_seq_len={cfg.max_model_len}, download_dir=None, load_format=auto, "
            f"tensor_parallel_size={cfg.tensor_parallel_size}, pipeline_parallel_size=1, "
            "data_parallel_size=1, disable_custom_all_reduce=False, "
            f"quantization={quant}, enforce_eager={cfg.enforce_eager}, "
            f"kv_cache_dtype={cfg.kv_cache_dtype}, device_config=cuda, "
            "structured_outputs_config=StructuredOutputsConfig(backend='auto', "
            "disable_any_whitespace=False, disable_additional_properties=False, "
            f"reasoning_parser='{cfg.reasoning_parser}', reasoning_parser_plugin='', "
            "enable_in_reasoning=False), observability_config=ObservabilityConfig("
            "show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, "
            "collect_detailed_traces=None), seed=0, "
            f"served_model_name={cfg.served_name}, "
            f"enable_prefix_caching={cfg.enable_prefix_caching}, "
            f"enable_chunked_prefill={cfg.enable_chunked_prefill}, pooler_config=None, "
            f"compilation_config={cc}"
        )
        self._info(CORE, "init_engine_cfg", text)

    def load_phase(self, figures: KvFigures) -> float:
        """Weights (and drafter) loading; returns the model-loading seconds."""
        cfg, m = self.cfg, self.cfg.model
        self.clock.spend(3.0)
        self._info(
            CORE,
            "parallel1",
            "world_size=1 rank=0 local_rank=0 distributed_init_method="
            "tcp://127.0.0.1:53217 backend=nccl",
        )
        self._info(
            CORE,
            "parallel2",
            "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, "
            "PCP rank 0, TP rank 0, EP rank 0, EPLB rank N/A",
        )
        self.clock.spend(4.0)
        self._info(CORE, "start_load", f"Starting to load model {cfg.model_arg}...")
        multimodal = m.vision_gib > 0 and not cfg.language_model_only
        if multimodal and self.v >= (0, 20, 0):
            self.log.emit_at(
                CORE,
                "INFO",
                "cuda.py:535",
                "Using backend AttentionBackendEnum.FLASH_ATTN for vit attention",
            )
            self.log.emit_at(
                CORE,
                "INFO",
                "mm_encoder_attention.py:373",
                "Using AttentionBackendEnum.FLASH_ATTN for MMEncoderAttention.",
            )
        if cfg.backend_selected_by_user:
            self.log.emit_at(
                CORE,
                "INFO",
                log_site(self.v, "backend_auto").split(":")[0]
                + ":"
                + str(traceback_line(self.v, "backend_sel")),
                f"Using AttentionBackendEnum.{cfg.attention_backend} backend.",
            )
        else:
            names = ", ".join(f"'{b}'" for b in cfg.backend_candidates)
            self._info(
                CORE,
                "backend_auto",
                f"Using {cfg.attention_backend} attention backend out of "
                f"potential backends: [{names}].",
            )
        if cfg.flash_attn_version is not None:
            self._info(CORE, "fa_version", f"Using FlashAttention version {cfg.flash_attn_version}")
        if self.v >= (0, 20, 0):
            ram = max(8.0, cfg.node.memory_gib * 0.72) if cfg.node.unified else 92.55
            self._info(
                CORE,
                "weights_fs",
                f"Filesystem type for checkpoints: EXT4. Checkpoint size: "
                f"{m.checkpoint_gib:.2f} GiB. Available RAM: {ram:.2f} GiB.",
            )
            self.log.emit_at(
                CORE,
                "INFO",
                log_site(self.v, "weights_fs").split(":")[0]
                + ":"
                + str(int(log_site(self.v, "weights_fs").split(":")[1]) + 23),
                "Auto-prefetch is disabled because the filesystem (EXT4) is not a "
                "recognized network FS (NFS/Lustre). If you want to force prefetching, "
                "start vLLM with --safetensors-load-strategy=prefetch.",
            )
        load_s = self._load_shards(m.shards, m.load_seconds)
        self._info(CORE, "load_weights", f"Loading weights took {load_s:.2f} seconds")
        total_s = load_s + self.clock.spend(14.0 + m.checkpoint_gib * 0.08)
        if cfg.num_spec_tokens and cfg.mtp:
            if self._has("drafter") and self.v >= (0, 19, 0):
                self._info(CORE, "drafter", "Loading drafter model...")
            draft_s = self._load_shards(max(1, m.shards // 14), 15.27 * max(1.0, m.mtp_gib / 0.79))
            self._info(CORE, "load_weights", f"Loading weights took {draft_s:.2f} seconds")
            total_s += draft_s
            self._info(
                CORE,
                "mtp_embed",
                "Detected MTP model. Sharing target model embedding weights with the draft model.",
            )
            self._info(
                CORE,
                "mtp_lmhead",
                "Detected MTP model. Sharing target model lm_head weights with the draft model.",
            )
        loaded = figures.weights_gib + figures.drafter_gib
        if self.v >= (0, 15, 0):
            self._info(
                CORE,
                "model_loading",
                f"Model loading took {format_gib(loaded)} GiB memory and {total_s:.6f} seconds",
            )
        else:
            self._info(
                CORE,
                "model_loading",
                f"Model loading took {loaded:.4f} GiB memory and {total_s:.6f} seconds",
            )
        return total_s

    def _load_shards(self, shards: int, seconds: float) -> float:
        """The safetensors progress bar; ``hang_loading`` stops it for good."""
        desc = "Loading safetensors checkpoint shards"

        def frame(done: int, elapsed: float) -> str:
            pct = int(done * 100 / shards)
            if done == 0:
                tail = "[00:00<?, ?it/s]"
            else:
                per = elapsed / done
                left = per * (shards - done)
                rate = f"{per:.2f}s/it" if per >= 1 else f"{1 / per:5.2f}it/s"
                tail = (
                    f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}<"
                    f"{int(left) // 60:02d}:{int(left) % 60:02d}, {rate}]"
                )
            return f"{desc}: {pct:3d}% Completed | {done}/{shards} {tail}"

        self.log.write_raw(self.log.prefix(CORE) + "\n")
        self.log.progress(CORE, [frame(0, 0.0)])
        per_shard = seconds / shards
        elapsed = 0.0
        for done in range(1, shards + 1):
            if self.faults.has("hang_loading") and done > max(1, shards // 3):
                self._hang()
            elapsed += self.clock.spend(per_shard)
            self.log.progress(CORE, [frame(done, elapsed)])
        self.log.progress(CORE, [frame(shards, elapsed)])
        self.log.write_raw(self.log.prefix(CORE) + "\n")
        return elapsed

    def _hang(self) -> None:
        """Weight loading that never finishes (a stuck network filesystem, say)."""
        forever = threading.Event()
        while True:
            forever.wait(3600)

    def compile_phase(self, mixed: list[int]) -> float:
        """torch.compile and the profiling run; returns the compile seconds."""
        cfg, m = self.cfg, self.cfg.model
        compile_s = 0.0
        if m.vision_gib > 0 and not cfg.language_model_only:
            self.log.emit_at(
                CORE,
                "INFO",
                log_site(self.v, "model_loading").split(":")[0]
                + ":"
                + str(int(log_site(self.v, "model_loading").split(":")[1]) + 1015),
                f"Encoder cache will be initialized with a budget of "
                f"{max(16384, cfg.max_num_batched_tokens)} tokens, and profiled with 1 "
                "image items of the maximum feature size.",
            )
        if not cfg.enforce_eager:
            tag = _hex(cfg.model_arg + cfg.version_str, 10)
            self._info(
                CORE, "dynamo", f"Dynamo bytecode transform time: {self.clock.spend(4.45):.2f} s"
            )
            self.log.emit_at(
                CORE,
                "INFO",
                log_site(self.v, "dynamo").split(":")[0]
                + ":"
                + str(int(log_site(self.v, "dynamo").split(":")[1]) - 59),
                f"Using cache directory: /root/.cache/vllm/torch_compile_cache/{tag}/"
                "rank_0_0/backbone for vLLM's torch.compile",
            )
            graph_s = self.clock.spend(28.27 * max(1.0, cfg.max_num_batched_tokens / 8192) ** 0.3)
            self._info(
                CORE,
                "compile_range",
                "Compiling a graph for compile range "
                f"(1, {cfg.max_num_batched_tokens}) takes {graph_s:.2f} s",
            )
            compile_s = 4.45 + graph_s + 2.05
            self._info(CORE, "torch_compile", f"torch.compile took {compile_s:.2f} s in total")
        if m.is_moe and m.moe_uses_triton:
            suffix = f",dtype={m.moe_triton_dtype}" if m.moe_triton_dtype else ""
            path = (
                f"{self.vllm_dir}/model_executor/layers/fused_moe/configs/E={m.moe_experts},"
                f"N={m.moe_intermediate},device_name={cfg.node.device_name_for_files}{suffix}.json"
            )
            self._warn(
                CORE,
                "moe_default",
                f"Using default MoE config. Performance might be sub-optimal! Config file "
                f"not found at {path}",
            )
        warm = self.clock.spend(2.6 + cfg.max_num_batched_tokens / 8192 * 1.5)
        self._info(CORE, "profiling_run", f"Initial profiling/warmup run took {warm:.2f} s")
        if cfg.mtp and cfg.num_spec_tokens and not cfg.enforce_eager:
            tag = _hex(cfg.model_arg + cfg.version_str, 10)
            self.log.emit_at(
                CORE,
                "INFO",
                log_site(self.v, "dynamo").split(":")[0]
                + ":"
                + str(int(log_site(self.v, "dynamo").split(":")[1]) - 59),
                f"Using cache directory: /root/.cache/vllm/torch_compile_cache/{tag}/"
                "rank_0_0/eagle_head for vLLM's torch.compile",
            )
            self._info(
                CORE, "dynamo", f"Dynamo bytecode transform time: {self.clock.spend(0.35):.2f} s"
            )
            head_s = self.clock.spend(5.57)
            self._info(
                CORE,
                "compile_range",
                "Compiling a graph for compile range "
                f"(1, {cfg.max_num_batched_tokens}) takes {head_s:.2f} s",
            )
            self._info(CORE, "torch_compile", f"torch.compile took {head_s + 0.59:.2f} s in total")
            compile_s += head_s + 0.59
            self._info(
                CORE,
                "profiling_run",
                f"Initial profiling/warmup run took {self.clock.spend(0.63):.2f} s",
            )
        return compile_s

    def kv_phase(self, figures: KvFigures, mixed: list[int], full: list[int]) -> int:
        """Memory profiling, KV-cache sizing, CUDA-graph capture; returns the KV tokens."""
        cfg = self.cfg
        if figures.padding_layers:
            self._warn(
                CORE,
                "pad_layers",
                f"Add {figures.padding_layers} padding layers, may waste at "
                f"most {figures.padding_waste_pct:.2f}% KV cache memory",
            )
        if cfg.cudagraph_downgrade:
            self._warn(CORE, "spec_downgrade", cfg.cudagraph_downgrade)
        est_gib = figures.cudagraph_bytes / GIB
        if cfg.cudagraph_mode != "NONE" and self.v >= (0, 19, 0):
            parts = []
            if cfg.cudagraph_mode in ("FULL_AND_PIECEWISE", "PIECEWISE"):
                parts.append(f"PIECEWISE={len(mixed)} (largest={max(mixed)})")
            if cfg.cudagraph_mode in ("FULL_AND_PIECEWISE", "FULL", "FULL_DECODE_ONLY"):
                parts.append(f"FULL={len(full)} (largest={max(full)})")
            self._info(CORE, "cg_profile", "Profiling CUDA graph memory: " + ", ".join(parts))
            self.clock.spend(8.0)
            self._info(CORE, "cg_est", f"Estimated CUDA graph memory: {est_gib:.2f} GiB total")
        avail_gib = figures.available_bytes / GIB
        avail_text = format_gib(avail_gib) if self.v >= (0, 15, 0) else f"{avail_gib:.2f}"
        self._info(CORE, "avail_kv", f"Available KV cache memory: {avail_text} GiB")
        total = cfg.node.total_bytes
        util = cfg.gpu_memory_utilization
        if cfg.cudagraph_mode != "NONE" and est_gib > 0:
            if self.v >= (0, 20, 0):
                self._info(
                    CORE,
                    "cg_enabled",
                    "CUDA graph memory profiling is enabled (default since v0.21.0). The "
                    f"current --gpu-memory-utilization={util:.4f} is equivalent to "
                    f"--gpu-memory-utilization={util - figures.cudagraph_bytes / total:.4f} "
                    "without CUDA graph memory profiling. To maintain the same effective KV "
                    "cache size as before, increase --gpu-memory-utilization to "
                    f"{util + figures.cudagraph_bytes / total:.4f}. To disable, set "
                    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
                )
            elif self.v >= (0, 19, 0):
                self._info(
                    CORE,
                    "cg_enabled",
                    "In v0.19, CUDA graph memory profiling will be enabled by default "
                    "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately "
                    "accounts for CUDA graph memory during KV cache allocation. To try it "
                    "now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase "
                    f"--gpu-memory-utilization from {util:.4f} to "
                    f"{util + figures.cudagraph_bytes / total:.4f} to maintain the same "
                    "effective KV cache size.",
                )
        if figures.available_bytes <= 0:
            raise self._kv_failure("no_memory", figures)
        if figures.padding_layers:
            self._warn(
                CORE,
                "pad_layers",
                f"Add {figures.padding_layers} padding layers, may waste at "
                f"most {figures.padding_waste_pct:.2f}% KV cache memory",
            )
        if figures.num_blocks < figures.blocks_per_request:
            raise self._kv_failure("too_small", figures)
        tokens = figures.kv_tokens(self.v, cfg.max_model_len)
        conc = figures.max_concurrency
        if self.v >= (0, 28, 0):
            # One line from 0.28; from 0.31 the first word is the device type ("GPU" on CUDA).
            self._info(
                CORE,
                "kv_size",
                f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency "
                f"for {cfg.max_model_len:,} tokens per request: {conc:.2f}x",
            )
        else:
            self._info(CORE, "kv_size", f"GPU KV cache size: {tokens:,} tokens")
            self._info(
                CORE,
                "max_conc",
                f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: {conc:.2f}x",
            )
        return tokens

    def _kv_failure(self, kind: str, figures: KvFigures) -> BootFailed:
        cfg = self.cfg
        core = f"{self.vllm_dir}/v1/engine/core.py"
        kvu = f"{self.vllm_dir}/v1/core/kv_cache_utils.py"
        frames = [
            (
                core,
                traceback_line(self.v, "run_engine_core"),
                "run_engine_core",
                "engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
            ),
            (core, traceback_line(self.v, "core_super_init") + 4, "__init__", "super().__init__("),
            (
                core,
                traceback_line(self.v, "core_init_call"),
                "__init__",
                "kv_cache_config = self._initialize_kv_caches(vllm_config)",
            ),
            (
                core,
                traceback_line(self.v, "get_kv_configs_call"),
                "_initialize_kv_caches",
                "kv_cache_configs = get_kv_cache_configs(",
            ),
            (
                kvu,
                traceback_line(self.v, "get_kv_configs"),
                "get_kv_cache_configs",
                "_check_enough_kv_cache_memory(",
            ),
            (
                kvu,
                traceback_line(self.v, "kv_oom_raise") + (0 if kind == "no_memory" else 18),
                "_check_enough_kv_cache_memory",
                "raise ValueError(",
            ),
        ]
        if kind == "no_memory":
            cpu_note = (
                (
                    " (this flag also controls CPU memory reservation on the CPU backend, "
                    "despite its name)"
                )
                if self.v >= (0, 22, 0)
                else ""
            )
            msg = (
                "ValueError: No available memory for the cache blocks. Try increasing "
                f"`gpu_memory_utilization` when initializing the engine{cpu_note}. See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
            )
        else:
            est = figures.estimated_max_model_len()
            est_msg = (
                (f"Based on the available memory, the estimated maximum model length is {est}. ")
                if est > 0
                else ""
            )
            msg = (
                f"ValueError: To serve at least one request with the models's max seq len "
                f"({cfg.max_model_len}), ({format_gib(figures.needed_bytes / GIB)} GiB KV cache is "
                f"needed, which is larger than the available KV cache memory "
                f"({format_gib(figures.available_bytes / GIB)} GiB). {est_msg}Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                "for more details."
            )
        return self.fail_engine_core(frames, msg)

    def capture_phase(
        self, mixed: list[int], full: list[int], compile_s: float, started: float
    ) -> None:
        """CUDA-graph capture bars and the init-engine summary.

        ``started`` is the simulated clock when engine initialisation (after loading)
        began.
        """
        cfg = self.cfg
        took = 0.0
        if cfg.cudagraph_mode != "NONE":
            bars = []
            if cfg.cudagraph_mode in ("FULL_AND_PIECEWISE", "PIECEWISE"):
                bars.append(("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)", len(mixed)))
            if cfg.cudagraph_mode in ("FULL_AND_PIECEWISE", "FULL", "FULL_DECODE_ONLY"):
                bars.append(("Capturing CUDA graphs (decode, FULL)", len(full)))
            seconds = 0.0
            for desc, count in bars:
                spent = self.clock.spend(count * 0.09)
                seconds += spent
                frames = [tqdm_bar(desc, 0, count, 0.0)]
                frames += [
                    tqdm_bar(desc, n, count, spent * n / count)
                    for n in range(max(1, count // 8), count, max(1, count // 8))
                ]
                frames.append(tqdm_bar(desc, count, count, spent))
                self.log.progress(CORE, frames)
            took = {"FULL_AND_PIECEWISE": 0.73, "PIECEWISE": 0.1}.get(cfg.cudagraph_mode, 0.5)
            self._info(
                CORE,
                "graph_done",
                f"Graph capturing finished in {max(1, round(seconds))} secs, took {took:.2f} GiB",
            )
            if self.v >= (0, 20, 0):
                est = self._cg_est
                diff = abs(est - took)
                pct = diff / took * 100 if took else 0.0
                self._info(
                    CORE,
                    "cg_pool",
                    f"CUDA graph pool memory: {took:.2f} GiB (actual), "
                    f"{est:.2f} GiB (estimated), difference: {diff:.2f} GiB ({pct:.1f}%).",
                )
        init_s = self.clock.simulated - started
        if self.v >= (0, 20, 0):
            if compile_s > 0:
                self.log.emit_at(
                    CORE,
                    "INFO",
                    log_site(self.v, "init_engine").split(":")[0]
                    + ":"
                    + str(int(log_site(self.v, "init_engine").split(":")[1]) + 10),
                    "init engine (profile, create kv cache, warmup model) took "
                    f"{init_s:.2f} s (compilation: {compile_s:.2f} s)",
                )
            else:
                self.log.emit_at(
                    CORE,
                    "INFO",
                    log_site(self.v, "init_engine").split(":")[0]
                    + ":"
                    + str(int(log_site(self.v, "init_engine").split(":")[1]) + 17),
                    f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} s",
                )
        else:
            self._info(
                CORE,
                "init_engine",
                f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} seconds",
            )

    def serve_phase(self) -> None:
        """API server lines up to (not including) uvicorn's startup lines."""
        cfg, m = self.cfg, self.cfg.model
        self._info(API, "supported_tasks", "Supported tasks: ['generate']")
        if cfg.enable_auto_tool_choice:
            self._info(API, "autotool", '"auto" tool choice has been enabled.')
        if cfg.generation_config == "auto" and m.generation_config:
            self._warn(
                API,
                "gen_config",
                "Default vLLM sampling parameters have been overridden by the model's "
                f"`generation_config.json`: `{m.generation_config!r}`. If this is not "
                "intended, please relaunch vLLM instance with `--generation-config vllm`.",
            )
        self.clock.spend(4.0)
        fmt = "openai" if m.is_hybrid else "string"
        self._info(
            API,
            "chat_fmt",
            f"Detected the chat template content format to be '{fmt}'. "
            "You can set `--chat-template-content-format` to override this.",
        )
        host = cfg.host or "0.0.0.0"
        if self.v >= (0, 19, 0):
            self._info(API, "starting_server", f"Starting vLLM server on http://{host}:{cfg.port}")
        else:
            self._info(
                API, "starting_server", f"Starting vLLM API server 0 on http://{host}:{cfg.port}"
            )
        self._info(API, "routes", "Available routes are:")
        for path, methods in ROUTES:
            self._info(API, "route", f"Route: {path}, Methods: {methods}")

    # --- the whole boot -------------------------------------------------------------

    def run(self) -> BootResult:
        """Print the boot log after the preamble; return what the server needs.

        Raises ``BootFailed`` after logging a failure.
        """
        cfg = self.cfg
        self.api_phase()
        reserved = tq_workspace_reserved()
        settings = ServeSettings(
            model=cfg.model,
            node=cfg.node,
            version=cfg.version,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            kv_cache_dtype=cfg.kv_cache_dtype,
            num_spec_tokens=cfg.num_spec_tokens,
            mtp=cfg.mtp,
            enable_prefix_caching=cfg.enable_prefix_caching,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_seqs,
            tensor_parallel_size=cfg.tensor_parallel_size,
            language_model_only=cfg.language_model_only,
            cudagraph_mode=cfg.cudagraph_mode,
            mamba_ssm_bytes=cfg.mamba_ssm_bytes,
            kv_cache_memory_bytes=cfg.kv_cache_memory_bytes,
            revision=cfg.revision,
            tq_workspace_reserved=reserved,
            kv_shrink=self.faults.value("kv_small", 0.3) if self.faults.has("kv_small") else 0.0,
            force_no_memory=self.faults.has("kv_oom"),
        )
        figures = compute(settings)
        self._cg_est = figures.cudagraph_bytes / GIB
        mixed, full = capture_sizes(cfg.max_num_seqs, cfg.num_spec_tokens)
        self.clock.spend(9.0)
        self.engine_config_line(mixed)
        self.load_phase(figures)
        if cfg.model.is_hybrid:
            self._info(
                CORE,
                "block_size",
                f"Setting attention block size to {figures.block_size} "
                "tokens to ensure that attention page size is >= mamba page size.",
            )
            if figures.mamba_padding_pct:
                self._info(
                    CORE,
                    "padding_mamba",
                    f"Padding mamba page size by "
                    f"{figures.mamba_padding_pct:.2f}% to ensure that mamba page size and "
                    "attention page size are exactly equal.",
                )
        started = self.clock.simulated
        compile_s = self.compile_phase(mixed)
        tq_unpatched = (
            cfg.kv_cache_dtype.startswith("turboquant_")
            and cfg.enable_chunked_prefill
            and not reserved
            and cfg.version >= (0, 21, 0)
        )
        # The line of the workspace request in the installed file (747 in 0.21.0).
        call_line = tq_continuation_call_line() or 747
        if tq_unpatched and os.environ.get("STANDIN_TQ_ASSERT_AT", "request") == "warmup":
            raise self.tq_warmup_failure(call_line)
        tokens = self.kv_phase(figures, mixed, full)
        self.capture_phase(mixed, full, compile_s, started)
        self.serve_phase()
        return BootResult(
            figures=figures,
            kv_tokens=tokens,
            tq_unpatched_continuation=tq_unpatched,
            tq_call_line=call_line,
        )

    def tq_warmup_failure(self, call_line: int) -> BootFailed:
        """The continuation-prefill assertion hit by a warm-up run after the workspace lock."""
        required, current = tq_workspace_sizes(self.cfg, self.cfg.max_num_batched_tokens)
        return self.fail_engine_core(
            tq_frames(self.vllm_dir, call_line),
            tq_assert_message(call_line, required, current),
        )


def tq_workspace_sizes(cfg: Resolved, cached_len: int) -> tuple[float, float]:
    """(required MB, locked MB) of the continuation-prefill workspace request."""
    m = cfg.model
    kv_heads = max(1, m.num_kv_heads // max(1, cfg.tensor_parallel_size))
    heads = max(1, m.num_attention_heads // max(1, cfg.tensor_parallel_size))
    block = 4096 if m.is_hybrid else 16
    alloc = math.ceil(max(1, cached_len) / block) * block
    one = alloc * kv_heads * m.head_dim * 2
    required = 2 * (math.ceil(one / 256) * 256)
    # Locked at the decode scratch of a one-request capture (the largest before lock).
    current = (
        math.ceil(heads * 32 * (m.head_dim + 1) * 4 / 256) * 256
        + math.ceil(heads * m.head_dim * 2 / 256) * 256
        + 256
    )
    return required / (1 << 20), current / (1 << 20)


def tq_assert_message(call_line: int, required_mb: float, current_mb: float) -> str:
    """The workspace-manager assertion (vLLM issues #41565, #41726)."""
    return (
        f"AssertionError: Workspace is locked but allocation from 'turboquant_attn.py:{call_line}:"
        f"_continuation_prefill' requires {required_mb:.2f} MB, current size is "
        f"{current_mb:.2f} MB. Workspace growth is not allowed after locking."
    )


def tq_frames(vllm_dir: str, call_line: int) -> list[tuple[str, int, str, str]]:
    """The stack down to the workspace request."""
    tq = f"{vllm_dir}/v1/attention/backends/turboquant_attn.py"
    return [
        (f"{vllm_dir}/v1/engine/core.py", 1156, "run_busy_loop", "self._process_engine_step()"),
        (
            f"{vllm_dir}/v1/engine/core.py",
            1192,
            "_process_engine_step",
            "outputs, model_executed = self.step_fn()",
        ),
        (
            f"{vllm_dir}/v1/worker/gpu_model_runner.py",
            3702,
            "execute_model",
            "model_output = self._model_forward(",
        ),
        (
            f"{vllm_dir}/model_executor/layers/attention/attention.py",
            702,
            "unified_attention_with_output",
            "self.impl.forward(",
        ),
        (tq, 520, "forward", "out = self._prefill_attention("),
        (tq, 690, "_prefill_attention", "out = self._continuation_prefill("),
        (
            tq,
            call_line,
            "_continuation_prefill",
            "k_buf, v_buf = current_workspace_manager().get_simultaneous(",
        ),
        (
            f"{vllm_dir}/v1/worker/workspace.py",
            111,
            "get_simultaneous",
            "current_workspace = self._ensure_workspace_size(total_bytes)",
        ),
        (
            f"{vllm_dir}/v1/worker/workspace.py",
            157,
            "_ensure_workspace_size",
            "raise AssertionError(",
        ),
    ]

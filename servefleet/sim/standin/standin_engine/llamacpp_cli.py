"""``llama-server`` command line (llama.cpp ``common/arg.cpp`` behaviour).

The option table is the server's parameter list from llama.cpp's generated README
(``tools/server/README.md``), plus spellings older builds still accept. Parsing follows
``common_params_parse_ex``: ``_`` becomes ``-`` in ``--`` options, an unknown option is
``error: invalid argument: X`` (exit 1), a missing value is reported as
``error while handling argument "X": expected value for argument``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# One option per line: "names | value hint | env var". An empty hint means a switch;
# a hint in brackets takes an on/off/auto value.
_TABLE = """
-h, --help, --usage | |
--version | |
-cl, --cache-list | |
--completion-bash | |
--verbose-prompt | |
-t, --threads | N | LLAMA_ARG_THREADS
-tb, --threads-batch | N |
-C, --cpu-mask | M |
-Cr, --cpu-range | lo-hi |
--cpu-strict | <0|1> |
--prio | N |
--poll | <0...100> |
-Cb, --cpu-mask-batch | M |
-Crb, --cpu-range-batch | lo-hi |
--cpu-strict-batch | <0|1> |
--prio-batch | N |
--poll-batch | <0|1> |
-c, --ctx-size | N | LLAMA_ARG_CTX_SIZE
-n, --predict, --n-predict | N | LLAMA_ARG_N_PREDICT
-b, --batch-size | N | LLAMA_ARG_BATCH
-ub, --ubatch-size | N | LLAMA_ARG_UBATCH
--keep | N |
--swa-full | | LLAMA_ARG_SWA_FULL
-fa, --flash-attn | [on|off|auto] | LLAMA_ARG_FLASH_ATTN
--perf, --no-perf | | LLAMA_ARG_PERF
-e, --escape, --no-escape | |
--rope-scaling | {none,linear,yarn} | LLAMA_ARG_ROPE_SCALING_TYPE
--rope-scale | N | LLAMA_ARG_ROPE_SCALE
--rope-freq-base | N | LLAMA_ARG_ROPE_FREQ_BASE
--rope-freq-scale | N | LLAMA_ARG_ROPE_FREQ_SCALE
--yarn-orig-ctx | N | LLAMA_ARG_YARN_ORIG_CTX
--yarn-ext-factor | N | LLAMA_ARG_YARN_EXT_FACTOR
--yarn-attn-factor | N | LLAMA_ARG_YARN_ATTN_FACTOR
--yarn-beta-slow | N | LLAMA_ARG_YARN_BETA_SLOW
--yarn-beta-fast | N | LLAMA_ARG_YARN_BETA_FAST
-kvo, --kv-offload, -nkvo, --no-kv-offload | | LLAMA_ARG_KV_OFFLOAD
--repack, -nr, --no-repack | | LLAMA_ARG_REPACK
--no-host | | LLAMA_ARG_NO_HOST
-ctk, --cache-type-k | TYPE | LLAMA_ARG_CACHE_TYPE_K
-ctv, --cache-type-v | TYPE | LLAMA_ARG_CACHE_TYPE_V
-dt, --defrag-thold | N | LLAMA_ARG_DEFRAG_THOLD
--rpc | SERVERS | LLAMA_ARG_RPC
--mlock | | LLAMA_ARG_MLOCK
--mmap, --no-mmap | | LLAMA_ARG_MMAP
-dio, --direct-io, -ndio, --no-direct-io | | LLAMA_ARG_DIO
-lm, --load-mode | MODE | LLAMA_ARG_LOAD_MODE
-lzm, --lazy-mode | MODE | LLAMA_ARG_LAZY_MODE
--numa | TYPE | LLAMA_ARG_NUMA
-dev, --device | <dev1,dev2,..> | LLAMA_ARG_DEVICE
--list-devices | |
-ot, --override-tensor | <tensor name pattern>=<buffer type>,... | LLAMA_ARG_OVERRIDE_TENSOR
-cmoe, --cpu-moe | | LLAMA_ARG_CPU_MOE
-ncmoe, --n-cpu-moe | N | LLAMA_ARG_N_CPU_MOE
--moe-cache-mib | N | LLAMA_ARG_MOE_CACHE_MIB
-ncffn, --n-cpu-ffn | N | LLAMA_ARG_N_CPU_FFN
-ngl, --gpu-layers, --n-gpu-layers | N | LLAMA_ARG_N_GPU_LAYERS
-sm, --split-mode | {none,layer,row,tensor} | LLAMA_ARG_SPLIT_MODE
-ts, --tensor-split | N0,N1,N2,... | LLAMA_ARG_TENSOR_SPLIT
-mg, --main-gpu | INDEX | LLAMA_ARG_MAIN_GPU
-fit, --fit | [on|off] | LLAMA_ARG_FIT
-fitt, --fit-target | MiB0,MiB1,MiB2,... | LLAMA_ARG_FIT_TARGET
-fitc, --fit-ctx | N | LLAMA_ARG_FIT_CTX
--check-tensors | |
--override-kv | KEY=TYPE:VALUE,... |
--op-offload, --no-op-offload | |
--lora | FNAME |
--lora-scaled | FNAME:SCALE,... |
--control-vector | FNAME |
--control-vector-scaled | FNAME:SCALE,... |
--control-vector-layer-range | START END |
-m, --model | FNAME | LLAMA_ARG_MODEL
-mu, --model-url | MODEL_URL | LLAMA_ARG_MODEL_URL
-dr, --docker-repo | [<repo>/]<model>[:quant] | LLAMA_ARG_DOCKER_REPO
-hf, -hfr, --hf-repo | <user>/<model>[:quant] | LLAMA_ARG_HF_REPO
-hff, --hf-file | FILE | LLAMA_ARG_HF_FILE
-hfv, -hfrv, --hf-repo-v | <user>/<model>[:quant] | LLAMA_ARG_HF_REPO_V
-hffv, --hf-file-v | FILE | LLAMA_ARG_HF_FILE_V
-hft, --hf-token | TOKEN | HF_TOKEN
--log-disable | |
--log-file | FNAME | LLAMA_ARG_LOG_FILE
--log-jsonl, --no-log-jsonl | | LLAMA_ARG_LOG_JSONL
--log-colors | [on|off|auto] | LLAMA_ARG_LOG_COLORS
-v, --verbose, --log-verbose | |
--offline | | LLAMA_ARG_OFFLINE
-lv, --verbosity, --log-verbosity | N | LLAMA_ARG_LOG_VERBOSITY
--log-prefix, --no-log-prefix | | LLAMA_ARG_LOG_PREFIX
--log-timestamps, --no-log-timestamps | | LLAMA_ARG_LOG_TIMESTAMPS
--spec-draft-type-k, -ctkd, --cache-type-k-draft | TYPE | LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K
--spec-draft-type-v, -ctvd, --cache-type-v-draft | TYPE | LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V
--samplers | SAMPLERS |
-s, --seed | SEED |
--sampler-seq, --sampling-seq | SEQUENCE |
--ignore-eos | |
--temp, --temperature | N | LLAMA_ARG_TEMPERATURE
--top-k | N | LLAMA_ARG_TOP_K
--top-p | N | LLAMA_ARG_TOP_P
--min-p | N | LLAMA_ARG_MIN_P
--top-nsigma, --top-n-sigma | N |
--xtc-probability | N |
--xtc-threshold | N |
--typical, --typical-p | N |
--repeat-last-n | N |
--repeat-penalty | N | LLAMA_ARG_REPEAT_PENALTY
--presence-penalty | N | LLAMA_ARG_PRESENCE_PENALTY
--frequency-penalty | N | LLAMA_ARG_FREQUENCY_PENALTY
--dry-multiplier | N |
--dry-base | N |
--dry-allowed-length | N |
--dry-penalty-last-n | N |
--dry-sequence-breaker | STRING |
--adaptive-target | N |
--adaptive-decay | N |
--dynatemp-range | N |
--dynatemp-exp | N |
--mirostat | N |
--mirostat-lr | N |
--mirostat-ent | N |
-l, --logit-bias | TOKEN_ID(+/-)BIAS |
--grammar | GRAMMAR |
--grammar-file | FNAME |
-j, --json-schema | SCHEMA |
-jf, --json-schema-file | FILE |
-bs, --backend-sampling | | LLAMA_ARG_BACKEND_SAMPLING
-lcs, --lookup-cache-static | FNAME |
-lcd, --lookup-cache-dynamic | FNAME |
--kv-unified-per-slot | N | LLAMA_ARG_KV_UNIFIED_PER_SLOT
-ctxcp, --ctx-checkpoints, --swa-checkpoints | N | LLAMA_ARG_CTX_CHECKPOINTS
-cms, --checkpoint-min-step | N | LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT
-cram, --cache-ram | N | LLAMA_ARG_CACHE_RAM
-kvu, --kv-unified, -no-kvu, --no-kv-unified | | LLAMA_ARG_KV_UNIFIED
--cache-idle-slots, --no-cache-idle-slots | | LLAMA_ARG_CACHE_IDLE_SLOTS
--context-shift, --no-context-shift | | LLAMA_ARG_CONTEXT_SHIFT
-r, --reverse-prompt | PROMPT |
-sp, --special | |
--warmup, --no-warmup | |
--spm-infill | |
--pooling | {none,mean,cls,last,rank} | LLAMA_ARG_POOLING
-np, --parallel | N | LLAMA_ARG_N_PARALLEL
-cb, --cont-batching, -nocb, --no-cont-batching | | LLAMA_ARG_CONT_BATCHING
-mm, --mmproj | FILE | LLAMA_ARG_MMPROJ
-mmu, --mmproj-url | URL | LLAMA_ARG_MMPROJ_URL
--mmproj-auto, --no-mmproj, --no-mmproj-auto | | LLAMA_ARG_MMPROJ_AUTO
--mmproj-offload, --no-mmproj-offload | | LLAMA_ARG_MMPROJ_OFFLOAD
-mmdev, --mmproj-device | DEVICE | MTMD_BACKEND_DEVICE
--image-min-tokens | N | LLAMA_ARG_IMAGE_MIN_TOKENS
--image-max-tokens | N | LLAMA_ARG_IMAGE_MAX_TOKENS
-a, --alias | STRING | LLAMA_ARG_ALIAS
--tags | STRING | LLAMA_ARG_TAGS
--embd-normalize | N |
--host | HOST | LLAMA_ARG_HOST
--port | PORT | LLAMA_ARG_PORT
--reuse-port | | LLAMA_ARG_REUSE_PORT
--path | PATH | LLAMA_ARG_STATIC_PATH
--api-prefix | PREFIX | LLAMA_ARG_API_PREFIX
--webui-config | JSON | LLAMA_ARG_WEBUI_CONFIG
--webui-config-file | PATH | LLAMA_ARG_WEBUI_CONFIG_FILE
--webui, --no-webui | | LLAMA_ARG_WEBUI
--embedding, --embeddings | | LLAMA_ARG_EMBEDDINGS
--rerank, --reranking | | LLAMA_ARG_RERANKING
--api-key | KEY | LLAMA_API_KEY
--api-key-file | FNAME |
--ssl-key-file | FNAME | LLAMA_ARG_SSL_KEY_FILE
--ssl-cert-file | FNAME | LLAMA_ARG_SSL_CERT_FILE
--chat-template-kwargs | STRING | LLAMA_ARG_CHAT_TEMPLATE_KWARGS
-to, --timeout | N | LLAMA_ARG_TIMEOUT
--threads-http | N | LLAMA_ARG_THREADS_HTTP
--cache-prompt, --no-cache-prompt | | LLAMA_ARG_CACHE_PROMPT
--cache-reuse | N | LLAMA_ARG_CACHE_REUSE
--metrics | | LLAMA_ARG_ENDPOINT_METRICS
--props | | LLAMA_ARG_ENDPOINT_PROPS
--slots, --no-slots | | LLAMA_ARG_ENDPOINT_SLOTS
--slot-save-path | PATH |
--media-path | PATH |
--models-dir | PATH | LLAMA_ARG_MODELS_DIR
--models-preset | PATH | LLAMA_ARG_MODELS_PRESET
--models-max | N | LLAMA_ARG_MODELS_MAX
--models-autoload, --no-models-autoload | | LLAMA_ARG_MODELS_AUTOLOAD
--jinja, --no-jinja | | LLAMA_ARG_JINJA
--reasoning-format | FORMAT | LLAMA_ARG_THINK
-rea, --reasoning | [on|off|auto] | LLAMA_ARG_REASONING
--reasoning-budget | N | LLAMA_ARG_THINK_BUDGET
--reasoning-budget-message | MESSAGE | LLAMA_ARG_THINK_BUDGET_MESSAGE
--chat-template | JINJA_TEMPLATE | LLAMA_ARG_CHAT_TEMPLATE
--chat-template-file | JINJA_TEMPLATE_FILE | LLAMA_ARG_CHAT_TEMPLATE_FILE
--skip-chat-parsing, --no-skip-chat-parsing | | LLAMA_ARG_SKIP_CHAT_PARSING
--prefill-assistant, --no-prefill-assistant | | LLAMA_ARG_PREFILL_ASSISTANT
-sps, --slot-prompt-similarity | SIMILARITY |
--lora-init-without-apply | |
--sleep-idle-seconds | SECONDS |
-hfd, -hfrd, --hf-repo-draft | <user>/<model>[:quant] | LLAMA_ARG_HFD_REPO
-td, --threads-draft | N |
-tbd, --threads-batch-draft | N |
-md, --model-draft | FNAME | LLAMA_ARG_MODEL_DRAFT
-devd, --device-draft | <dev1,dev2,..> |
-ngld, --gpu-layers-draft, --n-gpu-layers-draft | N | LLAMA_ARG_N_GPU_LAYERS_DRAFT
--draft, --draft-n, --draft-max | N | LLAMA_ARG_DRAFT_MAX
--draft-min, --draft-n-min | N | LLAMA_ARG_DRAFT_MIN
--draft-p-min | P | LLAMA_ARG_DRAFT_P_MIN
--spec-type | TYPES | LLAMA_ARG_SPEC_TYPE
--spec-draft-n-max | N | LLAMA_ARG_SPEC_DRAFT_N_MAX
--spec-draft-n-min | N | LLAMA_ARG_SPEC_DRAFT_N_MIN
--spec-draft-model | FNAME | LLAMA_ARG_SPEC_DRAFT_MODEL
--spec-replace | TARGET DRAFT |
--no-warmup-draft | |
--embd-gemma-default | |
--fim-qwen-1.5b-default | |
--fim-qwen-3b-default | |
--fim-qwen-7b-default | |
--fim-qwen-7b-spec | |
--fim-qwen-14b-spec | |
--fim-qwen-30b-default | |
--gpt-oss-20b-default | |
--gpt-oss-120b-default | |
--vision-gemma-4b-default | |
--vision-gemma-12b-default | |
--spec-default | |
"""

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


@dataclass(frozen=True)
class Option:
    """One ``llama-server`` option."""

    names: tuple[str, ...]
    """Every spelling."""
    hint: str
    """Value placeholder ("" for switches)."""
    env: str
    """Environment variable that sets it ("" if none)."""

    @property
    def key(self) -> str:
        """The canonical (longest ``--``) name, e.g. ``--ctx-size``."""
        longs = [n for n in self.names if n.startswith("--") and not n.startswith("--no-")]
        return max(longs or list(self.names), key=len)

    @property
    def takes_value(self) -> bool:
        """The option consumes the next argument."""
        return bool(self.hint)

    @property
    def two_values(self) -> bool:
        """Options such as ``--control-vector-layer-range START END``."""
        return " " in self.hint and not self.hint.startswith(("<", "[", "{"))


def _options() -> list[Option]:
    out = []
    for line in _TABLE.strip().splitlines():
        # Split on the first and last "|" only: hints like "[on|off|auto]" contain pipes.
        first, last = line.index("|"), line.rindex("|")
        names = tuple(n.strip() for n in line[:first].split(","))
        out.append(Option(names, line[first + 1 : last].strip(), line[last + 1 :].strip()))
    return out


OPTIONS = _options()
BY_NAME = {name: opt for opt in OPTIONS for name in opt.names}


class ArgError(Exception):
    """A command-line error as llama.cpp prints it (exit status 1)."""


@dataclass
class ServerArgs:
    """The options the stand-in acts on (everything else is accepted and ignored)."""

    values: dict[str, str]
    """Canonical option name -> value ("1"/"0" for switches)."""

    def get(self, key: str, default: str | None = None) -> str | None:
        """Raw value of ``--key`` (canonical spelling)."""
        return self.values.get(key, default)

    def flag(self, key: str, default: bool = False) -> bool:
        """A switch or on/off option."""
        raw = self.values.get(key)
        if raw is None:
            return default
        return raw.lower() in ("1", "true", "on", "enabled")

    def integer(self, key: str, default: int) -> int:
        """An integer option."""
        raw = self.values.get(key)
        return default if raw is None else int(raw)


def _is_negative(name: str) -> bool:
    return name.startswith(("--no-", "-no-")) or name in ("-nkvo", "-nr", "-nocb", "-ndio")


def _usage(opt: Option) -> str:
    names = ", ".join(opt.names)
    return f"{names} {opt.hint}".rstrip()


def parse(argv: list[str], env: Mapping[str, str], build: int) -> ServerArgs:
    """Parse like ``common_params_parse``; raises ``ArgError`` with llama.cpp's message."""
    values: dict[str, str] = {}
    warnings: list[str] = []
    for opt in OPTIONS:
        if opt.env and env.get(opt.env) not in (None, ""):
            values[opt.key] = env[opt.env]
    seen_env = dict(values)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            arg = arg.replace("_", "-")
        found = BY_NAME.get(arg)
        if found is None:
            raise ArgError(f"error: invalid argument: {arg}")
        opt = found
        if opt.key in seen_env and opt.env:
            warnings.append(
                f"warn: {opt.env} environment variable is set, but will be overwritten "
                f"by command line argument {arg}"
            )
        if opt.key == "--flash-attn" and build < 6200:
            values[opt.key] = "1"
            i += 1
            continue
        if not opt.takes_value:
            values[opt.key] = "0" if _is_negative(arg) else "1"
            i += 1
            continue
        if i + 1 >= len(argv):
            raise ArgError(
                f'error while handling argument "{arg}": expected value for argument\n\n'
                f"usage:\n{_usage(opt)}\n\nto show complete usage, run with -h"
            )
        value = argv[i + 1]
        _validate(arg, opt, value)
        values[opt.key] = value
        i += 2
        if opt.two_values:
            if i >= len(argv):
                raise ArgError(
                    f'error while handling argument "{arg}": expected value for '
                    f"argument\n\nusage:\n{_usage(opt)}\n\nto show complete usage, run "
                    "with -h"
                )
            values[opt.key] += " " + argv[i]
            i += 1
    return ServerArgs(values) if not warnings else _with_warnings(values, warnings)


def _with_warnings(values: dict[str, str], warnings: list[str]) -> ServerArgs:
    import sys

    for line in warnings:
        print(line, file=sys.stderr)
    return ServerArgs(values)


def _validate(arg: str, opt: Option, value: str) -> None:
    def fail(why: str) -> None:
        raise ArgError(
            f'error while handling argument "{arg}": {why}\n\nusage:\n{_usage(opt)}\n\n'
            "to show complete usage, run with -h"
        )

    if opt.hint == "N" and opt.key not in (
        "--n-gpu-layers",
        "--gpu-layers-draft",
        "--n-gpu-layers-draft",
    ):
        if opt.key in (
            "--rope-scale",
            "--rope-freq-base",
            "--rope-freq-scale",
            "--temp",
            "--top-p",
            "--min-p",
            "--repeat-penalty",
            "--presence-penalty",
            "--frequency-penalty",
            "--typical",
            "--top-nsigma",
            "--xtc-probability",
            "--xtc-threshold",
            "--dry-multiplier",
            "--dry-base",
            "--dynatemp-range",
            "--dynatemp-exp",
            "--mirostat-lr",
            "--mirostat-ent",
            "--adaptive-target",
            "--adaptive-decay",
            "--yarn-ext-factor",
            "--yarn-attn-factor",
            "--yarn-beta-slow",
            "--yarn-beta-fast",
            "--defrag-thold",
        ):
            try:
                float(value)
            except ValueError:
                fail("stof")
        elif not re.fullmatch(r"[-+]?\d+", value.strip()):
            fail("stoi")
    if (
        opt.key == "--n-gpu-layers"
        and value not in ("auto", "all")
        and not re.fullmatch(r"-?\d+", value)
    ):
        fail("stoi")
    if opt.hint.startswith("[on|off"):
        allowed = ("on", "off", "auto", "enabled", "disabled", "1", "0", "true", "false")
        if value.lower() not in allowed:
            fail(f"error: unknown value for {opt.key}: '{value}'\n")
    if opt.key in ("--cache-type-k", "--cache-type-v") and value not in CACHE_TYPES:
        fail(f"Unsupported cache type: {value}")
    if opt.hint.startswith("{") and value not in opt.hint.strip("{}").split(","):
        fail(f"error: unknown value for {opt.key}: '{value}'\n")

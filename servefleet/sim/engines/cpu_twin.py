#!/usr/bin/python3
"""The engine process of a simulated node: the real CPU engine, or the stand-in for a fault.

Runs inside the node's container as its entrypoint (stdlib only: it runs on the image's
``python3`` and never imports servefleet). It receives exactly the command line a real
node's engine gets (the rendered compose ``command``), then:

- when the node's control folder holds a fault marker (``fault``, see the stand-in's README),
  it runs the stand-in engine, which can show that fault on this machine; so it does when
  the node file lists the engine as a stand-in (``SIM_STANDIN=1``, set by the override);
- otherwise it runs the real engine mounted at ``/opt/servefleet-engine`` on the tiny model
  mounted under ``/opt/servefleet-models``, after the rewrites below: each one is a flag the
  CPU build cannot take as a GPU node takes it, and each is printed at the top of the boot
  log with its reason, so nothing is dropped silently.

This file is the one list of how a profile's command changes on a simulated node.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

MARK = "servefleet-sim:"
"""Prefix of the lines this file adds to the boot log."""


@dataclass(frozen=True)
class Rewrite:
    """One flag of a profile's command line that changes on the CPU engine."""

    flags: tuple[str, ...]
    """The flag's spellings (``--kv-cache-dtype``)."""
    action: str
    """``drop`` (flag and value), ``set`` (value → :attr:`value`), ``ngram`` (speculative
    decoding → n-gram drafting with the same number of tokens), ``model`` (the model file
    or id → the tiny twin), ``kvspace`` (kept, and ``VLLM_CPU_KVCACHE_SPACE`` unset so
    that the flag sizes the KV pool)."""
    why: str
    """Printed in the boot log."""
    value: str | None = None
    keep: tuple[str, ...] = ()
    """Values left as they are (``auto`` for a KV dtype)."""
    only: tuple[str, ...] = ()
    """If given, the only values the rule changes (others are left as they are)."""


VLLM_REWRITES: tuple[Rewrite, ...] = (
    Rewrite(("--attention-backend",), "drop",
            "the CPU build has one attention backend (CPU_ATTN); GPU backends such as "
            "FLASHINFER do not exist there"),
    Rewrite(("--hf-overrides",), "drop",
            "the overrides address the Qwen3.6 checkpoint's config (its text_config), which "
            "the tiny Qwen3-MoE twin has not (vLLM refuses them there); the twin keeps its "
            "native RoPE window, and a longer max_model_len needs "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN, as the YaRN profiles set"),
    Rewrite(("--quantization", "-q"), "drop",
            "the tiny twin is an unquantized checkpoint (FP8/NVFP4 kernels are GPU-only)"),
    Rewrite(("--gpu-memory-utilization",), "drop",
            "no GPU: the CPU build sizes its KV pool from VLLM_CPU_KVCACHE_SPACE instead"),
    Rewrite(("--kv-cache-memory-bytes",), "kvspace",
            "the KV budget in bytes means the same to the CPU build as to a GPU one, but "
            "VLLM_CPU_KVCACHE_SPACE (whole GiB, set for every node) would win over it "
            "(vllm/platforms/cpu.py): the variable is unset so the flag sizes the pool "
            "(servefleet tune --node <sim node> writes this flag)"),
    Rewrite(("--compilation-config", "-O", "--optimization-level"), "drop",
            "compilation settings choose CUDA graphs and inductor passes; the CPU engine runs "
            "eager (see the flags added below)"),
    Rewrite(("--speculative-config",), "ngram",
            "MTP draft heads need the real checkpoint's MTP layers, which the tiny twin has "
            "not; n-gram drafting exercises the same speculative path, counters included "
            "(no draft model, no PIECEWISE fallback, no KV shrink as on a GB10)"),
)
VLLM_ADDED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--enforce-eager",),
     "torch.compile's CPU backend (inductor) needs a C++ compiler at boot, which the node "
     "image has not, and would add minutes per boot on two cores; eager mode runs the same "
     "model code"),
)
"""Flags (with their values) the CPU engine gets that a GPU node's does not, and why."""
LLAMACPP_ADDED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--override-kv", "qwen35moe.context_length=int:262144"),
     "the tiny twin was written with a 256-token training context, and llama-server caps "
     "every slot to it; Qwen3.6's own native context (262144) lets the profile's ctx_size "
     "reach the engine as on a real node"),
)
LLAMACPP_REWRITES: tuple[Rewrite, ...] = (
    Rewrite(("-m", "--model"), "model",
            "the profile's GGUF is tens of GiB; the tiny twin is a random model of the same "
            "architecture (qwen35moe) written by llama.cpp's test-llama-archs"),
)
FP8_KV_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")
FP8_KV_REWRITE = Rewrite(
    ("--kv-cache-dtype",), "set",
    "vLLM's CPU build keeps an FP8 KV cache only on x86 with AVX-512 or AMX "
    "(NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX), which this "
    "machine's CPU lacks: the pool is the model dtype's, twice the bytes a token",
    value="auto", only=FP8_KV_DTYPES)
"""Applied only where the host CPU cannot keep an FP8 KV cache (:func:`fp8_kv_cache_here`)."""


def fp8_kv_cache_here(cpuinfo: str | None = None) -> bool:
    """Whether vLLM's CPU build can keep an FP8 KV cache on this machine: x86 with AVX-512
    (``avx512f``) or AMX (``amx_tile``) in ``/proc/cpuinfo``'s flags."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return bool(flags & {"avx512f", "amx_tile"})


KV_BYTES_FLAG = "--kv-cache-memory-bytes"
REWRITES = {"vllm": VLLM_REWRITES, "llama.cpp": LLAMACPP_REWRITES}
ADDED = {"vllm": VLLM_ADDED, "llama.cpp": LLAMACPP_ADDED}

UNSHOWN = {
    "vllm": {
        "cudagraph_mode": "no CUDA graphs on a CPU",
        "attention_backend": "one CPU attention backend, whatever the profile selects",
        "kv_smaller_than": "n-gram drafting keeps no draft state in the KV pool, so the "
                           "pool does not shrink as it does with MTP on a GB10",
        "predicted_kv_cache_tokens": "the pool is VLLM_CPU_KVCACHE_SPACE on the tiny twin, "
                                     "not what the GPU of the node's shape would leave",
    },
    "llama.cpp": {},
}
"""Boot facts of a GPU node that the CPU build cannot show, per engine, with the reason;
the node's inventory lists them (``sim.engines``) so the health gate and drift do not
expect them."""

STANDIN = {"vllm": ["vllm", "serve"], "llama.cpp": ["/app/llama-server"]}
"""The stand-in image's own entrypoints (servefleet/sim/standin/Dockerfile.*)."""
ENGINE_MOUNT = "/opt/servefleet-engine"
"""Where the real engine is mounted; its commands come first on the node's PATH, as a real
image has them, and are taken off it for the stand-in."""


def without_real_engine() -> None:
    """Take the real engine's commands off PATH: the stand-in's ``vllm`` must answer."""
    path = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join(p for p in path if not p.startswith(ENGINE_MOUNT))


def _split(arg: str) -> tuple[str, str | None]:
    """``--flag=value`` → (``--flag``, ``value``); ``-O3`` → (``-O``, ``3``)."""
    if arg.startswith("-O") and len(arg) > 2 and arg[2:].isdigit():
        return "-O", arg[2:]
    flag, sep, value = arg.partition("=")
    return (flag, value) if sep and arg.startswith("-") else (arg, None)


def _rule_key(flag: str) -> str:
    """``--compilation-config.cudagraph_mode`` is a ``--compilation-config`` flag."""
    return flag.split(".", 1)[0] if flag.startswith("--") else flag


def _ngram(value: str) -> str:
    try:
        config = json.loads(value)
    except ValueError:
        config = {}
    tokens = config.get("num_speculative_tokens", 2) if isinstance(config, dict) else 2
    return json.dumps({"method": "ngram", "num_speculative_tokens": tokens,
                       "prompt_lookup_max": 4, "prompt_lookup_min": 2},
                      separators=(",", ":"))


STAGED_WHY = ("servefleet staged it before the stop (HF_HUB_OFFLINE=1): the test bed's hub "
              "serves the tiny twin under the profile's name, so the engine loads the staged "
              "files as a GPU node would")


def staged_here(value: str, args: list[str]) -> bool:
    """Whether the model ``value`` names was staged on this node by servefleet: the engine
    runs offline and the file (a GGUF path) or the snapshot of ``--revision`` (a
    repository) is there."""
    if os.environ.get("HF_HUB_OFFLINE") != "1":
        return False
    if value.startswith("/"):
        return os.path.isfile(value)
    revision = next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--revision"),
                    None)
    home = os.environ.get("HF_HOME", "/root/.cache/huggingface")
    return revision is not None and os.path.isdir(os.path.join(
        home, "hub", "models--" + value.replace("/", "--"), "snapshots", revision))


def rewrite(engine: str, args: list[str], model: str,
            fp8_kv: bool | None = None,
            staged: Callable[[str], bool] = lambda _value: False,
            ) -> tuple[list[str], list[str]]:
    """``args`` (a profile's engine command) as the CPU engine takes it, and one note per
    change. ``model`` is the tiny twin's path inside the container; ``fp8_kv``: whether the
    machine keeps an FP8 KV cache (None: read from ``/proc/cpuinfo``); ``staged``: whether a
    model value was staged here (then it stays, see :func:`staged_here`)."""
    table = {flag: rule for rule in REWRITES.get(engine, ()) for flag in rule.flags}
    if fp8_kv is None:
        fp8_kv = fp8_kv_cache_here()
    if engine == "vllm" and not fp8_kv:
        table.update({flag: FP8_KV_REWRITE for flag in FP8_KV_REWRITE.flags})
    out: list[str] = []
    notes: list[str] = []
    index = 0
    if engine == "vllm" and args and not args[0].startswith("-") and staged(args[0]):
        notes.append(f"model {args[0]} kept: {STAGED_WHY}")
        out.append(args[0])
        index = 1
    elif engine == "vllm" and args and not args[0].startswith("-"):
        notes.append(f"model {args[0]} → the tiny twin {model}: a random checkpoint of the "
                     "same architecture family (Qwen3-MoE) that the CPU build serves in "
                     "seconds")
        out.append(model)
        if "--served-model-name" not in args:
            out += ["--served-model-name", args[0]]
        index = 1
    while index < len(args):
        flag, inline = _split(args[index])
        rule = table.get(_rule_key(flag))
        takes_value = inline is None and index + 1 < len(args) and \
            not args[index + 1].startswith("--")
        value = inline if inline is not None else (args[index + 1] if takes_value else None)
        step = 1 if inline is not None or not takes_value else 2
        if rule is None or (value is not None and value in rule.keep) or (
                rule.only and value not in rule.only):
            out += args[index:index + step]
        elif rule.action == "drop":
            notes.append(f"{flag} {value or ''} dropped: {rule.why}".replace("  ", " "))
        elif rule.action == "ngram":
            new = _ngram(value or "{}")
            notes.append(f"{flag} {value} → {new}: {rule.why}")
            out += [flag, new]
        elif rule.action == "kvspace":
            notes.append(f"{flag} {value} kept, VLLM_CPU_KVCACHE_SPACE unset: {rule.why}")
            out += args[index:index + step]
        elif rule.action == "model" and value is not None and staged(value):
            notes.append(f"{flag} {value} kept: {STAGED_WHY}")
            out += args[index:index + step]
        elif rule.action == "model":
            notes.append(f"{flag} {value} → {model}: {rule.why}")
            out += [flag, model]
        elif rule.action == "set" and rule.value is not None:
            notes.append(f"{flag} {value} → {rule.value}: {rule.why}")
            out += [flag, rule.value]
        index += step
    for added, why in ADDED.get(engine, ()):
        if added[0] not in out:
            out += added
            notes.append(f"{' '.join(added)} added: {why}")
    return out, notes


def _words(control_dir: str, name: str) -> list[str]:
    try:
        with open(os.path.join(control_dir, name), encoding="utf-8") as handle:
            return [w.strip() for w in handle.read().split() if w.strip()]
    except OSError:
        return []


STANDIN_ENV = "SIM_STANDIN"
"""Set to ``1`` by the node's compose override where the node file does not list the engine
as running for real (``sim.engines``): the stand-in runs though the real build is mounted."""


def fault_words(control_dir: str) -> list[str]:
    """The fault markers set for this node (one word per line of ``fault``)."""
    return _words(control_dir, "fault")


def main(argv: list[str]) -> int:
    """``cpu_twin.py ENGINE ARGS…``: exec the stand-in or the real engine."""
    if not argv or argv[0] not in REWRITES:
        print(f"{MARK} usage: cpu_twin.py vllm|llama.cpp ARGS…", file=sys.stderr)
        return 2
    engine, args = argv[0], argv[1:]
    control = os.environ.get("STANDIN_CONTROL_DIR", "/standin-control")
    faults = fault_words(control)
    if faults:
        print(f"{MARK} fault marker(s) {', '.join(faults)} set: the stand-in engine runs, "
              "as only it can show them here", flush=True)
        command = [*STANDIN[engine], *args]
        without_real_engine()
    elif os.environ.get(STANDIN_ENV) == "1":
        print(f"{MARK} the node file lists no real {engine} (sim.engines): the stand-in "
              "engine runs", flush=True)
        command = [*STANDIN[engine], *args]
        without_real_engine()
    else:
        entry = json.loads(os.environ["SIM_ENGINE_ENTRYPOINT"])
        original = list(args)
        args, notes = rewrite(engine, args, os.environ["SIM_ENGINE_MODEL"],
                              staged=lambda value: staged_here(value, original))
        if any(_rule_key(_split(a)[0]) == KV_BYTES_FLAG for a in args):
            os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
        print(f"{MARK} the real {engine} {os.environ.get('SIM_ENGINE_VERSION', '')} "
              "(CPU build) runs in place of the GPU image", flush=True)
        for note in notes:
            print(f"{MARK} {note}", flush=True)
        if engine == "vllm" and "serve" not in entry:
            entry.append("serve")
        command = [*entry, *args]
    os.execvp(command[0], command)
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Which engine a container's process runs, and the engine's own arguments.

The process is ``docker inspect``'s ``Path`` + ``Args`` (ENTRYPOINT + CMD). Recognised:

- vLLM: ``vllm serve MODEL …`` (ENTRYPOINT of newer ``vllm/vllm-openai``), ``python3 -m
  vllm.entrypoints.openai.api_server --model MODEL …`` (older images);
- llama.cpp: ``/app/llama-server …`` (``ghcr.io/ggml-org/llama.cpp:server*``);
- either behind ``sh -c "…"`` / ``bash -c`` (with or without ``exec``);
- a simulated node's engine, see :data:`SIM_TWIN`.

The result's argv is what ``engine_command`` renders: for vLLM the model first (from the
positional argument or ``--model``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

# A simulated node runs the real (CPU) engine through this wrapper on a stand-in image
# (servefleet/sim/compose-override.yaml.j2): `python3 /opt/servefleet-sim/cpu_twin.py
# <engine> <argv…>`. This is the one place where reading a simulated node differs from
# reading a real one; the version it stands for is in STANDIN_ENGINE_VERSION (see
# servefleet.core.adopt.inspect).
SIM_TWIN = "/opt/servefleet-sim/cpu_twin.py"
"""The CPU twin's path inside a simulated node's container."""

VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")
"""``python3 -m …`` modules that start vLLM's server."""
OTHER_ENGINES = {"sglang.launch_server": "sglang", "text-generation-launcher": "tgi",
                 "ollama": "ollama", "lmdeploy": "lmdeploy", "trtllm-serve": "tensorrt-llm"}
"""Inference engines recognised only to say that servefleet does not run them."""
SHELLS = ("sh", "bash", "dash", "ash")


@dataclass(frozen=True)
class Recognised:
    """What runs in the container."""

    engine: str | None = None
    """``vllm`` / ``llama.cpp``; ``None``: none servefleet runs."""
    argv: tuple[str, ...] = ()
    """The engine's arguments after its entrypoint."""
    other_engine: str | None = None
    """A recognised engine servefleet does not run."""
    simulated: bool = False
    """Through a simulated node's CPU twin."""


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _is_python(path: str) -> bool:
    return _base(path).startswith("python")


def _vllm(args: list[str]) -> Recognised:
    """``args`` after ``vllm serve`` or the api_server module: the model goes first."""
    rest = list(args)
    if rest and rest[0] == "serve":  # `python3 -m vllm.entrypoints.cli.main serve …`
        rest = rest[1:]
    if rest and not rest[0].startswith("-"):
        return Recognised("vllm", tuple(rest))
    # `--model X` / `--model=X` (the api_server module's form): moved to the front.
    for i, arg in enumerate(rest):
        if arg == "--model" and i + 1 < len(rest):
            return Recognised("vllm", (rest[i + 1], *rest[:i], *rest[i + 2:]))
        if arg.startswith("--model="):
            return Recognised("vllm", (arg.split("=", 1)[1], *rest[:i], *rest[i + 1:]))
    return Recognised("vllm", tuple(rest))


def recognise(process: list[str], depth: int = 0) -> Recognised:
    """The engine run by ``process`` (``Path`` followed by ``Args``) and its arguments."""
    if not process or depth > 3:
        return Recognised()
    head, args = process[0], process[1:]
    if args and args[0] == "exec" and _base(head) in SHELLS:
        args = args[1:]
    if _base(head) in SHELLS and len(args) >= 2 and args[0] == "-c":
        try:
            words = shlex.split(args[1])
        except ValueError:
            return Recognised()
        if words and words[0] == "exec":
            words = words[1:]
        return recognise(words, depth + 1)
    if head == "exec":
        return recognise(args, depth + 1)
    if _is_python(head) and args and args[0] == SIM_TWIN and len(args) >= 2:
        inner = recognise_engine_args(args[1], args[2:])
        return Recognised(inner.engine, inner.argv, inner.other_engine, simulated=True)
    if _is_python(head) and len(args) >= 2 and args[0] == "-m":
        if args[1] in VLLM_MODULES:
            return _vllm(args[2:])
        if args[1] in OTHER_ENGINES:
            return Recognised(other_engine=OTHER_ENGINES[args[1]])
        return Recognised()
    if _base(head) == "vllm" and args and args[0] == "serve":
        return _vllm(args[1:])
    if _base(head) == "llama-server":
        return Recognised("llama.cpp", tuple(args))
    if _base(head) in OTHER_ENGINES:
        return Recognised(other_engine=OTHER_ENGINES[_base(head)])
    return Recognised()


def recognise_engine_args(engine: str, args: list[str]) -> Recognised:
    """The CPU twin's arguments: the engine's name, then exactly the rendered command."""
    if engine == "vllm":
        return _vllm(args)
    if engine == "llama.cpp":
        return Recognised("llama.cpp", tuple(args))
    return Recognised(other_engine=engine)

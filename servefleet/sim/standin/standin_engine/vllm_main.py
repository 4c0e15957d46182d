"""``vllm`` console entry: ``vllm serve <model> [options]`` as the stand-in runs it."""

from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
from types import FrameType

from .faults import read_faults
from .node import Node, SimClock
from .vllm_boot import VLLM_DIR, BootFailed, VllmBoot, fail_api, print_preamble
from .vllm_cli import build_parsers, non_default_args, parse_serve_args, preprocess
from .vllm_config import EngineError, installed_vllm_version, resolve
from .vllm_log import API, VllmLog
from .vllm_multinode import lost_peer, run_worker, wait_for_workers
from .vllm_server import VllmServer
from .vllm_versions import parse_version

DEFAULT_VERSION = "0.21.0"


def emulated_version() -> str:
    """``STANDIN_ENGINE_VERSION``, else the installed placeholder's ``__version__``."""
    return (
        os.environ.get("STANDIN_ENGINE_VERSION", "").strip()
        or installed_vllm_version()
        or DEFAULT_VERSION
    )


def _bind(host: str | None, port: int) -> socket.socket:
    """Bind (not listen) early, as vLLM does, so a port clash fails at once."""
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or "", port))
    return sock


def main(argv: list[str] | None = None) -> int:
    """Run ``vllm`` with ``argv`` (without the program name)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    version_str = emulated_version()
    version = parse_version(version_str)
    if not argv or argv[0] != "serve":
        top, _serve = build_parsers(version)
        parsed = top.parse_args(preprocess(argv))
        if getattr(parsed, "subparser", None) is None:
            top.print_help()
            return 0
        print(
            f"vllm {parsed.subparser}: not available in the simulated node's engine",
            file=sys.stderr,
        )
        return 1
    args = parse_serve_args(argv[1:], version)
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        # vLLM's validate_parsed_serve_args raises before any logging is set up.
        print(
            "Traceback (most recent call last):\n"
            '  File "/usr/local/bin/vllm", line 10, in <module>\n'
            "    sys.exit(main())\n"
            "             ^^^^^^\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/main.py", '
            "line 89, in main\n"
            "    cmds[args.subparser].validate(args)\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/serve.py", '
            "line 125, in validate\n"
            "    validate_parsed_serve_args(args)\n"
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/cli_args.py", '
            "line 386, in validate_parsed_serve_args\n"
            '    raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")\n'
            "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser",
            file=sys.stderr,
            flush=True,
        )
        return 1

    env = dict(os.environ)
    faults = read_faults(env)
    clock = SimClock.from_env(env, faults.slowdown)
    node = Node.from_env(env)
    api_pid = os.getpid()
    log = VllmLog(version, api_pid, api_pid + 95)
    print_preamble(log, version_str, args.model, non_default_args(args, version))

    state: dict[str, VllmServer] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server = state.get("server")
        if server is None:
            raise SystemExit(0)
        server.shutdown_lines()
        server.stop(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    nnodes = int(getattr(args, "nnodes", 1) or 1)
    if nnodes > 1 and getattr(args, "headless", False):
        return run_worker(args, version_str, log, faults, env)

    try:
        sock = _bind(args.host, args.port)
    except OSError as exc:
        for line in traceback.format_exception_only(type(exc), exc):
            log.plain(API, line.rstrip("\n"))
        return 1

    try:
        cfg = resolve(args, version, version_str, node, env)
    except EngineError as exc:
        if exc.exc_type == "NotImplementedError":
            frame = (
                f"{VLLM_DIR}/engine/arg_utils.py",
                1678,
                "create_engine_config",
                "raise NotImplementedError(",
            )
        else:
            frame = (
                f"{VLLM_DIR}/engine/arg_utils.py",
                1453,
                "create_engine_config",
                "model_config = self.create_model_config()",
            )
        failed = fail_api(log, exc.exc_type, exc.message, [frame])
        sock.close()
        return failed.code

    if nnodes > 1:
        # The rest of the boot (weights, KV pool, graphs, API) needs every rank.
        wait_for_workers(args, log, env, lost_peer(log))
    boot = VllmBoot(cfg, log, clock, faults)
    try:
        result = boot.run()
    except BootFailed as failed:
        sock.close()
        return failed.code
    server = VllmServer(cfg, result, log, clock, sock)
    state["server"] = server
    return server.serve()

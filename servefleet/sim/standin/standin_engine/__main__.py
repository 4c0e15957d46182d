"""``python3 -m standin_engine vllm serve …`` or ``python3 -m standin_engine llama-server …``."""

from __future__ import annotations

import sys


def main() -> int:
    """Dispatch on the engine name (the console scripts call the engines directly)."""
    if len(sys.argv) < 2 or sys.argv[1] not in ("vllm", "llama-server"):
        print("usage: python3 -m standin_engine {vllm|llama-server} [args...]", file=sys.stderr)
        return 2
    engine, rest = sys.argv[1], sys.argv[2:]
    if engine == "vllm":
        from .vllm_main import main as vllm_main

        return vllm_main(rest)
    from .llamacpp import main as llama_main

    return llama_main(rest)


if __name__ == "__main__":
    sys.exit(main())

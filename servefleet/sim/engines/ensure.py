"""Make the real engines ready for ``servefleet sim up``: built or installed once per
machine, in parallel (the llama.cpp build is CPU-bound, the vLLM install mostly download).

``$SERVEFLEET_SIM_ENGINES`` picks them: ``real`` (the default: both), ``standin`` (none:
every node runs the stand-in engine, as for a quick look at the fleet), or a comma list
(``vllm``, ``llama.cpp``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from servefleet.core.errors import SimError
from servefleet.sim.engines import EngineInstall, Log, engines_cache_dir

ENGINE_NAMES = ("vllm", "llama.cpp")
SELECT_ENV = "SERVEFLEET_SIM_ENGINES"


def selected_engines(value: str | None = None) -> tuple[str, ...]:
    """The engines to run for real, from ``$SERVEFLEET_SIM_ENGINES`` (or ``value``)."""
    value = (os.environ.get(SELECT_ENV, "real") if value is None else value).strip()
    if value in ("", "real", "all"):
        return ENGINE_NAMES
    if value in ("standin", "none"):
        return ()
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in ENGINE_NAMES]
    if unknown:
        raise SimError(f"${SELECT_ENV}={value!r}: unknown engine {unknown[0]!r}; use real, "
                       f"standin or a comma list of {', '.join(ENGINE_NAMES)}")
    return names


def _installer(name: str) -> Callable[[Path, Log], EngineInstall]:
    # Imported here: each installer pulls in its own build tooling.
    if name == "vllm":
        from servefleet.sim.engines.vllm_cpu import ensure_vllm_cpu
        return lambda cache, log: ensure_vllm_cpu(cache, log)
    from servefleet.sim.engines.llamacpp import ensure_llama_server
    return lambda cache, log: ensure_llama_server(cache, log)


def ensure_engines(names: tuple[str, ...], say: Log,
                   cache_dir: Path | None = None) -> dict[str, EngineInstall]:
    """Every engine of ``names``, ready to mount; a failure names the engine and says how
    to run the fleet on the stand-in meanwhile."""
    if not names:
        return {}
    cache = cache_dir or engines_cache_dir()
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        futures = {name: pool.submit(_installer(name), cache, say) for name in names}
        installs: dict[str, EngineInstall] = {}
        errors: list[str] = []
        for name, future in futures.items():
            try:
                installs[name] = future.result()
            except (SimError, OSError) as error:
                errors.append(f"real {name}: {error}")
    if errors:
        raise SimError("; ".join(errors) + f" ({SELECT_ENV}=standin runs the fleet on the "
                       "stand-in engines meanwhile)")
    return installs

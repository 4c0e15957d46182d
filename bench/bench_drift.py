"""Benchmark: the drift read of 50 nodes, servefleet against plain paramiko and Ansible.

Starts sshd-only simulated nodes (real OpenSSH in network namespaces, through the sim API,
in a state folder of its own with its own names and addresses, so a test fleet that may be
running is left alone), stages on each node what a drift read looks at, then times, in the
same run, the same reads done three ways:

- **servefleet**: :func:`servefleet.adapters.drift_collect.collect_fleet`, one connection
  and one command per node (the collector: release files hashed, the container inspected,
  the boot log read, the engine service merged by ``docker compose config``), thread
  pool, GPU probe off for the like-for-like row and on for the ``full`` row;
- **paramiko**: a plain thread pool of ``paramiko.SSHClient`` (default settings, host keys
  from known_hosts), one connection per node and four commands: ``sha256sum`` of the two
  files, the JSON command (``docker inspect``), ``tail`` of the log, ``docker compose
  config`` of the release; and the same without the fourth (``3 commands``), whose
  difference is what Compose's merge costs;
- **floor**: connect to every node and run ``true`` (what any drift read costs at least);
- **ansible**: ``ansible-playbook`` (ansible-core from PyPI, pipelining on, forks = nodes,
  no fact gathering) with the same four commands as tasks.

sshd-only nodes have no Docker Engine: the bench stages a stand-in ``docker`` (a shell
script answering ``ps``/``inspect``/``image inspect``/``logs``/``cp`` from files, and
handing ``compose`` to the real Compose CLI, whose ``config`` needs no daemon) for both
servefleet and the baselines, and a release folder (``compose.yaml`` + ``engine.env`` +
``manifest.json``) and a boot log of ~1600 lines on each node.

Every method's answers are checked (hashes, JSON, log length) so none can skip work.

    sudo python bench/bench_drift.py [--nodes 50] [--rounds 3] [--skip-ansible] [--keep]

Smallest run: ``--nodes 3 --rounds 1 --skip-ansible``.

Aims: servefleet ≤ 1.5 s for 50 nodes, ≥ 25× faster than Ansible, within 1.2× of paramiko.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko

from servefleet.adapters.drift_collect import CollectOptions, DeploymentQuery, collect_fleet
from servefleet.adapters.remote import compose_project
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.models import Node
from servefleet.core.project import load_nodes
from servefleet.core.render.release import hashed_env_text
from servefleet.sim import fleet
from servefleet.sim.layout import SimLayout
from servefleet.sim.spec import MAX_NODES, RTX_5090, NodeSpec

DEPLOYMENT = "main"
RELEASE_ID = "0123456789ab"
CONTAINER_ID = "c0ffee" * 10 + "abcd"
IMAGE_ID = "sha256:" + "5" * 64
LOG_LINES = 1600
IMAGE = "vllm/vllm-openai:v0.21.0"
COMMAND = ("Qwen/Qwen3.6-35B-A3B-FP8", "--port", "8000")
AIM_SECONDS, AIM_VS_ANSIBLE, AIM_VS_PARAMIKO = 1.5, 25.0, 1.2

DOCKER_STANDIN = r"""#!/bin/sh
# Stand-in docker CLI of the drift benchmark (sshd-only nodes have no Docker Engine):
# answers the calls a drift read makes from files staged in the node's bench folder.
d="${HOME%/*}/bench"
case "$1" in
  ps) exec cat "$d/ps.txt" ;;
  inspect) exec cat "$d/inspect.json" ;;
  image) exec cat "$d/image.json" ;;
  logs) exec cat "$d/engine.log" ;;
  compose) shift; exec @COMPOSE@ "$@" ;;
  cp) echo "Error response from daemon: Could not find the file $2 in container" >&2
      exit 1 ;;
  *) echo "bench docker: unsupported: $*" >&2; exit 2 ;;
esac
"""


def bench_specs(count: int) -> list[NodeSpec]:
    """``count`` sshd-only nodes at the top of the address range (the test fleet uses the
    bottom), named ``bench-N``."""
    first = MAX_NODES - count + 1
    return [NodeSpec(name=f"bench-{i}", index=first + i - 1, arch="x86_64", gpu=RTX_5090,
                     host_memory_gib=64, docker=False) for i in range(1, count + 1)]


def boot_log() -> bytes:
    """A vLLM-shaped boot log that ends with the ready line."""
    lines = ["INFO 11-22 03:15:00 [api_server.py:1] vLLM API server version 0.21.0"]
    for i in range(LOG_LINES - 4):
        lines.append(f"INFO 11-22 03:15:{i % 60:02d} [loader.py:{i}] Loading safetensors "
                     f"checkpoint shards: {i % 100}% Completed | {i}/{LOG_LINES}")
    lines += [
        "INFO 11-22 03:16:00 [kv_cache_utils.py:1] GPU KV cache size: 360,448 tokens",
        "INFO 11-22 03:16:00 [kv_cache_utils.py:2] Maximum concurrency for 131,072 tokens "
        "per request: 2.75x",
        "INFO:     Application startup complete.",
    ]
    return ("\n".join(lines) + "\n").encode()


def stage(layout: SimLayout, node: Node, log: bytes) -> dict[str, str]:
    """Write the release, the container facts and the log of one node; the expected
    sha256 of each file (as a drift read reports them)."""
    root = layout.node(node.name).root
    release = Path(node.base_dir) / DEPLOYMENT / "releases" / RELEASE_ID
    release.mkdir(parents=True, exist_ok=True)
    compose = (f"# Rendered by servefleet for {node.name}\nservices:\n  engine:\n"
               f"    image: {IMAGE}\n    command: {json.dumps(list(COMMAND))}\n"
               "    env_file: [engine.env]\n"
               f"    labels:\n      io.servefleet.release: '{RELEASE_ID}'\n"
               + "    # padding\n" * 80).encode()
    env = b"# Secret environment\nHF_TOKEN='hf_bench_not_a_secret'\n"
    (release / "compose.yaml").write_bytes(compose)
    (release / "engine.env").write_bytes(env)
    hashes = {"compose.yaml": hashlib.sha256(compose).hexdigest(),
              "engine.env": hashlib.sha256(hashed_env_text(env)).hexdigest()}
    manifest = {"release_id": RELEASE_ID, "compose_files": ["compose.yaml"],
                "files": {p: {"sha256": h} for p, h in hashes.items()}}
    (release / "manifest.json").write_text(json.dumps(manifest))
    current = release.parent.parent / "current"
    current.unlink(missing_ok=True)
    current.symlink_to(f"releases/{RELEASE_ID}")
    bench = root / "bench"
    bench.mkdir(exist_ok=True)
    # servefleet's compose project of a deployment is ``servefleet-<deployment>``: the
    # collector reads only containers labelled so.
    project = compose_project(DEPLOYMENT)
    (bench / "ps.txt").write_text(f"{CONTAINER_ID}\t{project}\n")
    inspect = [{
        "Id": CONTAINER_ID, "Name": "/main-engine-1", "Created": "2026-11-22T03:14:00Z",
        "RestartCount": 0, "Image": IMAGE_ID,
        "State": {"Status": "running", "ExitCode": 0, "OOMKilled": False,
                  "StartedAt": "2026-11-22T03:15:00.000000000Z"},
        "Config": {"Image": IMAGE, "Cmd": list(COMMAND),
                   "Env": ["HF_TOKEN=hf_bench_not_a_secret", "PATH=/usr/bin:/bin"],
                   "Labels": {"com.docker.compose.project": project,
                              "io.servefleet.release": RELEASE_ID}},
    }]
    (bench / "inspect.json").write_text(json.dumps(inspect))
    (bench / "image.json").write_text(json.dumps([{"Id": IMAGE_ID, "RepoDigests": [],
                                                   "Config": {"Env": ["PATH=/usr/bin:/bin"]}}]))
    (bench / "engine.log").write_bytes(log)
    return hashes


def run_servefleet(nodes: list[Node], docker: str, probe: bool) -> float:
    """One drift read of every node through servefleet's collector; checked."""
    targets = [(n, [DeploymentQuery(name=DEPLOYMENT, port=None)]) for n in nodes]
    options = CollectOptions(probe=probe, docker=(docker,), baseline_files=())
    started = time.perf_counter()
    observed = collect_fleet(targets, options, max_workers=len(nodes))
    elapsed = time.perf_counter() - started
    for name, observation in observed.items():
        assert observation.unreachable is None, observation.unreachable
        state = observation.deployments[DEPLOYMENT]
        assert state.current_release == RELEASE_ID and len(state.file_hashes or {}) == 2, name
        assert state.engine_container is not None and \
            state.engine_container.id == CONTAINER_ID, name
        assert state.boot is not None and state.boot.kv_cache_tokens == 360_448, name
        assert state.compose_service is not None, (name, state.compose_error)
        assert state.compose_service.command == COMMAND, name
        assert (observation.gpu is not None) == probe, name
    return elapsed


def run_floor(nodes: list[Node]) -> float:
    """The floor under any drift read here: connect to every node and run ``true``."""
    def one(node: Node) -> None:
        with SshTransport(node) as ssh:
            ssh.run(["true"], timeout=30)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(one, nodes))
    return time.perf_counter() - started


def compose_config_command(docker: str, release: str) -> str:
    """``docker compose config`` of a release, as the node reader runs it."""
    return (f"{docker} compose -p {compose_project(DEPLOYMENT)} --project-directory "
            f"{release} -f {release}/compose.yaml config --format json --no-env-resolution")


def run_paramiko(nodes: list[Node], known_hosts: Path, docker: str,
                 expected: dict[str, dict[str, str]], log_size: int, *,
                 compose: bool) -> float:
    """The same reads with a plain paramiko thread pool: connect, three commands, and
    ``docker compose config`` when ``compose``."""
    def read(node: Node) -> None:
        client = paramiko.SSHClient()
        client.load_host_keys(str(known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(node.address, username=node.ssh.user,
                       key_filename=node.ssh.identity_file, look_for_keys=False,
                       allow_agent=False, timeout=30)
        try:
            release = f"{node.base_dir}/{DEPLOYMENT}/current"
            outputs = []
            commands = [f"sha256sum {release}/compose.yaml {release}/engine.env",
                        f"{docker} inspect {CONTAINER_ID}",
                        f"tail -n {LOG_LINES + 10} \"${{HOME%/*}}/bench/engine.log\""]
            if compose:
                commands.append(compose_config_command(docker, release))
            for command in commands:
                _, stdout, _ = client.exec_command(command)
                outputs.append(stdout.read())
                assert stdout.channel.recv_exit_status() == 0, command
        finally:
            client.close()
        assert expected[node.name]["compose.yaml"] in outputs[0].decode()
        assert json.loads(outputs[1])[0]["Id"] == CONTAINER_ID
        assert len(outputs[2]) == log_size
        if compose:
            assert json.loads(outputs[3])["services"]["engine"]["image"] == IMAGE

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(read, nodes))
    return time.perf_counter() - started


def compose_cli() -> str:
    """The Compose CLI the stand-in ``docker compose`` hands to (scripts/bootstrap puts
    ``docker-compose`` in the virtual environment)."""
    found = shutil.which("docker-compose") or shutil.which(
        "docker-compose", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("docker-compose is not installed (scripts/bootstrap installs it)")
    return found


def ansible_playbook() -> str:
    """``ansible-playbook``, installed from PyPI (ansible-core) when missing."""
    found = shutil.which("ansible-playbook")
    if found is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "ansible-core"],
                       check=True)
        found = shutil.which("ansible-playbook") or str(
            Path(sys.executable).with_name("ansible-playbook"))
    return found


def run_ansible(nodes: list[Node], known_hosts: Path, docker: str, workdir: Path,
                log_size: int, *, pipelining: bool) -> float:
    """The same reads as an Ansible playbook (three command tasks), one run; with
    ``pipelining`` (a common tuning: modules go through the open SSH session instead of a
    copied file), or Ansible's defaults."""
    workdir.mkdir(parents=True, exist_ok=True)
    inventory = ["[bench]"] + [
        f"{n.name} ansible_host={n.address} ansible_user={n.ssh.user} "
        f"ansible_ssh_private_key_file={n.ssh.identity_file} base_dir={n.base_dir}"
        for n in nodes]
    (workdir / "inventory.ini").write_text("\n".join(inventory) + "\n")
    (workdir / "ansible.cfg").write_text(
        "[defaults]\nhost_key_checking = True\ngathering = explicit\nforks = "
        f"{len(nodes)}\ninterpreter_python = /usr/bin/python3\nretry_files_enabled = False\n"
        f"[ssh_connection]\npipelining = {pipelining}\n"
        f"ssh_args = -o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes "
        "-o ControlMaster=auto -o ControlPersist=60s\n"
        # A fresh control folder per run: no master connection survives from an earlier
        # run, so Ansible connects cold, as the other two do.
        f"control_path_dir = {tempfile.mkdtemp(prefix='cp-', dir=workdir)}\n")
    release = "{{ base_dir }}/" + DEPLOYMENT + "/current"
    playbook = [{
        "hosts": "bench", "gather_facts": False,
        "tasks": [
            {"name": "hash two files", "register": "hashes", "changed_when": False,
             "command": f"sha256sum {release}/compose.yaml {release}/engine.env"},
            {"name": "one JSON command", "register": "inspect", "changed_when": False,
             "command": f"{docker} inspect {CONTAINER_ID}"},
            {"name": "tail a log", "register": "log", "changed_when": False,
             "shell": f"tail -n {LOG_LINES + 10} \"${{HOME%/*}}/bench/engine.log\""},
            {"name": "compose config", "register": "merged", "changed_when": False,
             "command": compose_config_command(docker, release)},
            {"name": "check", "assert": {"quiet": True, "that": [
                "(inspect.stdout | from_json)[0].Id == '" + CONTAINER_ID + "'",
                "(merged.stdout | from_json).services.engine.image == '" + IMAGE + "'",
                f"log.stdout | length > {log_size // 2}"]}},
        ],
    }]
    (workdir / "drift.yml").write_text(json.dumps(playbook))
    env = {**os.environ, "ANSIBLE_CONFIG": str(workdir / "ansible.cfg"),
           "ANSIBLE_LOCAL_TEMP": str(workdir / "tmp"), "ANSIBLE_NOCOLOR": "1"}
    command = [ansible_playbook(), "-i", str(workdir / "inventory.ini"),
               str(workdir / "drift.yml")]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                          cwd=workdir)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or f"ok={5}" not in done.stdout:
        raise SystemExit(f"ansible-playbook failed (exit {done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    return elapsed


def control_cpu() -> float:
    """CPU seconds this process and its finished children used so far: the control
    machine's share (the nodes' sshd and commands run in other process trees)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def interleaved(rounds: int, runs: dict[str, Callable[[], float]]
                ) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Time every method once per round, in turn (after one warm-up round that is not
    counted), so that load from elsewhere on the machine falls on all of them alike.
    Returns the wall times and the median control-machine CPU per method."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {label: [] for label in runs}
    cpus: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(rounds):
        for label, run in runs.items():
            before = control_cpu()
            times[label].append(run())
            cpus[label].append(control_cpu() - before)
    for label, values in times.items():
        print(f"  {label:<28} median {statistics.median(values):6.2f} s   control CPU "
              f"{statistics.median(cpus[label]):5.2f} s   runs "
              f"{', '.join(f'{t:.2f}' for t in values)}", flush=True)
    return times, {label: statistics.median(values) for label, values in cpus.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-ansible", action="store_true")
    parser.add_argument("--keep", action="store_true", help="leave the nodes running")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="sim state folder (default: a temporary one)")
    args = parser.parse_args()

    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="servefleet-bench-drift-"))
    project_dir = state_dir / "project"
    project_dir.mkdir(parents=True, exist_ok=True)
    config = fleet.FleetConfig(state_dir=state_dir)
    print(f"starting {args.nodes} sshd-only nodes (state {state_dir})", flush=True)
    started = time.perf_counter()
    fleet.up(bench_specs(args.nodes), project_dir=project_dir, config=config)
    print(f"  up in {time.perf_counter() - started:.1f} s", flush=True)
    try:
        nodes, _, problems = load_nodes(project_dir)
        assert not problems, problems
        node_list = [nodes[s.name] for s in bench_specs(args.nodes)]
        known_hosts = project_dir / "nodes" / "sim" / "known_hosts"
        docker = str(state_dir / "bench-docker")
        Path(docker).write_text(DOCKER_STANDIN.replace("@COMPOSE@",
                                                       shlex.quote(compose_cli())))
        Path(docker).chmod(0o755)
        log = boot_log()
        expected = {n.name: stage(config.layout, n, log) for n in node_list}

        print(f"drift read of {len(node_list)} nodes: hash two files, one JSON command, "
              f"tail a log ({len(log) // 1024} KiB), docker compose config", flush=True)
        times, cpu = interleaved(args.rounds, {
            "floor: connect + true": lambda: run_floor(node_list),
            "servefleet": lambda: run_servefleet(node_list, docker, probe=False),
            "paramiko (4 commands)": lambda: run_paramiko(node_list, known_hosts, docker,
                                                          expected, len(log), compose=True),
            "paramiko (3, no compose)": lambda: run_paramiko(
                node_list, known_hosts, docker, expected, len(log), compose=False),
            "servefleet + GPU probe": lambda: run_servefleet(node_list, docker, probe=True),
        })
        floor = statistics.median(times["floor: connect + true"])
        ours = statistics.median(times["servefleet"])
        plain = statistics.median(times["paramiko (4 commands)"])
        no_compose = statistics.median(times["paramiko (3, no compose)"])
        full = statistics.median(times["servefleet + GPU probe"])
        # The ratio of each round's pair, then the median: robust to load that changes
        # between rounds.
        ratio = statistics.median(
            a / b for a, b in zip(times["servefleet"], times["paramiko (4 commands)"],
                                  strict=True))
        ansible: dict[str, float] = {}
        if not args.skip_ansible:
            # One cold run each: a second one would find Ansible's SSH master connections.
            for label, pipelining in (("ansible-playbook, defaults", False),
                                      ("ansible-playbook, pipelining", True)):
                before = control_cpu()
                ansible[label] = run_ansible(node_list, known_hosts, docker,
                                             state_dir / f"ansible-{pipelining}", len(log),
                                             pipelining=pipelining)
                print(f"  {label:<28} {ansible[label]:6.2f} s   control CPU "
                      f"{control_cpu() - before:5.2f} s   (one cold run)", flush=True)
        print("\nresults")
        print(f"  servefleet {ours:.2f} s for {len(node_list)} nodes "
              f"(aim ≤ {AIM_SECONDS} s: {'met' if ours <= AIM_SECONDS else 'NOT met'}); "
              f"with the GPU probe {full:.2f} s; connecting alone {floor:.2f} s")
        print(f"  servefleet / paramiko = {ratio:.2f}× (median of the rounds' ratios) "
              f"(aim ≤ {AIM_VS_PARAMIKO}×: {'met' if ratio <= AIM_VS_PARAMIKO else 'NOT met'}); "
              f"control-machine CPU {cpu['servefleet']:.2f} s against "
              f"{cpu['paramiko (4 commands)']:.2f} s")
        print(f"  docker compose config's share: paramiko {plain:.2f} s with it, "
              f"{no_compose:.2f} s without ({plain - no_compose:+.2f} s for "
              f"{len(node_list)} nodes)")
        for label, seconds in ansible.items():
            speedup = seconds / ours
            print(f"  {label} / servefleet = {speedup:.1f}× "
                  f"(aim ≥ {AIM_VS_ANSIBLE}×: {'met' if speedup >= AIM_VS_ANSIBLE else 'NOT met'})"
                  f"; / paramiko = {seconds / plain:.1f}×")
    finally:
        if not args.keep:
            fleet.down(config=config)
            if args.state_dir is None:
                shutil.rmtree(state_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Deploy benchmarks on the simulated fleet (needs root; ``pip install -e '.[bench]'``).

(a) **No-op deploy of the 3-node sim stack**: after one real deploy, ``deploy()`` again (it
    observes each node in one command, finds nothing to do and writes nothing). Baseline in
    the same run: plain paramiko connecting to the 3 nodes in parallel and running one
    command each.

(b) **Fan-out to 50 sshd-only nodes**: per node, upload a release tar and unpack it into
    ``staging/`` then rename it into ``releases/<id>`` and switch ``current``: the same work
    done by

    - servefleet's transport (TCP_NODELAY, the tar on stdin of one command),
    - plain parallel paramiko (the baseline: same command, same tar on stdin, paramiko's
      defaults),
    - pyinfra (``files.put`` of the tar, then one ``server.shell``),
    - Ansible (``copy`` of the tar, then one ``shell``; forks = number of nodes).

    Every tool gets a fresh release id per run, so every run does the work.

The 50 sshd-only nodes live in a state folder and project folder of their own, on address
slots 10.77.150.2 onwards (removed at the end), so a running test fleet is left alone. (a)
deploys to the 3-node fleet as a deployment of its own (``bench`` on port 18080), removed at
the end unless ``--keep``. Prints times and ratios.

    python bench/bench_deploy.py [--nodes 50] [--runs 3] [--skip a|b] [--no-ansible]
                                 [--no-pyinfra] [--profile NODE=PROFILE] [--no-sim-up] [--keep]

Smallest run: ``--nodes 2 --runs 1 --no-ansible --no-pyinfra`` (``--no-sim-up`` where a
test session's fleet runs already).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from servefleet.adapters import compose_commands, remote  # noqa: E402
from servefleet.adapters.releases import checksum_lines, release_files, tar_bytes  # noqa: E402
from servefleet.adapters.rollout import deploy  # noqa: E402
from servefleet.adapters.runtime.ssh.transport import SshTransport  # noqa: E402
from servefleet.core.models import Deployment, Node, StackConfig  # noqa: E402
from servefleet.core.project import Project, load_nodes, load_profiles, load_project  # noqa: E402
from servefleet.core.render import manifest_for, render_release  # noqa: E402
from servefleet.sim import fleet  # noqa: E402
from servefleet.sim.spec import MAX_NODES, RTX_5090, NodeSpec, fleet_specs  # noqa: E402

SECRETS = {"HF_TOKEN": "hf_bench_not_a_real_token"}
BENCH_PORT = 18080
"""Port of (a)'s own deployment ``bench``: none of the stack's or the tests' deployments
use it; the bench adds it to the nodes' ports (the inventory lists the others)."""
PROJECT_DIRS = ("profiles", "templates", "healthchecks")


def timed(job: Callable[[], object]) -> float:
    """Seconds ``job`` takes."""
    start = time.perf_counter()
    job()
    return time.perf_counter() - start


def parallel(nodes: list[Node], work: Callable[[Node], None]) -> None:
    """Run ``work`` on every node at once (one thread, one connection per node)."""
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        for future in [pool.submit(work, n) for n in nodes]:
            future.result()


def pinned_key(node: Node) -> paramiko.PKey:
    keytype, blob = node.ssh.host_keys[0].split()[:2]
    return paramiko.PKey.from_type_string(keytype, base64.b64decode(blob))


def plain_client(node: Node) -> paramiko.SSHClient:
    """paramiko as most code uses it: defaults, pinned host key, key file."""
    client = paramiko.SSHClient()
    key = pinned_key(node)
    client.get_host_keys().add(node.address, key.get_name(), key)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(node.address, port=node.ssh.port, username=node.ssh.user,
                   key_filename=node.ssh.identity_file, allow_agent=False, look_for_keys=False)
    return client


def plain_run(client: paramiko.SSHClient, argv: list[str], stdin: bytes = b"") -> None:
    chan = client.get_transport().open_session()  # type: ignore[union-attr]
    chan.exec_command(shlex.join(argv))
    if stdin:
        chan.sendall(stdin)
    chan.shutdown_write()
    while not chan.exit_status_ready() or chan.recv_ready() or chan.recv_stderr_ready():
        if chan.recv_ready():
            chan.recv(65536)
        elif chan.recv_stderr_ready():
            chan.recv_stderr(65536)
        else:
            chan.status_event.wait(0.01)
    status = chan.recv_exit_status()
    chan.close()
    if status != 0:
        raise RuntimeError(f"{argv[:3]}: exit {status}")


# -- (a) no-op deploy ------------------------------------------------------------------------
def bench_noop(runs: int, overrides: dict[str, str], *, sim_up: bool, keep: bool) -> None:
    print("== (a) no-op deploy of the 3-node sim stack")
    if sim_up:
        fleet.up(fleet_specs(3), project_dir=REPO, say=lambda m: print(f"   sim: {m}"))
    project = load_project(REPO, "sim")
    missing = [n for n in project.stack.nodes if n not in project.nodes]
    if missing:
        raise SystemExit(f"no inventory for {', '.join(missing)} in nodes/sim: start the "
                         "fleet (`servefleet sim up`) or leave out --no-sim-up")
    # The stack's profiles as a deployment of the benchmark's own (port 18080), so the
    # stack's `main` deployments, which tests and the demo drive, are left alone.
    deployments = [Deployment(node=d.node, name="bench", profile=overrides.get(d.node, d.profile),
                              port=BENCH_PORT) for d in project.stack.deployments]
    nodes_with_port = {name: node.model_copy(update={"ports": [*node.ports, BENCH_PORT]})
                       for name, node in project.nodes.items()}
    project = dataclasses.replace(
        project, nodes=nodes_with_port,
        stack=project.stack.model_copy(update={"deployments": deployments}))
    nodes = [project.nodes[n] for n in project.stack.nodes]
    try:
        first = deploy(project, secrets=SECRETS)
        for result in first:
            if not result.ok:
                raise SystemExit(f"initial deploy failed on {result.node}: "
                                 f"{json.dumps(result.to_json())[:3000]}")

        def baseline() -> None:
            def work(node: Node) -> None:
                client = plain_client(node)
                plain_run(client, ["true"])
                client.close()
            parallel(nodes, work)

        def noop() -> None:
            results = deploy(project, secrets=SECRETS)
            assert all(r.status == "unchanged" for r in results), [r.status for r in results]

        baseline()
        noop()
        base = statistics.median(timed(baseline) for _ in range(runs))
        ours = statistics.median(timed(noop) for _ in range(runs))
        print(f"   plain paramiko connect + 1 command, 3 nodes: {base * 1000:7.1f} ms")
        print(f"   servefleet no-op deploy, 3 nodes:            {ours * 1000:7.1f} ms "
              f"({ours / base:.2f}x the baseline; renders 3 releases, observes each node in "
              "one command)")
    finally:
        if not keep:
            remove_bench_deployment(nodes)


def remove_bench_deployment(nodes: list[Node]) -> None:
    """Stop and remove (a)'s ``bench`` deployment (its containers and folder) on every
    node, so that no engine of the benchmark is left running."""
    def work(node: Node) -> None:
        with SshTransport(node) as transport:
            transport.run(remote.sequence(
                compose_commands.clear("bench", grace_seconds=10),
                ["rm", "-rf", f"{node.base_dir}/bench"]), check=False)
    parallel(nodes, work)


# -- (b) fan-out -----------------------------------------------------------------------------
class FanOut:
    """The same upload + one command, done by each tool against the sshd-only nodes."""

    def __init__(self, project_dir: Path, nodes: list[Node], work_dir: Path) -> None:
        self.nodes = nodes
        self.work_dir = work_dir
        # A real release: the shipped profile rendered for the first node (compose file,
        # its node override, env files), with its manifest. The nodes' inventory (with their
        # override files) is in the bench's own project folder: the profiles and templates
        # join it there, since a node's overrides must lie inside the project it renders in.
        for folder in PROJECT_DIRS:
            if (REPO / folder).is_dir() and not (project_dir / folder).exists():
                shutil.copytree(REPO / folder, project_dir / folder)
        profiles, profile_files, raw, problems = load_profiles(project_dir)
        assert not problems, problems
        deployment = Deployment(node=nodes[0].name, profile="qwen36-fp8")
        project = Project(root=project_dir, nodes={n.name: n for n in nodes},
                          node_files={n.name: f"nodes/sim/{n.name}.yaml" for n in nodes},
                          profiles=profiles, profile_files=profile_files,
                          stack=StackConfig(stack="bench", deployments=[deployment]),
                          stack_file="-", raw_profiles=raw)
        rendered = render_release(project, deployment, SECRETS)
        manifest = manifest_for(rendered, deployment, created_at="2026-11-22T00:00:00+00:00",
                                created_by="bench")
        self.files = release_files(rendered, manifest)
        self.tar = tar_bytes(self.files)
        self.sums = checksum_lines(self.files)
        self.tar_path = work_dir / "release.tar"
        self.tar_path.write_bytes(self.tar)
        self.known_hosts = work_dir / "known_hosts"
        self.known_hosts.write_text("".join(f"{n.address} {n.ssh.host_keys[0]}\n" for n in nodes))
        self.key = nodes[0].ssh.identity_file
        self.runs = 0

    def command(self, node: Node, tool: str, release: str) -> list[str]:
        """Unpack the tar from stdin into staging, check, rename, switch current."""
        deployment = f"bench-{tool}"
        return remote.sequence(
            remote.upload_release(node.base_dir, deployment, release, self.sums),
            remote.switch_current(node.base_dir, deployment, release))

    def release_id(self, tool: str) -> str:
        """A new release per run, with tar bytes of its own (other mtimes), so that tools
        that skip unchanged files (pyinfra, Ansible) transfer every time, as the others do."""
        self.runs += 1
        self.tar = tar_bytes(self.files, mtime=1_700_000_000 + self.runs)
        self.tar_path.write_bytes(self.tar)
        return f"{tool}{self.runs:04d}{int(time.time() * 1000) % 100000:05d}"

    def servefleet(self) -> None:
        release = self.release_id("sf")

        def work(node: Node) -> None:
            with SshTransport(node) as transport:
                transport.run(self.command(node, "servefleet", release), stdin=self.tar)
        parallel(self.nodes, work)

    def paramiko(self) -> None:
        release = self.release_id("pm")

        def work(node: Node) -> None:
            client = plain_client(node)
            plain_run(client, self.command(node, "paramiko", release), self.tar)
            client.close()
        parallel(self.nodes, work)

    def file_command(self, node: Node, tool: str, release: str) -> str:
        """The same script reading the tar from a copied file (pyinfra, Ansible)."""
        tar = f"{node.base_dir}/bench-{tool}.tar"
        return f"{shlex.join(self.command(node, tool, release))} < {shlex.quote(tar)}"

    def pyinfra(self) -> None:
        release = self.release_id("py")
        inventory = self.work_dir / "pyinfra_inventory.py"
        hosts = [(n.address, {
            "ssh_user": n.ssh.user, "ssh_key": n.ssh.identity_file,
            "ssh_known_hosts_file": str(self.known_hosts),
            "ssh_strict_host_key_checking": "yes",
            "tar": f"{n.base_dir}/bench-pyinfra.tar",
            "command": self.file_command(n, "pyinfra", release)}) for n in self.nodes]
        inventory.write_text(f"hosts = {hosts!r}\n")
        deploy_file = self.work_dir / "pyinfra_deploy.py"
        deploy_file.write_text(textwrap.dedent(f"""\
            from pyinfra import host
            from pyinfra.operations import files, server
            files.put(name="upload release", src={str(self.tar_path)!r}, dest=host.data.tar)
            server.shell(name="unpack and switch", commands=[host.data.command])
        """))
        done = subprocess.run(
            ["pyinfra", "-y", "--parallel", str(len(self.nodes)), str(inventory),
             str(deploy_file)], capture_output=True, text=True, cwd=self.work_dir, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pyinfra failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    def ansible(self) -> None:
        release = self.release_id("an")
        inventory = self.work_dir / "ansible_inventory.json"
        inventory.write_text(json.dumps({"nodes": {"hosts": {n.name: {
            "ansible_host": n.address, "ansible_port": n.ssh.port, "ansible_user": n.ssh.user,
            "tar": f"{n.base_dir}/bench-ansible.tar",
            "command": self.file_command(n, "ansible", release)} for n in self.nodes}}}))
        playbook = self.work_dir / "ansible_playbook.yml"
        playbook.write_text(textwrap.dedent(f"""\
            - hosts: nodes
              gather_facts: false
              tasks:
                - name: upload release
                  copy:
                    src: {self.tar_path}
                    dest: "{{{{ tar }}}}"
                - name: unpack and switch
                  shell: "{{{{ command }}}}"
        """))
        env = {**os.environ,
               "ANSIBLE_HOST_KEY_CHECKING": "True",
               "ANSIBLE_SSH_ARGS": f"-o UserKnownHostsFile={self.known_hosts} "
                                   "-o StrictHostKeyChecking=yes -o ControlMaster=auto "
                                   "-o ControlPersist=60s",
               "ANSIBLE_PRIVATE_KEY_FILE": str(self.key),
               "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
               "ANSIBLE_FORKS": str(len(self.nodes)),
               "ANSIBLE_LOCAL_TEMP": str(self.work_dir / "ansible-tmp"),
               "ANSIBLE_CONTROL_PATH_DIR": str(self.work_dir / "cp")}
        done = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)],
                              capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ansible failed: {done.stdout[-3000:]}{done.stderr[-2000:]}")


BENCH_FIRST_INDEX = 150
"""Address slots 10.77.150.2 onwards: far from the test fleet's (1-3) and from other
benchmarks' low slots, so both can run beside this one."""


def bench_specs(count: int) -> list[NodeSpec]:
    """``count`` sshd-only nodes shaped like the RTX 5090 node."""
    if not 1 <= count <= MAX_NODES - BENCH_FIRST_INDEX:
        raise SystemExit(f"--nodes must be 1-{MAX_NODES - BENCH_FIRST_INDEX}")
    return [NodeSpec(name=f"sfbench-{i}", index=BENCH_FIRST_INDEX + i - 1, arch="x86_64",
                     gpu=RTX_5090, host_memory_gib=64, docker=False)
            for i in range(1, count + 1)]


def bench_fanout(count: int, runs: int, *, with_pyinfra: bool, with_ansible: bool) -> None:
    print(f"== (b) fan-out: upload a release + one command on {count} sshd-only nodes")
    work = Path(tempfile.mkdtemp(prefix="servefleet-bench-"))
    config = fleet.FleetConfig(state_dir=work / "sim-state")
    project_dir = work / "project"
    (project_dir / "nodes").mkdir(parents=True)
    specs = bench_specs(count)
    try:
        fleet.up(specs, project_dir=project_dir, config=config,
                 say=lambda m: print(f"   sim: {m}"))
        nodes, _, problems = load_nodes(project_dir)
        assert not problems, problems
        chosen = [nodes[s.name] for s in specs]
        bench = FanOut(project_dir, chosen, work)
        times: dict[str, float] = {}
        # The two transports alternate run by run, so that load from anything else on the
        # machine falls on both alike; each gets an untimed warm-up first.
        pairs: dict[str, list[float]] = {"plain paramiko (baseline)": [],
                                         "servefleet transport": []}
        jobs = {"plain paramiko (baseline)": bench.paramiko,
                "servefleet transport": bench.servefleet}
        for job in jobs.values():
            job()
        for _ in range(runs):
            for name, job in jobs.items():
                pairs[name].append(timed(job))
        times.update({name: statistics.median(values) for name, values in pairs.items()})
        others: list[tuple[str, Callable[[], None], int]] = []
        if with_pyinfra:
            others.append(("pyinfra", bench.pyinfra, runs))
        if with_ansible:
            others.append(("ansible", bench.ansible, 1))
        for name, job, n in others:
            job()  # warm-up (imports, first connection), not timed
            times[name] = statistics.median(timed(job) for _ in range(n))
        base = times["plain paramiko (baseline)"]
        ours = times["servefleet transport"]
        for name, seconds in times.items():
            print(f"   {name:<28} {seconds:8.2f} s   {seconds / base:6.2f}x paramiko   "
                  f"{seconds / ours:6.2f}x servefleet")
        print(f"   servefleet / paramiko = {ours / base:.2f} (aim <= 1.2)")
        if "ansible" in times:
            print(f"   ansible / servefleet = {times['ansible'] / ours:.1f} (aim >= 40)")
    finally:
        fleet.down(config=config)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip", choices=["a", "b"], default=None)
    parser.add_argument("--no-ansible", action="store_true")
    parser.add_argument("--profile", action="append", default=[], metavar="NODE=PROFILE",
                        help="(a): deploy PROFILE on NODE instead of the stack's choice")
    parser.add_argument("--no-sim-up", action="store_true",
                        help="(a): use the 3-node fleet as it runs (nodes/sim as it is: a "
                             "test session's fleet keeps its stand-in engines) instead of "
                             "`sim up`")
    parser.add_argument("--keep", action="store_true",
                        help="(a): leave the `bench` deployment running at the end")
    parser.add_argument("--no-pyinfra", action="store_true",
                        help="(b): leave pyinfra out (paramiko stays the baseline)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the simulated fleet needs root")
    print(f"machine: {os.cpu_count()} cores, {socket.gethostname()}")
    if args.skip != "a":
        bench_noop(args.runs, dict(item.split("=", 1) for item in args.profile),
                   sim_up=not args.no_sim_up, keep=args.keep)
    if args.skip != "b":
        bench_fanout(args.nodes, args.runs, with_pyinfra=not args.no_pyinfra,
                     with_ansible=not args.no_ansible)


if __name__ == "__main__":
    main()

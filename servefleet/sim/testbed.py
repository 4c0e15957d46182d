"""The simulated fleet as tests and benchmarks use it: bring it up once, share it, reach it.

:func:`acquire` starts the fleet (or joins the running one) and takes a lease for the
calling process; :func:`release` gives the lease back and stops the fleet when the last
holder leaves and a test session had started it (a fleet an operator started by hand stays).
:class:`FleetHandle` says where everything is and runs commands on nodes through the real
OpenSSH client with strict host-key checking.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from servefleet.core.baselines import BASELINE_FILE
from servefleet.core.errors import SimError
from servefleet.sim import fleet, inventory, state
from servefleet.sim.fleet import FleetConfig
from servefleet.sim.layout import NodeLayout
from servefleet.sim.programs import find_program
from servefleet.sim.spec import NodeSpec, fleet_specs

if TYPE_CHECKING:
    from servefleet.core.project import Project

PLACEHOLDER_SERVER = '''\
"""Placeholder stand-in engine: one boot line, then /health on the --port it is given."""
import http.server
import os
import sys

args = sys.argv[1:]
port = int(args[args.index("--port") + 1]) if "--port" in args else 8000
print(f"placeholder {os.environ.get('STANDIN_ENGINE', '?')} "
      f"{os.environ.get('STANDIN_ENGINE_VERSION', '?')} on "
      f"{os.environ.get('STANDIN_NODE_NAME', '?')} listening on port {port}", flush=True)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/health"
        body = b"ok\\n" if ok else b"placeholder\\n"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
'''


def write_placeholder_context(folder: Path) -> Path:
    """A minimal stand-in build context (both Dockerfiles, a tiny HTTP server), for when the
    real one in ``servefleet/sim/standin`` is not there. Same content, same image key."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "server.py").write_text(PLACEHOLDER_SERVER)
    for suffix in ("vllm", "llamacpp"):
        (folder / f"Dockerfile.{suffix}").write_text(
            "ARG BASE_IMAGE\n"
            "FROM ${BASE_IMAGE}\n"
            f"ENV STANDIN_ENGINE={suffix}\n"
            "COPY server.py /opt/standin/server.py\n"
            'ENTRYPOINT ["python3", "/opt/standin/server.py"]\n')
    return folder


@dataclass(frozen=True)
class FleetHandle:
    """A running simulated fleet, as a test sees it."""

    config: FleetConfig
    """Where the fleet lives."""
    project_dir: Path
    """The project folder whose ``nodes/sim`` holds the fleet's inventory."""
    nodes: dict[str, NodeSpec]
    """Running nodes by name."""
    standin_is_real: bool
    """The images were built from ``servefleet/sim/standin`` (not the placeholder)."""
    started_here: bool
    """This process started the fleet (it was not running before)."""

    @property
    def client_key(self) -> Path:
        """The private key every node accepts for root."""
        return self.config.layout.client_key

    @property
    def known_hosts(self) -> Path:
        """The fleet's known_hosts (pinned host keys)."""
        return inventory.known_hosts_file(self.project_dir)

    def node_files(self, name: str) -> NodeLayout:
        """Where node ``name`` keeps its files (control folder, base folder, …)."""
        return self.config.layout.node(name)

    def run_standin(self, name: str, engines: Iterable[str] = ("vllm", "llama.cpp")) -> None:
        """From the next deploy on, node ``name`` runs ``engines`` as the stand-in (none:
        every engine that has a real build runs for real).

        The node's inventory says so (``sim.engines`` lists only the engines that run for
        real): a deploy renders from it what runs, and the health gate and drift expect the
        same from it (a stand-in engine reports the profile's version and the GPU's boot
        facts). The marker in the control folder keeps the choice for ``sim up``, which
        writes the inventory again."""
        files = self.node_files(name)
        control = files.control_dir
        marker = control / inventory.STANDIN_FILE
        wanted = sorted(set(engines))
        before = marker.read_text().split() if marker.exists() else []
        if before != wanted:
            # The node's KV baselines were measured on the other engine: they do not hold.
            (files.base_dir / BASELINE_FILE).unlink(missing_ok=True)
        if wanted:
            marker.write_text("\n".join(wanted) + "\n")
        else:
            marker.unlink(missing_ok=True)
        path = inventory.node_file(self.project_dir, name)
        if not path.is_file():
            return
        text = path.read_text()
        document = yaml.safe_load(text)
        sim = document.get("sim") or {}
        # What `sim up` wrote is kept aside, to be put back when the real engines return.
        kept = control / "real-engines.json"
        listed = sim.get("engines") or {}
        real = json.loads(kept.read_text()) if kept.exists() else {}
        if set(listed) >= set(real):
            real = listed
            kept.write_text(json.dumps(real))
        sim["engines"] = {engine: doc for engine, doc in real.items() if engine not in wanted}
        document["sim"] = sim
        header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
        inventory.write_if_changed(
            path, header + yaml.safe_dump(document, sort_keys=False, width=200))

    def ssh_argv(self, name: str, command: str) -> list[str]:
        """The real ``ssh`` client's argv for ``command`` on node ``name``."""
        return [find_program("ssh"), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "ConnectTimeout=10",
                "-i", str(self.client_key), "-l", "root", self.nodes[name].address, command]

    def ssh(self, name: str, command: str, *, check: bool = True,
            timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on node ``name`` over SSH; raises SimError on failure if
        ``check``."""
        result = subprocess.run(self.ssh_argv(name, command), capture_output=True, text=True,
                                timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise SimError(f"{name}: {shlex.quote(command)} exited {result.returncode}: "
                           f"{result.stderr.strip()[-2000:]}")
        return result


    def remove_engines(self, nodes: Iterable[str] | None = None) -> None:
        """Remove every engine container from ``nodes`` (default: every node): every
        servefleet deployment's (compose project ``servefleet-*``, or a container named
        ``servefleet-*``: an adopted one) and every one started by hand (``handmade*``). For
        tests whose claim needs a node that runs no other engine, whatever an earlier test
        left there."""
        script = ("for id in $(docker ps -aq); do "
                  "seen=$(docker inspect --format '{{index .Config.Labels "
                  "\"com.docker.compose.project\"}} {{.Name}}' \"$id\"); "
                  "case \"$seen\" in servefleet-*|*' /handmade'*|*' /servefleet-'*) "
                  "docker rm -f \"$id\" >/dev/null;; esac; done")
        for name in nodes if nodes is not None else self.nodes:
            self.ssh(name, script)

    def remove_deployment(self, project: Project, deployment: str,
                          nodes: Iterable[str] | None = None, *, check: bool = True) -> None:
        """Remove ``deployment`` from ``nodes`` (default: every node of the fleet): its
        containers, found by its compose project, and its folder under the node's
        ``base_dir``. What a test deploys is gone before it starts and after it ends."""
        for name in nodes if nodes is not None else self.nodes:
            folder = f"{project.nodes[name].base_dir}/{deployment}"
            # An adopted container (started by hand, taken over) is found by its name.
            self.ssh(name, "ids=$(docker ps -aq --filter label=com.docker.compose.project="
                           f"{shlex.quote('servefleet-' + deployment)}; docker ps -aq --filter "
                           f"name={shlex.quote('^servefleet-' + deployment + '-adopted$')}); "
                           "[ -z \"$ids\" ] || docker rm -f $ids >/dev/null; "
                           f"rm -rf {shlex.quote(folder)}", check=check)


def acquire(project_dir: Path, config: FleetConfig, specs: list[NodeSpec] | None = None,
            *, say: fleet.Say = fleet.quiet) -> FleetHandle:
    """Bring the fleet up (or join it) and take a lease for this process."""
    specs = specs if specs is not None else fleet_specs()
    layout = config.layout
    before = state.load(layout)
    was_running = all(name in before.nodes and fleet.node_running(before.nodes[name], layout)
                      for name in (s.name for s in specs))
    fleet.require_root()
    with state.locked(layout):
        # Nodes other sessions hold keep their images (a restart would kill their engines).
        current = fleet.start_fleet(specs, project_dir=project_dir, config=config, say=say)
        state.add_lease(layout, os.getpid())
        if not was_running:
            layout.started_by_tests.write_text("")
    standin_real = config.standin_dir.resolve() == fleet.STANDIN_DIR.resolve()
    return FleetHandle(config=config, project_dir=project_dir,
                       nodes={n.spec.name: n.spec for n in current.nodes.values()},
                       standin_is_real=standin_real, started_here=not was_running)


def for_bench(project_dir: Path, *, join: bool, say: fleet.Say = fleet.quiet) -> FleetHandle:
    """The fleet a bench script drives: with ``join``, the three nodes as they run (a test
    session's: joining through ``sim up`` would write the inventory again for the real
    engines, whatever the stand-in markers of the session that runs the fleet say), else
    brought up (or joined) with a lease of this process (:func:`acquire`)."""
    config = FleetConfig()
    if join:
        return FleetHandle(config=config, project_dir=project_dir,
                           nodes={s.name: s for s in fleet_specs(3)}, standin_is_real=True,
                           started_here=False)
    return acquire(project_dir, config, say=say)


def release(handle: FleetHandle, *, say: fleet.Say = fleet.quiet) -> bool:
    """Give this process's lease back; stop the fleet when no other lease holder is left and
    a test session had started it. Returns whether the fleet was stopped."""
    layout = handle.config.layout
    with state.locked(layout):
        others = state.drop_lease(layout, os.getpid())
        marker = layout.started_by_tests
        if others or not marker.exists():
            return False
        marker.unlink()
        fleet.stop_fleet(config=handle.config, say=say)
    return True

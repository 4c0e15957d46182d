"""Compose over SSH: the runtime a rollout uses on a node (see
:mod:`servefleet.adapters.runtime.node`).

One deployment is one compose project on one port; its releases are folders on the node
(:mod:`servefleet.adapters.remote` describes the layout); every step is one command over
the node's one SSH connection, labelled for the operator and for the tests that follow a
rollout command by command.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from servefleet.adapters import compose_commands, remote, weights
from servefleet.adapters import releases as release_store
from servefleet.adapters.boot_follow import BootResult
from servefleet.adapters.boot_follow import follow_boot as follow_boot_log
from servefleet.adapters.gpu_probe import run_probe
from servefleet.adapters.lock import NodeLock
from servefleet.adapters.node_health import HealthOptions, gate_checks
from servefleet.adapters.observe import observe_command, observe_node, parse_observed
from servefleet.adapters.rollout.target import Target
from servefleet.adapters.runtime.base import Transport
from servefleet.adapters.runtime.node import AUDIT_TIMEOUT_SECONDS
from servefleet.adapters.weights.peers import PeerCopy
from servefleet.core.bootlog import BootFacts
from servefleet.core.errors import RemoteError, ServefleetError
from servefleet.core.gpu import GpuProbeResult
from servefleet.core.health_table import CheckRow
from servefleet.core.models import Node, Profile
from servefleet.core.observed import (
    ObservedContainer,
    ObservedDeployment,
    ObservedNode,
    ReleaseInfo,
    parse_preflight,
)
from servefleet.core.project import Project
from servefleet.core.render.weights import WEIGHTS_SERVICE, WeightsSpec

MIN_FREE_DISK_BYTES = 1 << 30
"""Refuse to deploy onto a node with less free space than this under its base directory."""
BUILD_TIMEOUT_SECONDS = 1800
UP_TIMEOUT_SECONDS = 600
STOP_TIMEOUT_SECONDS = 300
RECORD_TIMEOUT_SECONDS = 30
"""Bookkeeping commands (gate mark, prune) are short; a node that takes longer is lost."""
STAGE_TIMEOUT_SECONDS = 6 * 3600
"""Staging weights: 35 GB at 20 MB/s takes half an hour; a stalled fetch is cut here."""


class ComposeSshRuntime:
    """A node reached over SSH, its engines run by Docker Compose."""

    def __init__(self, transport: Transport, *, peers: PeerCopy | None = None) -> None:
        self.transport = transport
        self.peers = peers
        """The fleet's other nodes, to copy staged weights from (``None``: the hub only)."""
        self.node: Node = transport.node
        self.compose_cmd: tuple[str, ...] = ("docker", "compose")
        """``docker compose`` or ``docker-compose``, whichever preflight found."""

    def mask(self, text: str) -> str:
        """``text`` with every secret value masked."""
        return self.transport.mask(text)

    def observe(self, deployments: Sequence[str], *, key: str = "",
                candidates: Mapping[str, str] | None = None) -> ObservedNode:
        """One read-only command (retried once after a dropped connection)."""
        return observe_node(self.transport, deployments, key=key, candidates=candidates)

    def lock(self, operation: str, now: datetime, *, unlock_id: str | None,
             deployments: Sequence[str], key: str = "",
             candidates: Mapping[str, str] | None = None) -> tuple[NodeLock, ObservedNode]:
        """Take the lock and observe in the same round trip: another rollout may have
        finished between a first look and the lock."""
        lock = NodeLock(self.transport, operation, now, unlock_id=unlock_id)
        argv, stdin = observe_command(self.node, deployments, key=key, candidates=candidates)
        text = lock.acquire(argv, stdin=stdin)
        try:
            return lock, parse_observed(self.node.name, text, deployments, key=key)
        except RemoteError:
            lock.release()
            raise

    def preflight(self, target: Target, observed: ObservedDeployment | None) -> list[str]:
        """Docker, Compose, disk, port."""
        facts = parse_preflight(self.transport.run(
            remote.preflight(self.node.base_dir, target.port), idempotent=True,
            what="preflight").text())
        problems = []
        if facts.docker_version is None:
            problems.append(f"docker is not usable ({facts.docker_error or 'not found'})")
        if facts.compose is None:
            problems.append("neither `docker compose` nor `docker-compose` is installed")
        else:
            self.compose_cmd = facts.compose
        if facts.disk_free_bytes is not None and facts.disk_free_bytes < MIN_FREE_DISK_BYTES:
            problems.append(f"only {facts.disk_free_bytes / 2**30:.2f} GiB free under "
                            f"{self.node.base_dir} (need {MIN_FREE_DISK_BYTES / 2**30:.0f} GiB)")
        own_port = observed is not None and observed.running and \
            int((observed.manifest or {}).get("port") or -1) == target.port
        # A hand-started container the release replaces holds the port until the stop.
        own_port = own_port or (observed is not None and observed.adopt_candidate is not None
                                and observed.adopt_candidate.running)
        if facts.port_in_use and not own_port:
            problems.append(f"port {target.port} is already in use by another process")
        return problems

    def stage(self, target: Target, manifest: Mapping[str, Any], aside: str | None) -> None:
        """Send the release with its manifest (tar on stdin, checked, renamed in place)."""
        assert target.rendered is not None
        release_store.upload(self.transport, target.rendered, manifest, aside)

    def prepare(self, target: Target, on_line: Callable[[str], None]) -> None:
        """Build the overlay image, or pull the missing images."""
        args = (self.compose_cmd, self.node.base_dir, target.deployment, target.release_id,
                target.compose_files)
        if target.builds_image:
            self.transport.run(compose_commands.build(*args), timeout=BUILD_TIMEOUT_SECONDS,
                               idempotent=False, what="build the image overlay")
            return
        done = self.transport.run(compose_commands.pull(*args), timeout=BUILD_TIMEOUT_SECONDS,
                                  idempotent=True, what="pull the images")
        for line in done.text().splitlines():
            on_line(line)

    def stage_weights(self, target: Target, say: Callable[[str], None], *,
                      should_stop: Callable[[], bool] | None = None) -> None:
        """Run the release's ``weights`` service with the fetcher on standard input,
        its lines turned into progress as they come."""
        spec = target.weights
        assert spec is not None
        if self.peers is not None and target.profile is not None:
            self._copy_from_peer(self.peers, target.profile, spec, say)
        argv = compose_commands.stage_weights(
            self.compose_cmd, self.node.base_dir, target.deployment, target.release_id,
            target.compose_files, WEIGHTS_SERVICE, weights.program(spec.tool).decode())
        lines = (raw.decode("utf-8", "replace").rstrip("\r\n") for raw in
                 self.transport.stream_lines(argv, timeout=STAGE_TIMEOUT_SECONDS,
                                             should_stop=should_stop))
        try:
            weights.follow(lines, spec, say, node=self.node.name)
        except ServefleetError:
            # Cut short (a signal, a dropped link): the container would go on fetching
            # unseen. Best effort; the next staging removes a leftover first anyway.
            with contextlib.suppress(ServefleetError):
                self.transport.run(compose_commands.remove_container(
                    compose_commands.weights_container(target.deployment)),
                    timeout=RECORD_TIMEOUT_SECONDS, idempotent=True,
                    what="remove the staging container")
            raise

    def _copy_from_peer(self, peers: PeerCopy, profile: Profile, spec: WeightsSpec,
                        say: Callable[[str], None]) -> None:
        """Copy the weights from a neighbour that holds them verified, unless this node
        does; any failure leaves the fetch to the hub."""
        try:
            if peers.held(self.transport, spec):
                return
            holder = peers.find(self.node, profile)
            if holder is not None:
                peers.copy(self.transport, spec, holder, say)
        except ServefleetError as error:
            say(f"copy from a neighbour failed ({error}); fetching from the hub instead")

    def stop(self, deployment: str, *, grace_seconds: int | None = None,
             what: str = "stop the old engine") -> None:
        """``docker stop`` the deployment's containers."""
        self.transport.run(compose_commands.stop(deployment, grace_seconds=grace_seconds),
                           timeout=STOP_TIMEOUT_SECONDS, what=what)

    def clear(self, deployment: str, *, grace_seconds: int) -> None:
        """Stop and remove every container of the deployment's compose project."""
        self.transport.run(compose_commands.clear(deployment, grace_seconds=grace_seconds),
                           timeout=STOP_TIMEOUT_SECONDS,
                           what="clear the deployment's containers")

    def start(self, target: Target) -> str:
        """``up -d`` of the release folder (``docker start`` of an adopted container); the
        node's time when it started."""
        argv = compose_commands.start_adopted(target.deployment) if target.adopted else \
            compose_commands.up(self.compose_cmd, self.node.base_dir, target.deployment,
                                target.release_id, target.compose_files)
        done = self.transport.run(argv, timeout=UP_TIMEOUT_SECONDS, idempotent=False,
                                  what="start the engine")
        return compose_commands.parse_since(done.text())

    def adopt(self, target: Target, container: str) -> None:
        """Check the container's image against Compose's, then rename and record it."""
        self.transport.run(compose_commands.adopt_check(
            self.compose_cmd, self.node.base_dir, target.deployment, target.release_id,
            target.compose_files, container), idempotent=True, what="compare the images")
        self.transport.run(compose_commands.adopt_container(self.node.base_dir, target.deployment,
                                                  target.release_id, container),
                           idempotent=True, what=f"adopt container {container}")

    def unadopt(self, deployment: str, container: str) -> None:
        """Rename the adopted container back and drop the record."""
        argv = compose_commands.unadopt_container(self.node.base_dir, deployment, container)
        self.transport.run(argv, idempotent=True,
                           what=f"give container {container} its name back")

    def stop_container(self, container: str) -> None:
        """``docker stop`` of a hand-started container (restart policy ``no``)."""
        self.transport.run(compose_commands.stop_container(container),
                           timeout=STOP_TIMEOUT_SECONDS, what=f"stop container {container}")

    def follow_boot(self, target: Target, since: str, *, deadline: float,
                    clock: Callable[[], float],
                    on_line: Callable[[str], None]) -> BootResult:
        """``docker logs --follow`` from ``since``, resumed after a dropped link."""
        return follow_boot_log(self.transport, target.deployment, since, engine=target.engine,
                               deadline=deadline, clock=clock, on_line=on_line)

    def health_checks(self, project: Project, target: Target, *, facts: BootFacts,
                      base_url: str, since: float | None,
                      options: HealthOptions) -> tuple[list[CheckRow], str | None]:
        """See :func:`servefleet.adapters.node_health.gate_checks`."""
        assert target.profile is not None
        return gate_checks(self.transport, self.node, target.profile, target.deployment,
                           release_id=target.release_id, facts=facts, base_url=base_url,
                           since=since, project=project, options=options,
                           expected=target.gate.expected)

    def gpu_reading(self) -> GpuProbeResult:
        """The NVML probe, run by the node's ``python3``."""
        def run_remote(argv: list[str], stdin: bytes) -> tuple[int, bytes, bytes]:
            done = self.transport.run(argv, stdin=stdin, check=False, what="GPU probe")
            return done.exit_status, done.stdout, done.stderr

        return run_probe(run_remote, node=self.node.name)

    def mark_gated(self, deployment: str, release_id: str, at: str) -> None:
        """Write the gate mark (``gated``, ``last-good``)."""
        self.transport.run(remote.mark_gated(self.node.base_dir, deployment, release_id, at),
                           idempotent=True, timeout=RECORD_TIMEOUT_SECONDS * 2,
                           what="mark the engine gated")

    def switch(self, deployment: str, release_id: str) -> None:
        """Point ``current`` at ``release_id`` (an atomic rename)."""
        self.transport.run(remote.switch_current(self.node.base_dir, deployment, release_id),
                           idempotent=True, what=f"switch current to {release_id}")

    def prune(self, deployment: str, keep: int, protect: Sequence[str]) -> None:
        """Remove release folders beyond the newest ``keep``."""
        self.transport.run(remote.prune_releases(self.node.base_dir, deployment, keep,
                                                 list(protect)),
                           idempotent=False, timeout=RECORD_TIMEOUT_SECONDS * 4,
                           what="prune old releases")

    def audit(self, deployment: str, line: str, *,
              timeout: float = AUDIT_TIMEOUT_SECONDS) -> None:
        """Append ``line`` to the deployment's audit log."""
        self.transport.run(remote.append_audit(self.node.base_dir, deployment, line),
                           idempotent=False, timeout=timeout, what="append the audit line")

    def releases(self, deployment: str) -> list[ReleaseInfo]:
        """``releases/`` with each manifest, newest first."""
        return release_store.list_releases(self.transport, deployment)

    def log_lines(self, deployment: str, *, follow: bool = False, since: str | None = None,
                  tail: int | None = None,
                  should_stop: Callable[[], bool] | None = None) -> Iterator[str]:
        """``docker logs`` of the deployment's newest container, streamed."""
        argv = compose_commands.logs(deployment, follow=follow, since=since, tail=tail)
        for raw in self.transport.stream_lines(argv, should_stop=should_stop):
            yield self.mask(raw.decode("utf-8", "replace").rstrip("\r\n"))

    def containers(self, deployment: str) -> list[ObservedContainer]:
        """Every container of the deployment (its compose project's and an adopted one),
        running first."""
        observed = self.observe([deployment]).deployments.get(deployment)
        return list(observed.containers) if observed is not None else []

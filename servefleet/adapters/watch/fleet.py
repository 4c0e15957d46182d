"""The watcher: one kept-open SSH connection per node (reconnected with backoff), one read
per node and interval, the verdict and the recovery decision per deployment, and recovery
run beside the watch so that other nodes keep being sampled."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from servefleet.adapters.node_health import api_key_for
from servefleet.adapters.rollout import TransportFactory
from servefleet.adapters.runtime import Transport, open_transport
from servefleet.adapters.watch.read import (
    WatchedDeployment,
    read_command,
    read_spec,
    read_timeout,
)
from servefleet.adapters.watch.recover import Recovery
from servefleet.core.engines import engine_of
from servefleet.core.errors import ConfigError, ServefleetError
from servefleet.core.models import Node
from servefleet.core.models.watch import WatchConfig
from servefleet.core.project import Project
from servefleet.core.secrets import SecretMask
from servefleet.core.watch.classify import Verdict, classify
from servefleet.core.watch.policy import Decision, LadderState, decide
from servefleet.core.watch.sample import Sample, parse_node_read, unreachable

RECONNECT_BACKOFF_SECONDS = (1.0, 2.0, 5.0, 15.0, 30.0, 60.0)
MAX_PARALLEL_READS = 32


@dataclass(frozen=True)
class WatchEvent:
    """One line of ``--json``: a deployment's sample and verdict, or an action's outcome."""

    kind: str
    """``sample`` or ``action``."""
    node: str
    deployment: str
    state: str
    reason: str
    at: str
    action: str = "none"
    detail: str = ""
    figures: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``--json`` and of ``--notify``'s stdin."""
        return {"kind": self.kind, "node": self.node, "deployment": self.deployment,
                "state": self.state, "reason": self.reason, "action": self.action,
                "detail": self.detail, "at": self.at, **dict(self.figures)}


def watched(project: Project, nodes: Sequence[str] | None = None) -> list[WatchedDeployment]:
    """The stack's deployments on ``nodes`` (default: all) as the watcher reads them."""
    found = []
    for dep in project.deployments(list(nodes) if nodes else None):
        profile = project.profiles[dep.profile]
        utilization = engine_of(profile).gpu_memory_utilization(profile)
        found.append(WatchedDeployment(node=dep.node, name=dep.name,
                                       port=project.port_of(dep), engine=profile.engine,
                                       model=profile.model.served_name, profile=dep.profile,
                                       utilization=utilization))
    if not found:
        raise ConfigError(f"stack {project.stack.stack!r} places no deployment on "
                          f"{', '.join(nodes or []) or 'any node'}")
    return found


class NodeLink:
    """One node's kept-open connection; after a failure the next attempt waits out a
    growing backoff, so a dead node costs the others nothing."""

    def __init__(self, node: Node, factory: TransportFactory, mask: SecretMask,
                 clock: Callable[[], float]) -> None:
        self.node = node
        self.factory = factory
        self.mask = mask
        self.clock = clock
        self.transport: Transport | None = None
        self.failures = 0
        self.next_try = 0.0
        self.last_error = ""
        self.bytes_out = 0
        self.bytes_in = 0

    def read(self, argv: list[str], stdin: bytes, timeout: float) -> str | None:
        """The read's stdout, or None while the node is unreachable (``last_error``)."""
        now = self.clock()
        if now < self.next_try:
            return None
        try:
            if self.transport is None:
                self.transport = self.factory(self.node, self.mask)
            done = self.transport.run(argv, stdin=stdin, timeout=timeout, idempotent=True,
                                      what="watch read")
        except (ServefleetError, OSError) as error:
            self.close()
            self.failures += 1
            wait = RECONNECT_BACKOFF_SECONDS[min(self.failures,
                                                 len(RECONNECT_BACKOFF_SECONDS)) - 1]
            self.next_try = now + wait
            self.last_error = f"{error} (next try in {wait:g}s)"
            return None
        self.failures = 0
        self.bytes_out += sum(len(a) for a in argv) + len(stdin)
        self.bytes_in += len(done.stdout) + len(done.stderr)
        return done.text()

    def close(self) -> None:
        """Drop the connection (the next read reconnects)."""
        if self.transport is not None:
            try:
                self.transport.close()
            finally:
                self.transport = None


@dataclass
class Tracked:
    """What the watcher remembers of one deployment."""

    target: WatchedDeployment
    window: deque[Sample]
    verdict: Verdict = field(default_factory=lambda: Verdict("unknown", "not read yet"))
    ladder: LadderState = field(default_factory=LadderState)
    last_action: str = ""


class FleetWatcher:
    """Samples every deployment once per :meth:`tick`; acts through :class:`Recovery`."""

    def __init__(self, project: Project, targets: Sequence[WatchedDeployment],
                 config: WatchConfig, *, secrets: Mapping[str, str] | None = None,
                 transport_factory: TransportFactory | None = None,
                 recovery: Recovery | None = None, act: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 on_action: Callable[[WatchEvent], None] | None = None) -> None:
        self.project = project
        self.config = config
        self.secrets = dict(secrets or {})
        self.clock = clock
        self.act = act and config.recovery.enabled
        self.on_action = on_action
        factory: TransportFactory = transport_factory or (
            open_transport)
        mask = SecretMask.from_mapping(self.secrets)
        self.tracked: dict[str, Tracked] = {}
        self.by_node: dict[str, list[Tracked]] = {}
        size = config.wedge_intervals * 2 + 2
        for target in targets:
            item = Tracked(target, deque(maxlen=size))
            self.tracked[target.key] = item
            self.by_node.setdefault(target.node, []).append(item)
        self.links = {name: NodeLink(project.nodes[name], factory, mask, clock)
                      for name in self.by_node}
        self.recovery = recovery or Recovery(
            project, secrets=self.secrets, transport_factory=transport_factory,
            memory_wait_seconds=config.recovery.uma_free_wait_seconds)
        self.busy: dict[str, threading.Thread] = {}
        """Node → the recovery running there (one at a time per node)."""
        self.lock = threading.Lock()

    def _api_keys(self, node: str) -> dict[str, str | None]:
        return {t.target.name: api_key_for(self.project.profiles[t.target.profile],
                                           self.secrets)
                for t in self.by_node[node]}

    def read_node(self, node: str) -> dict[str, Sample]:
        """One read of ``node``: a sample per deployment (unreachable samples when the node
        did not answer or answered nonsense)."""
        items = self.by_node[node]
        targets = [t.target for t in items]
        link = self.links[node]
        text = link.read(read_command(), read_spec(targets, self.config, self._api_keys(node)),
                         read_timeout(self.config, len(targets)))
        at = self.clock()
        if text is None:
            return {t.name: unreachable(at, link.last_error) for t in targets}
        try:
            return parse_node_read(text, at, {t.name: t.engine for t in targets})
        except ValueError as error:
            return {t.name: unreachable(at, str(error)) for t in targets}

    def tick(self) -> list[WatchEvent]:
        """Read every node (in parallel), classify, decide, start recoveries; the events."""
        nodes = list(self.by_node)
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_READS, len(nodes))) as pool:
            reads = dict(zip(nodes, pool.map(self.read_node, nodes), strict=True))
        events = []
        for node, samples in reads.items():
            for item in self.by_node[node]:
                sample = samples.get(item.target.name) or Sample(
                    at=self.clock(), errors=("deployment missing from the read",))
                item.window.append(sample)
                events.append(self._judge(item, sample))
        return events

    def _judge(self, item: Tracked, sample: Sample) -> WatchEvent:
        item.verdict = classify(list(item.window), self.config)
        target = item.target
        recovering = target.node in self.busy and self.busy[target.node].is_alive()
        decision = decide(item.verdict, item.ladder, self.clock(), self.config.recovery,
                          unified_memory=self.project.nodes[target.node].unified_memory)
        action = decision.action
        if recovering and action not in ("none",):
            action = "wait"
        elif action in ("restart", "restore_last_good", "stop_and_alert"):
            item.ladder = decision.state
            if self.act:
                self._start(item, decision)
            else:
                action = "alert"
        else:
            item.ladder = decision.state
        event = self._event("sample", item, action, decision.reason if action != "none"
                            else "", sample)
        if action in ("restart", "restore_last_good", "stop_and_alert", "alert") and \
                self.on_action is not None:
            self.on_action(event)
        return event

    def _event(self, kind: str, item: Tracked, action: str, detail: str,
               sample: Sample | None = None) -> WatchEvent:
        figures: dict[str, Any] = {}
        if sample is not None and sample.reachable:
            figures = {"container": sample.container_status, "restarts": sample.restart_count,
                       "health": sample.health_status, "canary": sample.canary,
                       "running": sample.requests_running, "waiting": sample.requests_waiting,
                       "generation_tokens": sample.generation_tokens,
                       "kv_usage": sample.kv_usage,
                       "power_watts": [g.power_watts for g in sample.gpus]}
        return WatchEvent(kind, item.target.node, item.target.name, item.verdict.state,
                          item.verdict.reason, datetime.now(UTC).isoformat(timespec="seconds"),
                          action, detail, figures)

    def _start(self, item: Tracked, decision: Decision) -> None:
        def work() -> None:
            try:
                line = self.recovery.execute(item.target.node, item.target.name, decision)
            except ServefleetError as error:
                line = f"{item.target.key}: {decision.action} failed: {error}"
            item.last_action = line
            if self.on_action is not None:
                self.on_action(self._event("action", item, decision.action, line))

        thread = threading.Thread(target=work, name=f"recover-{item.target.key}", daemon=True)
        self.busy[item.target.node] = thread
        thread.start()

    def wait_for_recoveries(self, timeout: float | None = None) -> None:
        """Let running recoveries finish (``--once``, tests, shutdown)."""
        for thread in list(self.busy.values()):
            thread.join(timeout)

    def run(self, should_stop: Callable[[], bool], on_events: Callable[[list[WatchEvent]], None],
            sleep: Callable[[float], None] = time.sleep, ticks: int | None = None) -> None:
        """Tick every ``interval_seconds`` until ``should_stop`` (or after ``ticks`` ticks)."""
        done = 0
        while not should_stop():
            started = self.clock()
            on_events(self.tick())
            done += 1
            if ticks is not None and done >= ticks:
                return
            left = self.config.interval_seconds - (self.clock() - started)
            while left > 0 and not should_stop():
                sleep(min(left, 0.5))
                left = self.config.interval_seconds - (self.clock() - started)

    def close(self) -> None:
        """Close every connection."""
        for link in self.links.values():
            link.close()

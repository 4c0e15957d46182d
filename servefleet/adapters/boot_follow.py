"""Follow an engine's boot log as it streams, extracting facts line by line.

``docker logs --follow`` runs on the node; every line is fed to the streaming
:class:`~servefleet.core.bootlog.BootLogParser` as it arrives, and following stops as soon
as the parser says the engine is ready, shortly after it has failed (so the traceback that
follows the first fatal line is read too), when the container has exited, or at the
deadline.

The end of the stream proves nothing by itself: it ends when the container exits, but also
when the SSH connection drops or ``docker logs`` dies. So when it ends without an outcome the
container's state is asked (reconnecting with backoff after a drop): only a container that is
no longer running makes the boot :data:`ENGINE_EXITED`; a running one is followed again from
the same ``--since``, skipping the lines already read (the same lines come back in the same
order), so a drop never restores a possibly healthy engine.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from servefleet.adapters import compose_commands
from servefleet.adapters.observe import observe_node
from servefleet.adapters.runtime import Transport
from servefleet.core.bootlog import BootFacts, BootLogParser, reader_for
from servefleet.core.errors import (
    ConnectionLost,
    RemoteError,
    UnreachableNode,
)
from servefleet.core.observed import ObservedContainer

FAILURE_GRACE_SECONDS = 3.0
"""After the first fatal line, keep reading this long for the rest of the traceback."""
TAIL_LINES = 20
RECONNECT_BACKOFF_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Waits between attempts to reach the node again after a drop (the last one repeats)."""
BOOT_DEADLINE = "boot_deadline"
"""Failure class: the engine was neither ready nor failed before the deadline."""
ENGINE_EXITED = "engine_exited"
"""Failure class: the container stopped without a ready or failure line."""
CONNECTION_LOST = "connection_lost"
"""Failure class: the node could not be reached again before the deadline after a drop."""


@dataclass(frozen=True)
class BootResult:
    """What following a boot log found."""

    facts: BootFacts
    """Facts the parser extracted."""
    failure_class: str | None
    """:data:`BOOT_DEADLINE`, :data:`ENGINE_EXITED` or :data:`CONNECTION_LOST` when the log
    proves neither outcome."""
    tail: tuple[str, ...]
    """The last lines read (evidence when the log proves nothing)."""
    lines: int
    """How many lines were read."""
    resumed: int = 0
    """How often following was resumed (after a drop or a ``docker logs`` that ended while
    the container ran)."""
    container: ObservedContainer | None = None
    """The container's state when the log ended without an outcome."""


def container_state(transport: Transport, deployment: str) -> ObservedContainer | None:
    """The deployment's newest container (running first), or ``None`` when it has none."""
    observed = observe_node(transport, [deployment]).deployments.get(deployment)
    containers = list(observed.containers) if observed is not None else []
    running = [c for c in containers if c.running]
    if running or not containers:
        return running[0] if running else None
    return max(containers, key=lambda c: c.started_at or "")


def follow_boot(transport: Transport, deployment: str, since: str, *, engine: str,
                deadline: float, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep,
                on_line: Callable[[str], None] | None = None) -> BootResult:
    """Follow the deployment's log from ``since`` (node epoch seconds) until the engine is
    ready, has failed, its container has exited, or ``clock()`` passes ``deadline``."""
    parser = BootLogParser(reader_for(engine))
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    failed_at: list[float] = []
    count = 0
    resumed = 0
    quiet = 0
    container: ObservedContainer | None = None
    failure_class: str | None = None

    def should_stop() -> bool:
        now = clock()
        return now >= deadline or bool(failed_at and now - failed_at[0] > FAILURE_GRACE_SECONDS)

    while True:
        skip = lines_before = count
        dropped = False
        try:
            stream = transport.stream_lines(
                compose_commands.logs(deployment, follow=True, since=since),
                timeout=max(1.0, deadline - clock()), should_stop=should_stop)
            try:
                for raw in stream:
                    if skip:
                        skip -= 1  # read before the stream was resumed
                        continue
                    count += 1
                    parser.feed(raw)
                    text = transport.mask(raw.decode("utf-8", "replace").rstrip("\r\n"))
                    tail.append(text)
                    if on_line is not None:
                        on_line(text)
                    if parser.outcome == "ready":
                        break
                    if parser.outcome == "failed" and not failed_at:
                        failed_at.append(clock())
            finally:
                stream.close()
        except (ConnectionLost, UnreachableNode):
            dropped = True  # ask the node below, reconnecting
        if parser.outcome != "incomplete" or clock() >= deadline:
            break
        try:
            container, reached = _state_after(transport, deployment, deadline, clock, sleep)
        except RemoteError:
            # Docker answered nothing readable: the log's end is all there is to go by.
            failure_class = ENGINE_EXITED
            break
        if not reached:
            failure_class = CONNECTION_LOST
            break
        if container is None or not container.running:
            failure_class = ENGINE_EXITED
            break
        if count == lines_before and not dropped:
            # ``docker logs`` ended at once although the container runs: do not spin.
            sleep(RECONNECT_BACKOFF_SECONDS[min(quiet, len(RECONNECT_BACKOFF_SECONDS) - 1)])
            quiet += 1
        resumed += 1
    facts = parser.close()
    if facts.outcome == "incomplete" and failure_class is None:
        failure_class = BOOT_DEADLINE
    return BootResult(facts=facts, failure_class=failure_class, tail=tuple(tail), lines=count,
                      resumed=resumed, container=container)


def _state_after(transport: Transport, deployment: str, deadline: float,
                 clock: Callable[[], float], sleep: Callable[[float], None],
                 ) -> tuple[ObservedContainer | None, bool]:
    """The container's state, reconnecting with backoff until ``deadline`` (the transport
    reconnects by itself on the next command). Returns the state and whether the node
    answered at all; other errors (Docker's answer unreadable) propagate."""
    for attempt in range(10**6):
        try:
            return container_state(transport, deployment), True
        except (ConnectionLost, UnreachableNode):
            wait = RECONNECT_BACKOFF_SECONDS[min(attempt, len(RECONNECT_BACKOFF_SECONDS) - 1)]
            if clock() + wait >= deadline:
                break
            sleep(wait)
    return None, False

"""Follow an engine's boot log as it streams, extracting facts line by line.

``docker logs --follow`` runs on the node; every line is fed to the streaming
:class:`~servefleet.core.bootlog.BootLogParser` as it arrives, and following stops as soon
as the parser says the engine is ready, shortly after it has failed (so the traceback that
follows the first fatal line is read too), when the log ends (the container exited), or at
the deadline.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from servefleet.adapters import remote
from servefleet.adapters.ssh import SshTransport
from servefleet.core.bootlog import BootFacts, BootLogParser

FAILURE_GRACE_SECONDS = 3.0
"""After the first fatal line, keep reading this long for the rest of the traceback."""
TAIL_LINES = 20

BOOT_DEADLINE = "boot_deadline"
"""Failure class: the engine was neither ready nor failed before the deadline."""
ENGINE_EXITED = "engine_exited"
"""Failure class: the log ended (the container stopped) without a ready or failure line."""


@dataclass(frozen=True)
class BootResult:
    """What following a boot log found."""

    facts: BootFacts
    """Facts the parser extracted."""
    failure_class: str | None
    """:data:`BOOT_DEADLINE` or :data:`ENGINE_EXITED` when the log proves neither outcome."""
    tail: tuple[str, ...]
    """The last lines read (evidence when the log proves nothing)."""
    lines: int
    """How many lines were read."""


def follow_boot(transport: SshTransport, deployment: str, since: str, *, engine: str,
                deadline: float, clock: Callable[[], float] = time.monotonic,
                on_line: Callable[[str], None] | None = None) -> BootResult:
    """Follow the deployment's log from ``since`` (node epoch seconds) until the engine is
    ready, has failed, has exited, or ``clock()`` passes ``deadline``."""
    parser = BootLogParser(engine if engine in ("vllm", "llama.cpp", "sglang") else "auto")
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    failed_at: list[float] = []
    count = 0

    def should_stop() -> bool:
        now = clock()
        return now >= deadline or bool(failed_at and now - failed_at[0] > FAILURE_GRACE_SECONDS)

    remaining = max(1.0, deadline - clock())
    stream = transport.stream_lines(remote.logs(deployment, follow=True, since=since),
                                    timeout=remaining, should_stop=should_stop)
    try:
        for raw in stream:
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
    facts = parser.close()
    failure_class = None
    if facts.outcome == "incomplete":
        failure_class = BOOT_DEADLINE if clock() >= deadline else ENGINE_EXITED
    return BootResult(facts=facts, failure_class=failure_class, tail=tuple(tail), lines=count)

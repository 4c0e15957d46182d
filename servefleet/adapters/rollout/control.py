"""Time and interruptions, shared by every node's worker: a clock tests can control, and
signals turned into a controlled abort."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@dataclass(frozen=True)
class Clock:
    """Time, passed in so tests can control it."""

    monotonic: Callable[[], float] = time.monotonic
    """Seconds for measuring durations and deadlines."""
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    """Wall-clock time for manifests, locks and audit lines."""
    sleep: Callable[[float], None] = time.sleep
    """Wait between polls."""



class Abort:
    """Signals turned into a controlled abort, shared by every node's worker.

    The first signal asks each rollout to stop at its next phase boundary (a boot being
    followed ends at once) and restore; the second gives up: record and leave. A signal
    handler only sets flags here: it never raises into the middle of a remote command.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.signal_name: str | None = None
        """The first signal received (``SIGINT``…)."""
        self.give_up = False
        """A second signal arrived."""

    def trip(self, name: str) -> None:
        """A signal (or a KeyboardInterrupt) arrived."""
        with self._lock:
            if self.signal_name is None:
                self.signal_name = name
            else:
                self.give_up = True

    @property
    def requested(self) -> bool:
        """A first signal arrived."""
        return self.signal_name is not None

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[Abort]:
        """Route SIGINT, SIGTERM and SIGHUP here while the block runs (main thread only;
        elsewhere, e.g. inside a Pulumi provider's worker, the lock's recorded phase is
        what survives)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous: dict[int, Any] = {}
        for name in SIGNALS:
            number = getattr(signal, name, None)
            if number is None:
                continue
            previous[number] = signal.signal(number, lambda num, _frame:
                                             self.trip(signal.Signals(num).name))
        try:
            yield self
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


"""Stage a release's weights on its node before the old engine stops.

The release's compose file holds a one-shot ``weights`` service
(:mod:`servefleet.core.render.weights`); this module runs it with the fetcher program on
standard input (:data:`PROGRAMS`), follows the lines it prints as they come and turns them
into progress (bytes, rate, ETA) and, at the end, into a result or an error that says what
is cached. The fetchers are the real clients: ``huggingface_hub`` for a snapshot, ``curl``
and ``sha256sum`` for a file; both resume an interrupted download on the next run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources

from servefleet.core.errors import RemoteError
from servefleet.core.render.weights import WeightsSpec, WeightsTool

PROGRAMS: dict[WeightsTool, str] = {"python": "fetch_snapshot.py", "sh": "fetch_file.sh"}
"""The fetcher each tool runs, a file of this package."""
LINE_PREFIX = "@@weights "
EXIT_PREFIX = "@@weights-exit "
"""The last line the node's wrapper prints: the staging container's exit status."""


def program(tool: WeightsTool) -> bytes:
    """The fetcher program sent on standard input."""
    return resources.files(__name__).joinpath(PROGRAMS[tool]).read_bytes()


def size_text(count: float) -> str:
    """``512 B``, ``4.2 MiB``, ``34.2 GiB``, ``1.5 TiB``: sizes of weights, for people."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


@dataclass
class StagingState:
    """What the fetcher said so far, folded into a progress line and a result."""

    clock: Callable[[], float] = time.monotonic
    files: int = 0
    total: int = 0
    done: int = 0
    at_start: int = 0
    started: float | None = None
    outcome: str | None = None
    """``cached`` or ``verified`` once the fetcher said so."""
    corrupt: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    exit_status: int | None = None

    def feed(self, line: str) -> str | None:
        """Take one output line; the progress line to show, if it makes one."""
        if line.startswith(EXIT_PREFIX):
            status = line[len(EXIT_PREFIX):].strip()
            self.exit_status = int(status) if status.isdigit() else 255
            return None
        if not line.startswith(LINE_PREFIX):
            return None
        word, _, rest = line[len(LINE_PREFIX):].strip().partition(" ")
        numbers = [int(w) for w in rest.split() if w.isdigit()]
        if word == "plan" and len(numbers) >= 2:
            self.files, self.total = numbers[0], numbers[1]
            self.done = self.at_start = numbers[2] if len(numbers) > 2 else 0
            self.started = self.clock()
            resumed = f", {size_text(self.at_start)} already here" if self.at_start else ""
            return f"fetching {self.files} file(s), {size_text(self.total)}{resumed}"
        if word == "progress" and numbers:
            self.done = numbers[0]
            if len(numbers) > 1 and numbers[1]:
                self.total = numbers[1]
            return self.progress_line()
        if word in ("cached", "verified") and len(numbers) >= 2:
            self.outcome, self.files, self.total = word, numbers[0], numbers[1]
            return (f"{self.files} file(s), {size_text(self.total)}: "
                    + ("already staged and verified" if word == "cached" else "verified"))
        if word == "corrupt":
            self.corrupt.append(rest)
            return f"corrupt: {rest} (removed, fetched again on the next deploy)"
        if word == "error":
            self.errors.append(rest)
            return f"error: {rest}"
        return None

    def held_text(self) -> str:
        """``4.2 MiB of 8.4 MiB`` (the bytes alone when the total is unknown)."""
        if not self.total:
            return size_text(self.done)
        return f"{size_text(self.done)} of {size_text(self.total)}"

    def progress_line(self) -> str:
        """``12.3 GiB of 34.2 GiB (36%), 410.0 MiB/s, ETA 55 s``."""
        shown = self.held_text()
        if self.total:
            shown += f" ({100 * self.done // max(self.total, 1)}%)"
        elapsed = self.clock() - self.started if self.started is not None else 0.0
        fetched = self.done - self.at_start
        if elapsed > 0 and fetched > 0:
            rate = fetched / elapsed
            shown += f", {size_text(rate)}/s"
            if self.total > self.done:
                shown += f", ETA {int((self.total - self.done) / rate)} s"
        return shown

    def failure(self, spec: WeightsSpec) -> str | None:
        """Why the staging failed, with what is cached; ``None`` when it succeeded."""
        if self.exit_status == 0 and self.outcome is not None:
            return None
        why = "; ".join(self.errors[-2:]) or (
            f"the staging container exited with status {self.exit_status}"
            if self.exit_status is not None else "the staging command ended without a status")
        if self.corrupt:
            why = f"corrupt download refused ({', '.join(self.corrupt)}); {why}"
        kept = self.held_text()
        return (f"staging {spec.pin} failed: {why}. The old engine still serves; {kept} "
                f"is cached under {spec.host_folder} and the next deploy resumes from there")


def follow(lines: Iterable[str], spec: WeightsSpec, say: Callable[[str], None], *,
           node: str = "node", clock: Callable[[], float] = time.monotonic) -> StagingState:
    """Fold the fetcher's lines into progress and a state; raises :class:`RemoteError`
    when the staging failed (the message says what is cached)."""
    state = StagingState(clock=clock)
    for line in lines:
        shown = state.feed(line)
        if shown is not None:
            say(shown)
    failure = state.failure(spec)
    if failure is not None:
        raise RemoteError(node, failure)
    return state

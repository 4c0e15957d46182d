"""The progress of a deploy: one live status line per node on a terminal, a line per event
elsewhere (CI, pipes).

The rollout reports :class:`~servefleet.adapters.rollout.ProgressEvent` s: a phase entered,
a pulled image, a boot-log line. :class:`ProgressLines` folds them into what an operator
waiting on a long step wants to see: the phase, while booting the phase the boot log has
reached (:func:`servefleet.core.bootlog.phase.boot_phase`: loading weights → profiling →
CUDA graphs → API server), the seconds since the engine was started against the profile's
boot deadline, and the last detail. It is a pure function of the events, so it is tested
on event sequences; :func:`progress_display` puts it on the screen.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console

    from servefleet.adapters.rollout import ProgressEvent
    from servefleet.core.models import Deployment
    from servefleet.core.project import Project

BOOT_CLOCK_PHASES = frozenset({"up", "boot", "health"})
"""Phases timed against the boot deadline (it starts when ``up`` does)."""
DETAIL_CHARS = 80


@dataclass
class _NodeState:
    deployment: str = ""
    phase: str = "waiting"
    phase_started: float = 0.0
    elapsed: float = 0.0
    boot_started: float | None = None
    boot_phase: str | None = None
    detail: str = ""
    parser: Any = None


@dataclass
class ProgressLines:
    """The status of every node, folded from its events (thread-safe)."""

    deadlines: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Boot deadline in seconds per ``(node, deployment)``."""
    nodes: dict[str, _NodeState] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, event: ProgressEvent) -> None:
        """Fold one event in."""
        from servefleet.core.bootlog import BootLogParser
        from servefleet.core.bootlog.phase import boot_phase

        with self.lock:
            state = self.nodes.setdefault(event.node, _NodeState())
            state.elapsed = event.elapsed
            if event.deployment:
                state.deployment = event.deployment
            if event.phase != state.phase:
                state.phase, state.phase_started = event.phase, event.elapsed
                state.detail = ""
                if event.phase == "up":
                    state.boot_started = event.elapsed
                    state.boot_phase, state.parser = None, None
                elif event.phase not in BOOT_CLOCK_PHASES:
                    state.boot_started = None
            if event.phase == "boot" and event.message:
                if state.parser is None:
                    state.parser = BootLogParser()
                state.parser.feed(event.message + "\n")
                state.boot_phase = boot_phase(state.parser.facts())
            if event.message:
                state.detail = " ".join(event.message.split())

    def line(self, node: str) -> str:
        """``node/deployment  phase (boot phase)  12s / 900s  detail``."""
        state = self.nodes[node]
        name = f"{node}/{state.deployment}" if state.deployment else node
        phase = state.phase
        if state.phase in ("boot", "health") and state.boot_phase:
            phase += f" ({state.boot_phase})"
        if state.boot_started is not None:
            deadline = self.deadlines.get((node, state.deployment))
            clock = f"{state.elapsed - state.boot_started:.0f}s"
            clock += f" of {deadline:.0f}s" if deadline else ""
        else:
            clock = f"{state.elapsed - state.phase_started:.0f}s"
        detail = state.detail[:DETAIL_CHARS]
        return "  ".join(part for part in (name, phase, clock, detail) if part)

    def lines(self) -> list[str]:
        """One line per node, in the order they first reported."""
        with self.lock:
            return [self.line(node) for node in self.nodes]


def render(events: list[ProgressEvent],
           deadlines: Mapping[tuple[str, str], float] | None = None) -> list[str]:
    """The status lines after ``events`` (the pure form of what the terminal shows)."""
    view = ProgressLines(dict(deadlines or {}))
    for event in events:
        view.update(event)
    return view.lines()


def event_line(event: ProgressEvent) -> str:
    """One line per event for a non-terminal: ``[  12.3s] node/deployment phase: detail``."""
    name = f"{event.node}/{event.deployment}" if event.deployment else event.node
    detail = f": {event.message}" if event.message else ""
    return f"[{event.elapsed:7.1f}s] {name} {event.phase}{detail}"


@contextlib.contextmanager
def progress_display(console: Console, deadlines: Mapping[tuple[str, str], float]
                     ) -> Iterator[Callable[[ProgressEvent], None]]:
    """A progress callback: on a terminal, live status lines (rich, cleared at the end);
    otherwise a line per event on stdout, as logs and CI read it."""
    if not console.is_terminal:
        yield lambda event: click.echo(event_line(event))
        return
    from rich.live import Live
    from rich.text import Text

    view = ProgressLines(dict(deadlines))

    def screen() -> Text:
        return Text("\n".join(view.lines()) or "starting", no_wrap=True, overflow="ellipsis")

    with Live(screen(), console=console, refresh_per_second=4, transient=True) as live:
        def callback(event: ProgressEvent) -> None:
            view.update(event)
            live.update(screen())

        yield callback


def boot_deadlines(project: Project, deployments: Iterable[Deployment]
                   ) -> dict[tuple[str, str], float]:
    """The boot deadline of each deployment's profile, by ``(node, deployment)``."""
    return {(d.node, d.name): project.profiles[d.profile].health.boot_deadline_seconds
            for d in deployments if d.profile in project.profiles}

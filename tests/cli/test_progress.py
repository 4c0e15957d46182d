"""The deploy's progress lines as a pure function of the rollout's events; the boot lines
are those of a real vLLM CPU boot, cleaned as the rollout cleans them before emitting."""

from __future__ import annotations

from servefleet.adapters.rollout import ProgressEvent
from servefleet.cli.progress import event_line, render
from servefleet.core.bootlog.lines import clean_line
from tests.reference_project import REPO_ROOT

HEALTHY = REPO_ROOT / "tests/core/bootlog/data/vllm-cpu-real/healthy.log"
NODE, DEP = "sim-spark-1", "main"


def event(phase: str, elapsed: float, message: str = "") -> ProgressEvent:
    return ProgressEvent(NODE, DEP, phase, elapsed, message)


def boot_events(start: float) -> list[ProgressEvent]:
    """Each line of the real boot log, one second apart, as the rollout emits them."""
    lines = HEALTHY.read_text().splitlines()
    return [event("boot", start + i, clean_line(line, 0).msg[:160])
            for i, line in enumerate(lines)]


def line_after(events: list[ProgressEvent]) -> str:
    [line] = render(events, {(NODE, DEP): 900})
    return line


def test_pull_shows_phase_seconds_and_detail() -> None:
    events = [event("observe", 0.1), event("lock", 0.2), event("pull", 1.0),
              event("pull", 13.4, "vllm/vllm-openai:v0.21.0 Pulling")]
    assert line_after(events) == "sim-spark-1/main  pull  12s  vllm/vllm-openai:v0.21.0 Pulling"


def test_boot_walks_through_the_log_phases_against_the_deadline() -> None:
    start = [event("stop", 20.0), event("gpu", 21.0), event("up", 22.0), event("boot", 25.0)]
    assert line_after(start) == "sim-spark-1/main  boot  3s of 900s"
    lines = boot_events(26.0)
    seen: list[str] = []
    for i in range(1, len(lines) + 1):
        phase = line_after(start + lines[:i]).split("  ")[1]
        if not seen or seen[-1] != phase:
            seen.append(phase)
    assert seen == ["boot (starting)", "boot (loading weights)", "boot (profiling)",
                    "boot (capturing CUDA graphs)", "boot (starting the API server)",
                    "boot (ready)"]
    final = line_after(start + lines + [event("health", 26.0 + len(lines))])
    assert final == f"sim-spark-1/main  health (ready)  {4 + len(lines):.0f}s of 900s"


def test_a_new_boot_starts_a_new_clock_and_parser() -> None:
    first = [event("up", 10.0), *boot_events(11.0)]
    restore = [event("restore", 200.0, "restoring r1"), event("up", 201.0),
               event("boot", 202.0)]
    assert line_after(first + restore) == "sim-spark-1/main  boot  1s of 900s"


def test_two_nodes_two_lines_and_the_plain_event_line() -> None:
    events = [event("pull", 1.0), ProgressEvent("sim-5090", None, "observe", 0.5)]
    assert render(events) == ["sim-spark-1/main  pull  0s", "sim-5090  observe  0s"]
    assert event_line(event("boot", 42.25, "Loading weights took 0.52 seconds")) == \
        "[   42.2s] sim-spark-1/main boot: Loading weights took 0.52 seconds"

"""``servefleet bench NODE[/DEPLOYMENT]``: measure the engine a node serves, per scenario,
and keep the figures on the node beside the release they measured.

The load generator is vLLM's own ``vllm bench serve``, run in the engine's container; the
scenarios come from a file (the stack's ``servefleet:benchScenarios``, by default the
seeds' A-D in ``scenarios/seeds.yaml``). ``--compare R1 R2`` compares two releases'
recorded figures; see ``docs/bench.md``.

Exit status: 0; 1 on a configuration error or a failed run; :data:`EXIT_REFUSED` when the
engine may not be measured now (not running, ungated, a rollout holds the node).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from secrets import token_hex
from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext
from servefleet.cli.rollout_common import console

if TYPE_CHECKING:
    from servefleet.adapters.bench.session import BenchProgress, BenchTarget
    from servefleet.adapters.rollout.results import ProgressEvent
    from servefleet.adapters.runtime import Transport
    from servefleet.core.bench.compare import Change, Decision
    from servefleet.core.bench.record import BenchRecord
    from servefleet.core.bench.scenario import Scenario
    from servefleet.core.bench.summary import ScenarioSummary
    from servefleet.core.project import Project

EXIT_REFUSED = 3
"""Exit status when the engine may not be measured now."""
EXIT_INTERRUPTED = 130
"""Exit status of a bench stopped by Ctrl-C, SIGTERM or SIGHUP."""
_VERDICT_STYLE = {"better": "green", "worse": "red", "no change": "dim"}


@contextlib.contextmanager
def _stops_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end a bench as Ctrl-C does (a KeyboardInterrupt), so the runs
    that finished stay recorded and a load container is removed, not left loading."""
    def stop(number: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(number).name)

    previous = {number: signal.signal(number, stop)
                for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def split_target(target: str, deployment: str | None) -> tuple[str, str]:
    """``NODE/DEPLOYMENT`` or ``NODE`` (with ``--deployment``, else ``main``)."""
    node, _, named = target.partition("/")
    if named and deployment and named != deployment:
        raise click.UsageError(f"{target!r} names deployment {named!r} but --deployment "
                               f"says {deployment!r}")
    return node, named or deployment or "main"


def print_summaries(summaries: Sequence[ScenarioSummary], title: str,
                    records: Sequence[BenchRecord] = ()) -> None:
    """The per-scenario table, then the throughput chart, the errors and, for each seed of
    ``records`` that ran again after lost requests, why (its figures are the last run's)."""
    from rich.table import Table

    from servefleet.core.bench.table import SUMMARY_HEADER, chart, summary_row

    out = console()
    table = Table(title=title, box=None, header_style="bold", title_justify="left")
    for column in SUMMARY_HEADER:
        table.add_column(column, justify="left" if column in {"scenario", "load"} else "right")
    for summary in summaries:
        table.add_row(*summary_row(summary),
                      style="red" if summary.failed else None)
    out.print(table)
    seeds = sorted({seed for s in summaries for seed in s.seeds})
    out.print(f"[dim]means over seeds {', '.join(map(str, seeds))}; times in ms; accept: "
              "speculative acceptance rate/length[/dim]")
    bars = chart(summaries)
    if bars:
        out.print("[bold]output tok/s by scenario[/bold]")
        label = max(len(name) for name, _, _ in bars)
        for name, bar, value in bars:
            out.print(f"  {name.ljust(label)}  [cyan]{bar}[/cyan] {value}")
    for summary in summaries:
        for error in summary.errors:
            out.print(f"[red]{summary.scenario}: error:[/red] {error}")
    for record in records:
        note = _rerun_note(record)
        if note:
            out.print(f"[yellow]{record.scenario} seed {record.seed}:[/yellow]{note}")


def print_changes(changes: Sequence[Change], decision: Decision | None, title: str) -> None:
    """The decision table (and the decision, when there is one)."""
    from rich.table import Table

    from servefleet.core.bench.table import CHANGE_HEADER, TABLE_FIGURES, change_row

    out = console()
    table = Table(title=title, box=None, header_style="bold", title_justify="left")
    for column in CHANGE_HEADER:
        table.add_column(column, justify="left" if column in {"scenario", "figure",
                                                              "verdict"} else "right")
    for change in changes:
        if change.figure in TABLE_FIGURES:
            table.add_row(*change_row(change), style=_VERDICT_STYLE[change.verdict])
    out.print(table)
    out.print("[dim]--json has every figure; the band is the largest of the control's move, "
              "the seeds' spread and 2%[/dim]")
    if decision is not None:
        out.print(f"[bold]keep {decision.keep}[/bold]: {decision.reason}")


def _rerun_note(record: BenchRecord) -> str:
    """Says when the seed ran again after requests lost to a closed connection (the
    engine's figures are the last run's; see ``dropped_connections`` in the load
    program)."""
    reruns = record.figures.get("reruns") or []
    if not reruns:
        return ""
    lost = sum(int(r.get("failed") or 0) for r in reruns)
    errors = list(dict.fromkeys(str(r["error"]) for r in reruns if r.get("error")))
    return (f" (ran {len(reruns) + 1} times: {lost} request(s) of the earlier run(s) found "
            "their connection closed by the engine before it answered"
            + (f": {'; '.join(errors)}" if errors else "") + ")")


def _scenarios(project: Project, path: str | None, only: str | None) -> list[Scenario]:
    from servefleet.core.bench.scenario import load_scenarios, select

    shown = path or project.stack.bench_scenarios
    file = Path(shown) if Path(shown).is_absolute() else project.root / shown
    names = [n.strip() for n in (only or "").split(",") if n.strip()]
    return select(load_scenarios(file, shown), names, shown)


def _compare(transport_node: str, project: Project, deployment: str,
             releases: tuple[str, str], as_json: bool) -> None:
    from servefleet.adapters.bench import read_records
    from servefleet.adapters.runtime import connect
    from servefleet.core.bench.compare import compare
    from servefleet.core.bench.summary import summarise
    from servefleet.core.errors import ConfigError

    with connect(project.nodes[transport_node]) as transport:
        records, _ = read_records(transport, deployment)
    sides = []
    for release in releases:
        mine = [r for r in records if r.release.startswith(release)]
        if not mine:
            known = sorted({r.release for r in records})
            raise ConfigError(f"{transport_node}/{deployment}: no bench recorded for release "
                              f"{release!r} (recorded: {', '.join(known) or 'none'})")
        sides.append(summarise(mine))
    changes = compare(sides[0], sides[1])
    if as_json:
        click.echo(json.dumps([_change_json(c) for c in changes], indent=2))
        return
    print_changes(changes, None, f"{transport_node}/{deployment}: {releases[0]} (A) against "
                  f"{releases[1]} (B); no control ran, so the band is the seeds' spread")


def _ab(project: Project, node: str, deployment: str, profile_b: str,
        scenarios: list[Scenario],
        progress: BenchProgress, say: Callable[[str], None], keep_better: bool,
        as_json: bool) -> None:
    from servefleet.adapters.bench.ab import run_ab
    from servefleet.cli.rollout_common import missing_error, secrets_from_env, show_findings
    from servefleet.core.bench.summary import summarise

    secrets, missing = secrets_from_env(project, [node])
    if missing:
        raise missing_error(missing)
    show_findings(console(), project)

    def deploy_line(event: ProgressEvent) -> None:
        if event.phase in ("upload", "stop", "up", "health", "switch", "restore", "done",
                           "failed"):
            say(f"  [{event.elapsed:6.1f}s] {event.node} {event.phase}"
                + (f": {event.message}" if event.message and event.phase in ("done", "failed")
                   else ""))

    outcome = run_ab(project, node, deployment, profile_b, scenarios, run_id=token_hex(6),
                     secrets=secrets, say=say, bench_progress=progress,
                     deploy_progress=deploy_line, keep_better=keep_better)
    if as_json:
        click.echo(json.dumps({
            "a": outcome.profile_a, "b": outcome.profile_b, "serving": outcome.serving,
            "failure": outcome.failure,
            "decision": None if outcome.decision is None else {
                "keep": outcome.decision.keep, "reason": outcome.decision.reason},
            "changes": [_change_json(c) for c in outcome.changes],
            "records": {role: [json.loads(r.to_line()) for r in records]
                        for role, records in outcome.records.items()}}, indent=2))
    else:
        for role, records in outcome.records.items():
            print_summaries(summarise(records), f"{role}: {records[0].profile}, release "
                            f"{records[0].release}", records)
        if outcome.changes:
            print_changes(outcome.changes, outcome.decision,
                          f"{node}/{deployment}: A = {outcome.profile_a}, B = "
                          f"{outcome.profile_b}, A' = A again (the control)")
        console().print(f"{node}/{deployment} now serves "
                        f"[bold]{outcome.serving or 'nothing known'}[/bold]")
    if outcome.failure:
        click.echo(f"error: {outcome.failure}", err=True)
        sys.exit(1)


def _canaries(transport: Transport, project: Project, target: BenchTarget, path: str,
              as_json: bool) -> None:
    """Send a canary file's canaries, print and record the verdicts; exit 1 on a failure."""
    from servefleet.adapters.bench.canaries import run_canaries
    from servefleet.cli.rollout_common import node_secrets
    from servefleet.core.canary import load_canaries

    file = Path(path) if Path(path).is_absolute() else project.root / path
    rows = run_canaries(transport, target, load_canaries(file, path), run_id=token_hex(6),
                        profile=project.profiles.get(target.profile),
                        secrets=node_secrets(project, target.node))
    if as_json:
        click.echo(json.dumps([row.to_json() for row in rows], indent=2))
    else:
        out = console()
        for row in rows:
            colour = "green" if row.verdict == "pass" else "red"
            out.print(f"[{colour}]{row.fact}: {row.verdict}[/{colour}] ({row.expected}): "
                      f"{row.observed}; {'; '.join(row.evidence)}")
    if any(row.verdict == "fail" for row in rows):
        sys.exit(1)


def _print_stability(project: Project, profile: str, records: Sequence[BenchRecord],
                     as_json: bool) -> None:
    """Per scenario: the prompts every run answered alike, and why a profile is expected
    to differ (speculative decoding, several llama.cpp slots) when it is."""
    from servefleet.core.bench.stability import stability
    from servefleet.core.determinism import instability_reason

    by_scenario: dict[str, list[BenchRecord]] = {}
    for record in records:
        by_scenario.setdefault(record.scenario, []).append(record)
    results = [stability(group) for group in by_scenario.values()]
    known = project.profiles.get(profile)
    reason = instability_reason(known) if known is not None else None
    if as_json:
        click.echo(json.dumps([{"scenario": r.scenario, "runs": r.runs, "prompts": r.prompts,
                                "stable": r.stable, "unstable": list(r.unstable),
                                "expected_reason": reason} for r in results], indent=2))
        return
    out = console()
    for result in results:
        colour = "green" if not result.unstable else "yellow" if reason else "red"
        out.print(f"[{colour}]{result.scenario}: {result.text()}[/{colour}]"
                  + (f" (prompts {', '.join(str(i + 1) for i in result.unstable)} differ)"
                     if result.unstable else ""))
    if reason and any(r.unstable for r in results):
        out.print(f"[dim]expected for {profile}: {reason}[/dim]")


def _change_json(change: Change) -> dict[str, object]:
    return {"scenario": change.scenario, "figure": change.figure.key, "a": change.a,
            "b": change.b, "control": change.control, "change": change.change,
            "band": change.band, "verdict": change.verdict}


@click.command("bench")
@click.argument("target", metavar="NODE[/DEPLOYMENT]")
@click.option("--deployment", "-d", default=None, help="The deployment (default: main).")
@click.option("--scenarios", "scenarios_path", default=None, metavar="FILE",
              help="Scenario file (default: the stack's servefleet:benchScenarios).")
@click.option("--only", default=None, metavar="NAMES",
              help="Only these scenarios, comma-separated (A,C).")
@click.option("--compare", "compare_releases", nargs=2, default=None,
              metavar="R1 R2", help="Compare two releases' recorded figures; runs nothing.")
@click.option("--ab", "profile_b", default=None, metavar="PROFILE_B",
               help="Bench A (what runs), deploy PROFILE_B gated and bench it, put A back "
                    "and bench it again (the control), then print the decision table.")
@click.option("--keep-better", is_flag=True,
              help="With --ab: leave the node on the winner (B deployed again, gated).")
@click.option("--repeat", type=click.IntRange(2, 20), default=None, metavar="N",
              help="Run each scenario N times with its first seed at temperature 0 and "
                   "report, per prompt, whether every run answered alike.")
@click.option("--canaries", "canaries_path", default=None, metavar="FILE",
              help="Send the canaries of FILE (prompts with a checked answer) instead of "
                   "the scenarios; each verdict is recorded.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@click.pass_obj
def bench_command(obj: CliContext, target: str, deployment: str | None,
                  scenarios_path: str | None, only: str | None,
                  compare_releases: tuple[str, str] | None, profile_b: str | None,
                  keep_better: bool, repeat: int | None, canaries_path: str | None,
                  as_json: bool) -> None:
    """Measure the engine NODE serves with vLLM's `vllm bench serve`, scenario by scenario
    (output tok/s, TTFT, TPOT, ITL, errors, KV peak, speculative acceptance), and keep
    the figures on the node with the release they measured (`history` shows them)."""
    from servefleet.adapters.bench.session import (
        BenchProgress,
        BenchRefused,
        bench_target,
        run_bench,
    )
    from servefleet.adapters.runtime import connect
    from servefleet.core.bench.summary import summarise
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project

    node, deployment = split_target(target, deployment)
    project = load_project(obj.project_dir, obj.stack)
    if node not in project.nodes:
        raise ConfigError(f"unknown node {node!r}; the inventory has: "
                          f"{', '.join(sorted(project.nodes))}")
    if compare_releases:
        _compare(node, project, deployment, compare_releases, as_json)
        return
    if keep_better and profile_b is None:
        raise click.UsageError("--keep-better goes with --ab PROFILE_B")
    if canaries_path and (repeat or profile_b):
        raise click.UsageError("--canaries runs alone: not with --repeat or --ab")
    if repeat and profile_b is not None:
        raise click.UsageError("--repeat and --ab are separate runs: run one, then the other")
    scenarios = _scenarios(project, scenarios_path, only)
    say = (lambda text: click.echo(text, err=True)) if as_json else click.echo
    progress = BenchProgress(
        started=lambda s, seed: say(f"{node}/{deployment} {s.name} ({s.shape()}, "
                                    f"{s.prompts} requests) seed {seed}: running"),
        alive=lambda s, seed, seconds: None,
        finished=lambda r: say(
            f"{node}/{deployment} {r.scenario} seed {r.seed}: "
            f"{r.value('output_throughput') or 0:,.1f} out tok/s, TTFT "
            f"{r.value('mean_ttft_ms') or 0:,.1f} ms, {int(r.value('failed') or 0)} failed"
            f"{_rerun_note(r)}"))
    if profile_b is not None:
        with _stops_as_interrupt():
            _ab(project, node, deployment, profile_b, scenarios, progress, say, keep_better,
                as_json)
        return
    with _stops_as_interrupt(), connect(project.nodes[node]) as transport:
        try:
            target_info = bench_target(transport, deployment, project,
                                       loads=canaries_path is None)
        except BenchRefused as error:
            click.echo(f"refused: {error}", err=True)
            sys.exit(EXIT_REFUSED)
        if canaries_path is not None:
            _canaries(transport, project, target_info, canaries_path, as_json)
            return
        say(f"{node}/{deployment}: release {target_info.release} ({target_info.profile}, "
            f"{target_info.engine.display_name} {target_info.engine_version}), "
            f"{len(scenarios)} scenario(s)")
        try:
            records = run_bench(transport, target_info, scenarios, run_id=token_hex(6),
                                role="repeat" if repeat else "run", progress=progress,
                                repeat=repeat or 0)
        except BenchRefused as error:
            click.echo(f"refused: {error}", err=True)
            sys.exit(EXIT_REFUSED)
        except KeyboardInterrupt as stop:
            click.echo(f"interrupted ({stop or 'Ctrl-C'}): the load stopped; the runs that "
                       f"finished are recorded on {node}/{deployment}", err=True)
            sys.exit(EXIT_INTERRUPTED)
    if repeat:
        _print_stability(project, target_info.profile, records, as_json)
    elif as_json:
        click.echo(json.dumps([json.loads(r.to_line()) for r in records], indent=2))
    else:
        print_summaries(summarise(records), f"{node}/{deployment}: release "
                        f"{target_info.release} ({target_info.profile})", records)
    if any(r.value("failed") for r in records):
        sys.exit(1)


COMMANDS: list[click.Command] = [bench_command]
"""Commands of this module."""

"""``servefleet tune PROFILE --node NODE --measure``: the measured search, from the CLI
(the search is :mod:`servefleet.core.tune`, the real path :mod:`servefleet.adapters.tune`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from secrets import token_hex
from typing import Any

import click

from servefleet.cli.main import CliContext

EXIT_INTERRUPTED = 130
"""Interrupted (SIGINT/SIGTERM): the profile is back, gated; the same command resumes."""
STATE_DIR = Path(".servefleet") / "tune"
"""Where a search's trials are kept in the project folder (resumed from there)."""


def parse_values(items: tuple[str, ...]) -> dict[str, list[Any]]:
    """``--values max_num_seqs=4,8,16`` (repeatable) as knob → values (numbers; names for
    ``kv_cache_dtype``)."""
    values: dict[str, list[Any]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not text.strip():
            raise click.BadParameter(f"{item!r}: write KNOB=V1,V2,… (e.g. max_num_seqs=4,8,16)",
                                     param_hint="--values")
        if name.strip() == "kv_cache_dtype":
            values[name.strip()] = [v.strip() for v in text.split(",")]
            continue
        try:
            values[name.strip()] = [float(v) if "." in v else int(v) for v in text.split(",")]
        except ValueError:
            raise click.BadParameter(f"{item!r}: the values must be numbers",
                                     param_hint="--values") from None
    return values


def run_measured(obj: CliContext, profile_name: str, node_name: str, *,
                 deployment: str | None, scenarios_path: str | None, only: str | None,
                 slo_text: str | None, max_deploys: int | None, max_minutes: float | None,
                 grid: bool, apply: bool, knobs: str | None, values: tuple[str, ...],
                 as_json: bool, allow_outage: bool = False) -> None:
    """The measured tune: search, table, verdict and the winner's overlay."""
    import yaml

    from servefleet.adapters.bench.session import BenchProgress, BenchRefused
    from servefleet.adapters.gateway.follow import OutageRefused, following_gateway
    from servefleet.adapters.tune import (
        MeasuredTune,
        StateFile,
        candidate_name,
        drained_search,
        run_tune,
    )
    from servefleet.cli.bench import EXIT_REFUSED, _scenarios
    from servefleet.cli.rollout_common import (
        console,
        missing_error,
        secrets_from_env,
        show_findings,
    )
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project
    from servefleet.core.secrets import SecretMask
    from servefleet.core.suggest import unknown_name
    from servefleet.core.tune.report import chart, table
    from servefleet.core.tune.slo import parse_slo
    from servefleet.core.tune.space import default_space, vllm_overlay

    project = load_project(obj.project_dir, obj.stack)
    if profile_name not in project.profiles:
        raise ConfigError(unknown_name("profile", profile_name, project.profiles, "profiles/"))
    profile = project.profiles[profile_name]
    try:
        slo = parse_slo(slo_text)
        space = default_space(profile,
                              [k.strip() for k in knobs.split(",")] if knobs else None,
                              parse_values(values))
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    mine = [d for d in project.stack.for_node(node_name) if d.profile == profile_name
            and (deployment is None or d.name == deployment)]
    if len(mine) != 1:
        raise ConfigError(
            f"stack {project.stack.stack!r} places {profile_name} on {node_name} "
            f"{len(mine)} time(s){'' if deployment is None else f' as {deployment}'}: a "
            "measured tune searches around a deployment the node serves (deploy it first; "
            "--deployment picks one of several)")
    dep = mine[0].name
    secrets, missing = secrets_from_env(project, [node_name])
    if missing:
        raise missing_error(missing)
    out = console()
    if not as_json:
        show_findings(out, project)
    scenarios = _scenarios(project, scenarios_path, only)
    budget = max_deploys if max_deploys is not None else (
        space.size - 1 if grid else max(2, (space.size - 1) // 3))

    def say(line: str) -> None:
        if as_json:
            click.echo(line, err=True)
        else:
            out.print(line, highlight=False)

    progress = BenchProgress(
        started=lambda s, seed: say(f"  bench {s.name} seed {seed}"),
        alive=lambda s, seed, seconds: None,
        finished=lambda r: say(f"  bench {r.scenario} seed {r.seed}: "
                               f"{r.value('output_throughput') or 0:,.1f} out tok/s"))
    key = {"node": node_name, "deployment": dep, "profile": profile_name,
           "knobs": [[k.name, list(k.values)] for k in space.knobs],
           "scenarios": [s.identity for s in scenarios], "slo": str(slo),
           "method": "grid" if grid else "search"}
    state = StateFile(project.root / STATE_DIR /
                      f"{node_name}-{dep}-{profile_name}-{'grid' if grid else 'search'}.json",
                      key)
    knob_text = ", ".join(f"{k.name} {list(k.values)}" for k in space.knobs)
    say(f"{node_name}/{dep}: {space.size} points ({knob_text}); "
        f"{'grid' if grid else 'compass search'}, at most {budget} deploy(s); SLO {slo}")
    tune = MeasuredTune(project, node_name, dep, space, slo, scenarios, secrets, state,
                        token_hex(6), say, progress)
    try:
        with following_gateway(project, allow_outage=allow_outage,
                               mask=SecretMask.from_mapping(secrets)) as gateway:
            outcome = drained_search(gateway, node_name, dep, say, lambda: run_tune(
                tune, max_deploys=budget, max_minutes=max_minutes,
                method="grid" if grid else "search", apply=apply))
    except (BenchRefused, OutageRefused) as error:  # nothing was deployed
        click.echo(f"refused: {error}", err=True)
        sys.exit(EXIT_REFUSED)
    assert outcome.verdict is not None
    winner = outcome.verdict.winner
    overlay = None
    if winner is not None:
        overlay = {"extends": profile_name,
                   "description": f"{profile_name} tuned on {node_name} by servefleet tune "
                                  f"--measure ({outcome.verdict.reason})",
                   "vllm": vllm_overlay(project.profiles[profile_name], winner.point)}
        if apply:
            path = project.root / "profiles" / f"{candidate_name(profile_name, winner.point)}.yaml"
            path.write_text(yaml.safe_dump(overlay, sort_keys=False, allow_unicode=True))
            say(f"wrote {path.relative_to(project.root)}; place it in the stack to keep it")
    if as_json:
        click.echo(json.dumps({
            "profile": profile_name, "node": node_name, "deployment": dep,
            "control": outcome.control.to_json(),
            "control_again": outcome.control_again.to_json() if outcome.control_again else None,
            "trials": [t.to_json() for t in outcome.trials], "deploys": outcome.deploys,
            "ended": outcome.ended, "drift": outcome.drift, "serving": outcome.serving,
            "winner": winner.to_json() if winner else None,
            "reason": outcome.verdict.reason, "overlay": overlay,
            "failure": outcome.failure}, indent=2))
    else:
        say("")
        for line in table(outcome.control, outcome.trials, winner):
            say(line)
        say("")
        for line in chart(outcome.control, outcome.trials):
            say(line)
        say(f"\n{outcome.deploys} deploy(s); {outcome.ended}; control moved "
            f"{outcome.drift:.1%} between its runs")
        say(f"verdict: {outcome.verdict.reason}")
        say(f"{node_name}/{dep} serves {outcome.serving or 'nothing known'}")
        if overlay is not None:
            click.echo(yaml.safe_dump(overlay, sort_keys=False, allow_unicode=True), nl=False)
    if outcome.failure or outcome.serving is None:
        say(f"failed: {outcome.failure}")
        sys.exit(1)
    if outcome.ended.startswith("interrupted"):
        say(f"interrupted: {node_name}/{dep} serves {outcome.serving}, gated; the same "
            "command resumes the search")
        sys.exit(EXIT_INTERRUPTED)

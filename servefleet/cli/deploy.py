"""``servefleet plan | deploy | rollback | unlock | releases``.

Every command that can change a node first runs the validation rules (``servefleet
validate``): an error stops it before any node is touched; warnings are shown. Ctrl-C (or
SIGTERM, SIGHUP) during a deploy or rollback aborts it cleanly: the phase in progress ends,
the release that served before is restored and gated; a second signal gives up at once and
leaves the node's lock marked with the phase, which the next ``plan`` shows and the next
deploy repairs.

Secrets for the nodes' env files come from the operator's environment (``HF_TOKEN``…): the
names are those the deployed profiles list in ``secret_env``; a missing one is named before
anything is touched. Progress shows per node (phase, elapsed); ``--json`` prints one JSON
document for machines instead. Exit status: 0 when every node deployed (or was already
right), 1 otherwise.

Engines spanning nodes (``servefleet:multiNode``) are planned and deployed as one item
each, rank by rank, after the per-node deployments (a node may carry both, and each
rollout holds the node lock); NODES selects every such engine with a rank on one of them.
``rollback`` of one of their ranks is refused: the ranks must run one release.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from rich.console import Console

    from servefleet.adapters.multinode import MultiNodePlan, MultiNodeResult
    from servefleet.adapters.rollout import (
        DeploymentResult,
        Failure,
        NodeResult,
        Progress,
        Restore,
    )
    from servefleet.core.errors import ConfigError
    from servefleet.core.plan import PlanItem
    from servefleet.core.project import Project

_STATUS_STYLE = {
    "unchanged": "dim", "deployed": "green", "failed": "red", "rolled_back": "yellow",
    "restore_failed": "bold red", "skipped": "dim", "error": "red",
    "interrupted": "bold red",
}


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def secrets_from_env(project: Project, nodes: Sequence[str] | None) -> tuple[dict[str, str],
                                                                             list[str]]:
    """The secret values the chosen deployments need (those spanning nodes included), from
    the environment, and the names that are missing."""
    names = sorted({name for profile in _chosen_profiles(project, nodes)
                    for name in project.profiles[profile].secret_env})
    found = {n: os.environ[n] for n in names if os.environ.get(n)}
    return found, [n for n in names if n not in found]


def _chosen_profiles(project: Project, nodes: Sequence[str] | None) -> list[str]:
    return [profile for _, profile in _chosen_keys(project, nodes)]


def _chosen_keys(project: Project, nodes: Sequence[str] | None) -> list[tuple[str, str]]:
    """``(deployment key, profile)`` of every deployment NODES selects, spanning ones too."""
    from servefleet.adapters.multinode import select_multinode

    single, multi = select_multinode(project, nodes)
    chosen = [] if single == [] else project.deployments(single)
    return [*((d.key, d.profile) for d in chosen), *((d.key, d.profile) for d in multi)]


def node_secrets(project: Project, node: str) -> dict[str, str]:
    """The secrets NODE's deployments use, from the environment: what its probes send (an
    API key) and what every line read from it is masked with. Empty for a node the stack
    does not place anything on (the command then names the node's own problem)."""
    from servefleet.core.errors import ConfigError

    try:
        return secrets_from_env(project, [node])[0]
    except ConfigError:
        return {}


def show_findings(console: Console, project: Project) -> None:
    """Run the validation rules: errors raise (nothing is touched), warnings are printed."""
    from rich.text import Text

    from servefleet.adapters import rollout
    from servefleet.core.rules import Severity

    for finding in rollout.check_rules(project):
        if finding.severity is Severity.WARNING:
            console.print(Text(f"warning: {finding}", style="yellow"))


def node_line(node: str, message: str) -> str:
    """``node: message``, the node named once (errors from the SSH layer already start
    with it)."""
    return message if message.startswith(f"{node}: ") else f"{node}: {message}"


def uncomparable(project: Project, nodes: Sequence[str] | None,
                 missing: Sequence[str]) -> list[str]:
    """One line per missing secret: the deployments whose release id it is part of, which
    plan cannot compare with what runs (the ids would differ whatever the node holds)."""
    lines = []
    for name in missing:
        keys = [key for key, profile in _chosen_keys(project, nodes)
                if name in project.profiles[profile].secret_env]
        lines.append(f"{name} is not set in the environment: {', '.join(keys)} cannot be "
                     f"compared with what runs (their release ids include it) and show as "
                     f"changed; export {name}=… to compare them")
    return lines


def _missing_error(missing: list[str]) -> ConfigError:
    from servefleet.core.errors import ConfigError

    return ConfigError([f"secret {name} is not set in the environment: export {name}=… "
                        "before deploying (it goes only into the node's 0600 env file)"
                        for name in missing])


# -- plan ------------------------------------------------------------------------------------
def _preview(project: Project, item: PlanItem) -> str | None:
    """The engine-terms line of a changed deployment, calibrated on the node's baselines
    when it has some (see core.kvplan.preview)."""
    from servefleet.core.kvplan.preview import plan_item_preview

    return plan_item_preview(project, item)


def _print_plan(console: Console, project: Project, items: Iterable[PlanItem],
                errors: Iterable[NodeResult]) -> None:
    from rich.text import Text

    for item in items:
        lines = item.summary_lines()
        style = "dim" if item.action == "unchanged" else \
            ("green" if item.action == "create" else "yellow")
        console.print(Text(lines[0], style=style))
        for line in lines[1:]:
            console.print(Text(line))
        preview = _preview(project, item)
        if preview is not None:
            console.print(Text(f"    {preview}", style="cyan"))
    for error in errors:
        console.print(Text(node_line(error.node, error.error or error.status), style="red"))


def _print_multinode_plan(console: Console, plans: Iterable[MultiNodePlan]) -> None:
    from rich.text import Text

    for one in plans:
        lines = one.summary_lines()
        style = "dim" if one.action == "unchanged" else \
            ("green" if one.action == "create" else "yellow")
        console.print(Text(lines[0], style=style))
        for line in lines[1:]:
            console.print(Text(line))


def plan_all(project: Project, nodes: Sequence[str] | None, secrets: dict[str, str],
             ) -> tuple[list[PlanItem], list[MultiNodePlan], list[NodeResult]]:
    """The per-node plan and the plan of every engine spanning nodes that NODES selects,
    with the nodes that could not be read."""
    from servefleet.adapters import rollout
    from servefleet.adapters.multinode import plan_multinode, select_multinode
    from servefleet.core.errors import ConfigError

    single, multi = select_multinode(project, nodes)
    if single == [] and not multi:
        raise ConfigError(f"stack {project.stack.stack!r} places nothing on "
                          f"{', '.join(nodes or []) or 'any node'}")
    items, errors = ([], []) if single == [] else rollout.plan_fleet(project, single, secrets)
    plans, more = plan_multinode(project, multi, secrets)
    return items, plans, [*errors, *more]


@click.command("plan")
@click.argument("nodes", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.pass_obj
def plan_command(obj: CliContext, nodes: tuple[str, ...], as_json: bool) -> None:
    """Show what a deploy would change on NODES (default: every node of the stack):
    per deployment unchanged / update (with the engine-flag diff) / create. Read-only."""
    from rich.text import Text

    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    secrets, missing = secrets_from_env(project, nodes)
    if not as_json:
        show_findings(_console(), project)
        for line in uncomparable(project, nodes, missing):
            _console().print(Text(f"note: {line}", style="yellow"))
    items, plans, errors = plan_all(project, nodes, secrets)
    if as_json:
        click.echo(json.dumps({"plan": [{**i.to_json(), "preview": _preview(project, i)}
                                        for i in items],
                               "multi_node": [p.to_json() for p in plans],
                               "errors": [e.to_json() for e in errors],
                               "missing_secrets": missing,
                               "uncomparable": uncomparable(project, nodes, missing)},
                              indent=2))
    else:
        console = _console()
        _print_plan(console, project, items, [])
        _print_multinode_plan(console, plans)
        _print_plan(console, project, [], errors)
    if errors:
        sys.exit(1)


# -- deploy ----------------------------------------------------------------------------------
def _health_cells(result: DeploymentResult) -> str:
    report = result.health or (result.restore.health if result.restore else None)
    if report is None:
        return ""
    facts = report.facts
    parts = []
    if "kv_cache_tokens" in facts:
        parts.append(f"KV {facts['kv_cache_tokens']:,} tokens")
    if "cudagraph_mode" in facts:
        parts.append(str(facts["cudagraph_mode"]))
    if "n_ctx" in facts:
        parts.append(f"n_ctx {facts['n_ctx']:,}")
    return ", ".join(parts)


def print_results(console: Console, results: Sequence[NodeResult]) -> None:
    """The outcome per node and deployment, with failures, proving lines and restores."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold")
    for column in ("node", "deployment", "status", "release", "health", "time"):
        table.add_column(column, justify="right" if column == "time" else "left")
    for node in results:
        if node.error is not None:
            table.add_row(node.node, "", Text(node.status, style=_STATUS_STYLE[node.status]),
                          "", Text(node.error), f"{node.elapsed:.1f}s")
            continue
        for dep in node.deployments:
            release = dep.release_id or ""
            if dep.previous_release and dep.previous_release != dep.release_id:
                release = f"{dep.previous_release} -> {release}"
            table.add_row(node.node, dep.deployment,
                          Text(dep.status, style=_STATUS_STYLE.get(dep.status, "")), release,
                          _health_cells(dep), f"{node.elapsed:.1f}s")
    console.print(table)
    for node in results:
        for dep in node.deployments:
            if dep.failure is None:
                continue
            _print_failure(console, f"{node.node}/{dep.deployment}", dep.failure,
                           dep.restore)
            if dep.status == "interrupted":
                console.print(Text(f"  the node lock stays, marked with the phase: "
                                   f"`servefleet plan {node.node}` shows it and the next "
                                   "deploy repairs it", style="bold red"))
        for warning in dep_warnings(node):
            console.print(Text(warning, style="yellow"))


def print_multinode_results(console: Console, results: Sequence[MultiNodeResult]) -> None:
    """One line per engine spanning nodes, one per rank, then its failure and restore."""
    from rich.text import Text

    from servefleet.adapters.multinode import rank_role

    for one in results:
        console.print(Text(f"{one.deployment}: {one.status} (release {one.release_id})",
                           style=_STATUS_STYLE.get(one.status, "")))
        for index, dep in enumerate(one.ranks):
            release = dep.release_id or ""
            if dep.previous_release and dep.previous_release != dep.release_id:
                release = f"{dep.previous_release} -> {release}"
            health = _health_cells(dep)
            console.print(Text(f"  rank {index} {rank_role(index)} {dep.node}: {dep.status} "
                               f"{release}" + (f" ({health})" if health else "")))
            for text in dep.warnings:
                console.print(Text(f"  {dep.node}/{dep.deployment}: warning: {text}",
                                   style="yellow"))
        _print_failure(console, one.deployment, one.failure, one.restore, " on every rank")


def _print_failure(console: Console, who: str, failure: Failure | None,
                   restore: Restore | None, where: str = "") -> None:
    """The failed step with its class and evidence, then what the restore did."""
    from rich.text import Text

    if failure is not None:
        cls = f" [{failure.failure_class}]" if failure.failure_class else ""
        console.print(Text(f"{who}: failed in {failure.phase}{cls}: {failure.message}",
                           style="red"))
        for line in failure.evidence:
            console.print(Text(f"    {line}", style="dim"))
    if restore is not None:
        style = "yellow" if restore.ok else "bold red"
        console.print(Text(f"  restore of {restore.release_id}{where}: {restore.message}",
                           style=style))


def dep_warnings(node: NodeResult) -> list[str]:
    """``node/deployment: warning: …`` lines (after the switch: the release stays)."""
    return [f"{node.node}/{dep.deployment}: warning: {text}"
            for dep in node.deployments for text in dep.warnings]


@click.command("deploy")
@click.argument("nodes", nargs=-1)
@click.option("--strategy", type=click.Choice(["parallel", "rolling"]), default=None,
              help="All nodes at once, or one at a time stopping at the first failure "
                   "(default: the stack's servefleet:strategy).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before changing nodes.")
@click.option("--force-unlock", "force_unlock", metavar="LOCK_ID", default=None,
              help="Remove the node lock with this id (printed by the lock error and by "
                   "`plan`) left behind by a rollout that died, then deploy; a lock with "
                   "another id stays.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_obj
def deploy_command(obj: CliContext, nodes: tuple[str, ...], strategy: str | None, yes: bool,
                   force_unlock: str | None, as_json: bool) -> None:
    """Deploy the stack to NODES (default: every node of the stack), health-gated, with
    automatic restore of the previous release on failure."""
    from servefleet.adapters import rollout
    from servefleet.adapters.multinode import select_multinode
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    secrets, missing = secrets_from_env(project, nodes)
    if missing:
        raise _missing_error(missing)
    console = _console()
    if not as_json:
        show_findings(console, project)
    if not yes:
        if as_json or not sys.stdin.isatty():
            raise click.UsageError("not a terminal: pass --yes to deploy without confirming")
        items, plans, errors = plan_all(project, nodes, secrets)
        _print_plan(console, project, items, [])
        _print_multinode_plan(console, plans)
        _print_plan(console, project, [], errors)
        if not any(i.changes for i in items) and not any(p.changes for p in plans) \
                and not errors:
            console.print("nothing to deploy: every node runs its release")
            return
        if not click.confirm("deploy these changes?", default=False):
            raise click.Abort()
    single, multi = select_multinode(project, nodes)
    started = time.monotonic()
    run_strategy: rollout.Strategy | None = (
        "rolling" if strategy == "rolling" else "parallel" if strategy == "parallel" else None)
    if as_json:
        results, spanning = _deploy_all(project, single, multi, run_strategy, secrets,
                                        None, force_unlock)
        click.echo(json.dumps({"ok": _all_ok(results, spanning),
                               "seconds": round(time.monotonic() - started, 3),
                               "nodes": [r.to_json() for r in results],
                               "multi_node": [r.to_json() for r in spanning]}, indent=2))
    else:
        from servefleet.cli.progress import boot_deadlines, progress_display

        deadlines = boot_deadlines(project, project.deployments(single) if single != [] else [])
        with progress_display(console, deadlines) as progress:
            results, spanning = _deploy_all(project, single, multi, run_strategy, secrets,
                                            progress, force_unlock)
        if results:
            print_results(console, results)
        print_multinode_results(console, spanning)
    if not _all_ok(results, spanning):
        sys.exit(1)


def _all_ok(results: Sequence[NodeResult], spanning: Sequence[MultiNodeResult]) -> bool:
    return all(r.ok for r in results) and all(r.ok for r in spanning)


def _deploy_all(project: Project, single: list[str] | None, multi: Sequence[Any],
                strategy: Any, secrets: dict[str, str], progress: Progress | None,
                unlock_id: str | None) -> tuple[list[NodeResult], list[MultiNodeResult]]:
    """The per-node rollout, then each engine spanning nodes (one after the other: they
    take the same node locks). Under ``rolling``, or after Ctrl-C, an earlier failure
    leaves the rest ``skipped``."""
    from servefleet.adapters import rollout
    from servefleet.adapters.multinode import MultiNodeResult, deploy_multinode
    from servefleet.adapters.rollout import Abort, Failure

    abort = Abort()
    results = [] if single == [] else rollout.deploy(
        project, single, strategy, secrets, progress=progress, unlock_id=unlock_id,
        abort=abort)
    spanning: list[MultiNodeResult] = []
    rolling = (strategy or project.stack.strategy) == "rolling"
    for dep in multi:
        failed = not _all_ok(results, spanning)
        if abort.requested or (rolling and failed):
            why = (f"interrupted by {abort.signal_name}" if abort.requested
                   else "an earlier deployment failed (rolling strategy)")
            spanning.append(MultiNodeResult(dep.key, "-", "skipped",
                                            failure=Failure("lock", f"not attempted: {why}",
                                                            "skipped")))
            continue
        spanning.append(deploy_multinode(project, dep.name, secrets, abort=abort,
                                         progress=progress, unlock_id=unlock_id))
    return results, spanning


# -- rollback, releases, logs ----------------------------------------------------------------
@click.command("rollback")
@click.argument("node")
@click.option("--deployment", "-d", default="main", show_default=True)
@click.option("--to", "to", default=None, help="Release id (default: the previous release).")
@click.option("--force-unlock", "force_unlock", metavar="LOCK_ID", default=None,
              help="Remove the node lock with this id first (a lock with another id stays).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def rollback_command(obj: CliContext, node: str, deployment: str, to: str | None,
                     force_unlock: str | None, as_json: bool) -> None:
    """Make an earlier release of NODE's deployment current again, health-gated (with the
    secrets its profile probes with, e.g. an API key, from the environment)."""
    from servefleet.adapters import rollout
    from servefleet.adapters.rollout import NodeResult
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    for dep in project.stack.multi_node:
        if dep.name == deployment and node in dep.nodes:
            # One rank on another release than its peers cannot join them; restoring every
            # rank is what a deploy of the earlier settings does, gated as one unit.
            raise ConfigError(
                f"{project.stack_file}: servefleet:multiNode.{dep.name}: {node} runs a rank "
                f"of {dep.key}; rolling back one rank is refused (every rank must run one "
                "release). Fix: put the earlier profile or settings back in the stack "
                f"file and run `servefleet deploy {dep.head}`, which moves every rank")
    secrets = node_secrets(project, node)
    if not as_json:
        show_findings(_console(), project)
    result = rollout.rollback(project, node, deployment, to, secrets=secrets,
                              unlock_id=force_unlock)
    node_result = NodeResult(node, [result])
    if as_json:
        click.echo(json.dumps(node_result.to_json(), indent=2))
    else:
        print_results(_console(), [node_result])
    if not result.ok:
        sys.exit(1)


@click.command("unlock")
@click.argument("node")
@click.argument("lock_id")
@click.pass_obj
def unlock_command(obj: CliContext, node: str, lock_id: str) -> None:
    """Remove NODE's lock if its id is LOCK_ID (as Terraform's force-unlock): for a lock
    left by a rollout that died. A lock with another id, a live rollout's, stays. The next
    `plan` shows what the dead rollout left; the next deploy repairs it."""
    from servefleet.adapters import rollout
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    outcome = rollout.unlock(project, node, lock_id)
    click.echo(f"{node}: lock {lock_id} removed" if outcome == "removed"
               else f"{node}: not locked")


@click.command("releases")
@click.argument("node")
@click.option("--deployment", "-d", default="main", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the releases as JSON.")
@click.pass_obj
def releases_command(obj: CliContext, node: str, deployment: str, as_json: bool) -> None:
    """List the releases of NODE's deployment, newest first (* = current)."""
    from rich.table import Table

    from servefleet.adapters import rollout
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    infos = rollout.list_releases(project, node, deployment,
                                  secrets=node_secrets(project, node))
    if as_json:
        click.echo(json.dumps([{"release_id": i.release_id, "current": i.current,
                                "created_at": i.created_at or None, "profile": i.profile,
                                "created_by": (i.manifest or {}).get("created_by")}
                               for i in infos], indent=2))
        return
    table = Table(box=None, header_style="bold")
    for column in ("", "release", "created", "profile", "by"):
        table.add_column(column)
    for info in infos:
        table.add_row("*" if info.current else "", info.release_id, info.created_at,
                      info.profile or "?", str((info.manifest or {}).get("created_by", "")))
    _console().print(table)


COMMANDS: list[click.Command] = [plan_command, deploy_command, rollback_command,
                                 unlock_command, releases_command]
"""Commands of this module."""

"""``servefleet deploy``.

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
``rollback`` of one of their ranks is refused: the ranks must run one release
(:mod:`servefleet.cli.releases`). ``plan`` is :mod:`servefleet.cli.plan`; what is printed
after a rollout, :mod:`servefleet.cli.results`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from servefleet.cli.main import CliContext
from servefleet.cli.plan import plan_all, print_plan
from servefleet.cli.results import print_multinode_results, print_results
from servefleet.cli.rollout_common import (
    console,
    missing_error,
    secrets_from_env,
    show_findings,
)

if TYPE_CHECKING:
    from servefleet.adapters.multinode import MultiNodeResult
    from servefleet.adapters.rollout import NodeResult, Progress
    from servefleet.core.project import Project


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
@click.option("--allow-outage", is_flag=True,
              help="With a gateway: let a rollout drain the last engine serving a route "
                   "(its requests fail until the engine is back).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_obj
def deploy_command(obj: CliContext, nodes: tuple[str, ...], strategy: str | None, yes: bool,
                   force_unlock: str | None, allow_outage: bool, as_json: bool) -> None:
    """Deploy the stack to NODES (default: every node of the stack), health-gated, with
    automatic restore of the previous release on failure."""
    from servefleet.adapters import rollout
    from servefleet.adapters.multinode import select_multinode
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    secrets, missing = secrets_from_env(project, nodes)
    if missing:
        raise missing_error(missing)
    out = console()
    if not as_json:
        show_findings(out, project)
    # The reads behind the plan the operator confirmed: the deploy acts on that plan and
    # reads each node again only under its lock.
    observations: dict[str, Any] = {}
    if not yes:
        if as_json or not sys.stdin.isatty():
            raise click.UsageError("not a terminal: pass --yes to deploy without confirming")
        fleet = plan_all(project, nodes, secrets)
        print_plan(out, project, fleet)
        if not fleet.changes:
            out.print("nothing to deploy: every node runs its release")
            return
        if not click.confirm("deploy these changes?", default=False):
            raise click.Abort()
        observations = fleet.observations
    single, multi = select_multinode(project, nodes)
    started = time.monotonic()
    if project.stack.gateway.enabled:
        # First, so the engines' rollouts find the gateway they drain and re-admit in.
        _ensure_gateway(project, None if as_json else out)
    run_strategy: rollout.Strategy | None = (
        "rolling" if strategy == "rolling" else "parallel" if strategy == "parallel" else None)
    if as_json:
        results, spanning = _deploy_all(project, single, multi, run_strategy, secrets,
                                        None, force_unlock, allow_outage, observations)
        click.echo(json.dumps({"ok": _all_ok(results, spanning),
                               "seconds": round(time.monotonic() - started, 3),
                               "nodes": [r.to_json() for r in results],
                               "multi_node": [r.to_json() for r in spanning]}, indent=2))
    else:
        from servefleet.cli.progress import boot_deadlines, progress_display

        deadlines = boot_deadlines(project, project.deployments(single) if single != [] else [])
        with progress_display(out, deadlines) as progress:
            results, spanning = _deploy_all(project, single, multi, run_strategy, secrets,
                                            progress, force_unlock, allow_outage,
                                            observations)
        if results:
            print_results(out, results)
        print_multinode_results(out, spanning)
    if not _all_ok(results, spanning):
        sys.exit(1)


def _ensure_gateway(project: Project, out: Any) -> None:
    """Roll the stack's gateway out (nothing happens when it runs its release already);
    a gateway that does not pass its gate stops the deploy before any engine."""
    from servefleet.adapters.gateway.rollout import roll_out
    from servefleet.core.errors import ServefleetError
    from servefleet.core.gateway.render import render_gateway

    result = roll_out(project, render_gateway(project))
    if out is not None:
        out.print(f"{result.node} gateway {result.release_id}: {result.status}",
                  highlight=False)
    if not result.ok:
        raise ServefleetError(f"{result.node} gateway: {result.status}: {result.message}; no "
                              "engine was touched")


def _all_ok(results: Sequence[NodeResult], spanning: Sequence[MultiNodeResult]) -> bool:
    return all(r.ok for r in results) and all(r.ok for r in spanning)


def _deploy_all(project: Project, single: list[str] | None, multi: Sequence[Any],
                strategy: Any, secrets: dict[str, str], progress: Progress | None,
                unlock_id: str | None, allow_outage: bool = False,
                observations: Mapping[str, Any] | None = None,
                ) -> tuple[list[NodeResult], list[MultiNodeResult]]:
    """The per-node rollout, then each engine spanning nodes (one after the other: they
    take the same node locks). Under ``rolling``, or after Ctrl-C, an earlier failure
    leaves the rest ``skipped``. With a gateway, each engine is drained in it before its
    stop and re-admitted after its gate."""
    from servefleet.adapters import rollout
    from servefleet.adapters.gateway.follow import following_gateway
    from servefleet.adapters.multinode import MultiNodeResult, deploy_multinode
    from servefleet.adapters.rollout import Abort, Failure
    from servefleet.core.secrets import SecretMask

    abort = Abort()
    with following_gateway(project, allow_outage=allow_outage,
                           mask=SecretMask.from_mapping(secrets)) as gateway:
        results = [] if single == [] else rollout.deploy(
            project, single, strategy, secrets, progress=progress, unlock_id=unlock_id,
            observations=observations,
            abort=abort, hooks=gateway.hooks() if gateway else None)
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


COMMANDS: list[click.Command] = [deploy_command]
"""Commands of this module."""

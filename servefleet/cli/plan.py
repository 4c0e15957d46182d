"""``servefleet plan``: what a deploy would change, read-only.

Per deployment: unchanged / update (with the engine-flag diff) / create, and for a changed
vLLM deployment the KV pool, CUDA-graph mode and concurrency the new profile will boot with
(calibrated on the node's baselines when it has some). A node that cannot be read
(unreachable, refused host key) is named, and its deployments are still shown as git
renders them: the flags and the KV prediction, marked ``unreachable: compared with git
only``. Exit status: 0 when every node was read, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from servefleet.cli.main import CliContext
from servefleet.cli.rollout_common import (
    console,
    node_line,
    secrets_from_env,
    show_findings,
    uncomparable,
)

if TYPE_CHECKING:
    from rich.console import Console

    from servefleet.adapters.multinode import MultiNodePlan
    from servefleet.adapters.rollout import NodeResult, Observation
    from servefleet.core.plan import PlanItem
    from servefleet.core.project import Project

GIT_ONLY = "unreachable: compared with git only"
"""How a deployment of a node that could not be read is marked."""


@dataclass(frozen=True)
class FleetPlan:
    """The per-node plan, the plans of engines spanning nodes, the nodes that could not be
    read, and those nodes' deployments as git renders them (planned against nothing)."""

    items: list[PlanItem]
    plans: list[MultiNodePlan]
    errors: list[NodeResult]
    git_only: list[PlanItem]
    gateway: dict[str, Any] | None = None
    """The stack's gateway, git's release against the running one, with its routes and
    each engine's state (:func:`servefleet.cli.gateway.gateway_view`)."""
    observations: dict[str, Observation] = field(default_factory=dict)
    """Each node's read behind :attr:`items`, for a deploy that follows this plan."""

    @property
    def changes(self) -> bool:
        """Anything a deploy would do, or could not tell."""
        gateway = self.gateway is not None and \
            self.gateway["running_release"] != self.gateway["release"]
        return bool(self.errors) or gateway or any(i.changes for i in self.items) \
            or any(p.changes for p in self.plans)


def preview(project: Project, item: PlanItem) -> str | None:
    """The engine-terms line of a changed deployment, calibrated on the node's baselines
    when it has some (see core.kvplan.preview)."""
    from servefleet.core.kvplan.preview import plan_item_preview

    return plan_item_preview(project, item)


def _git_only_preview(project: Project, item: PlanItem) -> str | None:
    """The KV prediction of a deployment whose node was not read: modelled from git, with
    no previous profile to compare with."""
    line = preview(project, item)
    return None if line is None else line.removeprefix("new deployment: ")


def git_only(project: Project, single: Sequence[str] | None, errors: Iterable[NodeResult],
             secrets: dict[str, str]) -> list[PlanItem]:
    """The deployments (of those ``single`` selects) on nodes that could not be read, as
    git renders them and planned against an empty node: the engine flags they would run
    with. Pure: nothing is sent anywhere."""
    from servefleet.core.plan import plan
    from servefleet.core.render import render_deployments

    failed = {error.node for error in errors}
    chosen = [d for d in project.deployments(list(single) if single else None)
              if d.node in failed]
    if not chosen:
        return []
    return [plan(rendered, None)
            for rendered in render_deployments(project, chosen, secrets,
                                               require_secrets=False)]


def plan_all(project: Project, nodes: Sequence[str] | None,
             secrets: dict[str, str]) -> FleetPlan:
    """The per-node plan and the plan of every engine spanning nodes that NODES selects,
    with the nodes that could not be read and their deployments from git alone."""
    from servefleet.adapters import rollout
    from servefleet.adapters.multinode import plan_multinode, select_multinode
    from servefleet.core.errors import ConfigError

    single, multi = select_multinode(project, nodes)
    if single == [] and not multi:
        raise ConfigError(f"stack {project.stack.stack!r} places nothing on "
                          f"{', '.join(nodes or []) or 'any node'}")
    observations: dict[str, Observation] = {}
    items, errors = ([], []) if single == [] else rollout.plan_fleet(
        project, single, secrets, observations=observations)
    plans, more = plan_multinode(project, multi, secrets)
    from_git = [] if single == [] else git_only(project, single, errors, secrets)
    view = None
    if project.stack.gateway.enabled:
        from servefleet.cli.gateway import gateway_view

        view = gateway_view(project)
    return FleetPlan(items, plans, [*errors, *more], from_git, view, observations)


def _print_summary(out: Console, action: str, lines: list[str]) -> None:
    """A plan entry's summary lines, the first styled by its action."""
    from rich.text import Text

    style = {"unchanged": "dim", "create": "green", "adopt": "cyan"}.get(action, "yellow")
    out.print(Text(lines[0], style=style))
    for line in lines[1:]:
        out.print(Text(line))


def _print_items(out: Console, project: Project, items: Iterable[PlanItem]) -> None:
    from rich.text import Text

    for item in items:
        _print_summary(out, item.action, item.summary_lines())
        engine = preview(project, item)
        if engine is not None:
            out.print(Text(f"    {engine}", style="cyan"))


def _print_git_only(out: Console, project: Project, item: PlanItem) -> None:
    from rich.text import Text

    out.print(Text(f"{item.node}/{item.deployment}: {GIT_ONLY}: release {item.release_id} "
                   f"(profile {item.profile})", style="yellow"))
    for line in item.flag_diff.lines():
        out.print(Text(f"  {line}"))
    engine = _git_only_preview(project, item)
    if engine is not None:
        out.print(Text(f"    {engine}", style="cyan"))


def _print_multinode_plan(out: Console, plans: Iterable[MultiNodePlan]) -> None:
    for one in plans:
        _print_summary(out, one.action, one.summary_lines())


def print_plan(out: Console, project: Project, fleet: FleetPlan) -> None:
    """The plan per node, then the engines spanning nodes, then each node that could not be
    read followed by its deployments from git alone."""
    from rich.text import Text

    _print_items(out, project, fleet.items)
    _print_multinode_plan(out, fleet.plans)
    if fleet.gateway is not None:
        from servefleet.cli.gateway import gateway_lines

        for line in gateway_lines(fleet.gateway):
            out.print(line, highlight=False)
    for error in fleet.errors:
        out.print(Text(node_line(error.node, error.error or error.status), style="red"))
        for item in fleet.git_only:
            if item.node == error.node:
                _print_git_only(out, project, item)


def git_only_json(project: Project, item: PlanItem) -> dict[str, Any]:
    """A deployment of a node that was not read, in ``plan --json``'s ``plan`` list:
    action ``unknown``, the flags and the prediction from git."""
    return {**item.to_json(), "action": "unknown", "compared_with": "git",
            "reasons": [GIT_ONLY], "engine_state": "unknown", "restart": None,
            "upload": None, "preview": _git_only_preview(project, item)}


@click.command("plan")
@click.argument("nodes", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.pass_obj
def plan_command(obj: CliContext, nodes: tuple[str, ...], as_json: bool) -> None:
    """Show what a deploy would change on NODES (default: every node of the stack):
    per deployment unchanged / update (with the engine-flag diff) / create. Read-only.

    A node that cannot be read is named; its deployments are shown as git renders them
    (flags, KV prediction), marked `unreachable: compared with git only`. Exit status: 0
    every node was read, 1 otherwise.
    """
    from rich.text import Text

    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    secrets, missing = secrets_from_env(project, nodes)
    if not as_json:
        show_findings(console(), project)
        for line in uncomparable(project, nodes, missing):
            console().print(Text(f"note: {line}", style="yellow"))
    fleet = plan_all(project, nodes, secrets)
    if as_json:
        click.echo(json.dumps({"plan": [*({**i.to_json(), "preview": preview(project, i)}
                                          for i in fleet.items),
                                        *(git_only_json(project, i) for i in fleet.git_only)],
                               "multi_node": [p.to_json() for p in fleet.plans],
                               "gateway": fleet.gateway,
                               "errors": [e.to_json() for e in fleet.errors],
                               "missing_secrets": missing,
                               "uncomparable": uncomparable(project, nodes, missing)},
                              indent=2))
    else:
        print_plan(console(), project, fleet)
    if fleet.errors:
        sys.exit(1)

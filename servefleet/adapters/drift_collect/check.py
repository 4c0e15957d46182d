"""The drift check end to end: render what git wants, read the nodes, compare, report.

Baselines. The KV pool and the image ID a deployment booted with are compared against the
node's baselines file, ``<base_dir>/.servefleet-baselines.json``
(:mod:`servefleet.core.baselines`). The health checks write it: the rollout's gate records
a profile's KV pool after its first healthy boot on the node, and the image of every
release that passed the gate. The drift check only reads it, so it never writes to a node:
the KV pool is compared when the baseline was measured with the profile as git has it now,
the image ID when it was recorded for the release that is current.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from servefleet.adapters.drift_collect import (
    CollectOptions,
    DeploymentQuery,
    Target,
    collect_fleet,
)
from servefleet.adapters.runtime import Transport, connect
from servefleet.core.baselines import BASELINE_FILE, BaselineBook, book_from_json
from servefleet.core.drift import (
    DesiredDeployment,
    DesiredNode,
    DriftItem,
    DriftKind,
    DriftReport,
    NodeObservation,
    build_report,
    compare,
    desired_deployment,
)
from servefleet.core.errors import RenderError
from servefleet.core.expectations import derive_expectations
from servefleet.core.models import Deployment
from servefleet.core.observed import ObservedDeployment
from servefleet.core.project import Project
from servefleet.core.render import RenderedRelease, render_release


@dataclass(frozen=True)
class _Planned:
    """One deployment: its rendering (or why it failed) and what to read."""

    deployment: Deployment
    rendered: RenderedRelease | None
    error: str | None
    query: DeploymentQuery


def secrets_from_environment(project: Project, environ: Mapping[str, str] | None = None
                             ) -> dict[str, str]:
    """Secret values for the stack's profiles, from environment variables of the same name
    (``HF_TOKEN``…): the nightly unit reads them from an ``EnvironmentFile``."""
    env = os.environ if environ is None else environ
    names = {n for p in project.profiles.values() for n in p.secret_env}
    return {name: env[name] for name in sorted(names) if name in env}


def _plan(project: Project, deployment: Deployment,
          secrets: Mapping[str, str] | None) -> _Planned:
    profile = project.profiles[deployment.profile]
    query = DeploymentQuery(name=deployment.name, engine=profile.engine,
                            port=project.port_of(deployment))
    try:
        rendered = render_release(project, deployment, secrets, require_secrets=False)
    except RenderError as error:
        return _Planned(deployment, None, str(error), query)
    # The node sends in clear what the release's compose files set, but for the secrets.
    query = DeploymentQuery(name=deployment.name, engine=profile.engine, port=rendered.port,
                            secret_env=tuple(rendered.secret_names))
    return _Planned(deployment, rendered, None, query)


def _desired(project: Project, planned: _Planned, state: ObservedDeployment | None,
             book: BaselineBook, secrets: Mapping[str, str] | None) -> DesiredDeployment | None:
    rendered = planned.rendered
    if rendered is None:
        return None
    profile = project.profiles[rendered.profile]
    node = project.nodes[rendered.node]
    expected = derive_expectations(profile, node)
    # Keyed by profile name: a baseline of another version of the profile (a new image,
    # new flags) is not this one's; the gate records the new pool at its next healthy boot.
    kv = book.baselines.get(rendered.profile)
    if kv is not None and kv.profile_identity != rendered.profile_identity:
        kv = None
    image_id = None
    current = state.current_release if state is not None else None
    manifest = (state.manifest if state is not None else None) or {}
    image = book.images.get(rendered.deployment)
    if isinstance(manifest.get("image_id"), str):
        image_id = manifest["image_id"]  # recorded by the rollout, when it does
    elif image is not None and current is not None and image.release_id == current:
        image_id = image.image_id
    return desired_deployment(
        node=rendered.node, deployment=rendered.deployment, profile=rendered.profile,
        profile_identity=rendered.profile_identity,
        release_id=rendered.release_id if rendered.secrets_rendered else None,
        files=rendered.files, file_hashes=rendered.file_hashes,
        service=state.compose_service if state is not None else None,
        secret_names=rendered.secret_names,
        secrets=secrets, engine=rendered.engine, engine_version=expected.engine_version,
        kv_tolerance=profile.health.kv_tolerance,
        cudagraph_mode=expected.cudagraph_mode,
        kv_baseline=kv, image_id=image_id,
    )


def check_fleet(project: Project, nodes: Sequence[str] | None = None, *,
                secrets: Mapping[str, str] | None = None,
                options: CollectOptions | None = None,
                transport_factory: Callable[..., Transport] = connect,
                clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> DriftReport:
    """Check every deployment of the stack (or of ``nodes``) and report the drift (read
    only: nothing is written to a node).

    Raises :class:`~servefleet.core.errors.ConfigError` for a node not in the stack; every
    node problem (unreachable, a deployment that does not render) is an item of the report.
    """
    options = options or CollectOptions()
    planned: dict[str, list[_Planned]] = {}
    for deployment in project.deployments(list(nodes) if nodes else None):
        planned.setdefault(deployment.node, []).append(_plan(project, deployment, secrets))
    targets: list[Target] = [(project.nodes[name], [p.query for p in plans])
                             for name, plans in planned.items()]
    now = clock().isoformat(timespec="seconds")
    observations = collect_fleet(targets, options, transport_factory=transport_factory)
    items_by_node: dict[str, list[DriftItem]] = {}
    for name, plans in planned.items():
        items_by_node[name] = _node_items(project, name, plans, observations[name], secrets,
                                          options)
    missing = sorted({name for plans in planned.values() for plan in plans
                      if plan.rendered is not None and not plan.rendered.secrets_rendered
                      for name in plan.rendered.secret_names if name not in (secrets or {})})
    notes = [f"secret {', '.join(missing)} not given (set the environment variable of that "
             "name): release ids were not compared, the profile identity of each current "
             "release was, and secret variables were compared with the release's engine.env"
             ] if missing else []
    return build_report(items_by_node, stack=project.stack.stack, checked_at=now, notes=notes)


def _node_items(project: Project, name: str, plans: Sequence[_Planned],
                observation: NodeObservation, secrets: Mapping[str, str] | None,
                options: CollectOptions) -> list[DriftItem]:
    items: list[DriftItem] = []
    book, problem = book_from_json(observation.baselines.get(BASELINE_FILE))
    if problem is not None and observation.unreachable is None:
        items.append(DriftItem(node=name, deployment=None, kind=DriftKind.ERROR,
                               message=f"{name}: {problem}: the KV pools and images were not "
                               "compared with their baselines", subject=BASELINE_FILE))
    wanted: list[DesiredDeployment] = []
    for plan in plans:
        if plan.error is not None:
            items.append(DriftItem(node=name, deployment=plan.deployment.name,
                                   kind=DriftKind.ERROR,
                                   message=f"cannot render: {plan.error}"))
            continue
        desired = _desired(project, plan, observation.deployments.get(plan.deployment.name),
                           book, secrets)
        if desired is not None:
            wanted.append(desired)
    node = project.nodes[name]
    desired_node = DesiredNode(node=name,
                               gpu=node.expected_gpu_facts() if options.probe else None,
                               deployments=tuple(wanted))
    items.extend(compare(desired_node, observation))
    return items

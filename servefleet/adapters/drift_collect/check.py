"""The drift check end to end: render what git wants, read the nodes, compare, report.

Baselines. The KV pool and the image ID a deployment booted with are compared against a
baseline. The first time a check finds a deployment healthy and without drift (container
running, no restarts, the latest boot ``ready`` with a KV pool, the release git renders),
it records them on the node in ``<base_dir>/<deployment>/baseline.json``: the KV pool and
CUDA-graph mode per profile identity, the image ID per release id. Later checks compare
against that record; nothing else ever writes it, and a deliberate change (another profile,
another release) starts a new entry rather than being flagged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from servefleet.adapters.drift_collect import (
    BASELINE_FILE,
    CollectOptions,
    DeploymentQuery,
    Target,
    collect_fleet,
)
from servefleet.adapters.remote import deployment_dir
from servefleet.adapters.ssh import SshTransport
from servefleet.core.drift import (
    DesiredDeployment,
    DesiredNode,
    DriftItem,
    DriftKind,
    DriftReport,
    NodeObservation,
    ObservedDeploymentState,
    build_report,
    compare,
    desired_deployment,
    merged_engine_service,
)
from servefleet.core.errors import RenderError, ServefleetError
from servefleet.core.expectations import derive_expectations
from servefleet.core.models import Deployment
from servefleet.core.project import Project
from servefleet.core.render import RenderedRelease, render_release

BASELINE_SCHEMA = 1
MAX_RELEASE_ENTRIES = 20
"""Image-ID baselines kept per deployment (one per release id; oldest dropped)."""


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
    service = merged_engine_service(rendered.files, rendered.compose_files)
    plain = tuple(sorted(set(service.environment) - set(rendered.secret_names)))
    query = DeploymentQuery(name=deployment.name, engine=profile.engine, port=rendered.port,
                            plain_env=plain)
    return _Planned(deployment, rendered, None, query)


def _baseline_doc(state: ObservedDeploymentState | None) -> dict[str, Any]:
    doc = (state.baselines.get(BASELINE_FILE) if state is not None else None) or {}
    return doc if isinstance(doc, dict) else {}


def _desired(project: Project, planned: _Planned, state: ObservedDeploymentState | None,
             secrets: Mapping[str, str] | None) -> DesiredDeployment | None:
    rendered = planned.rendered
    if rendered is None:
        return None
    profile = project.profiles[rendered.profile]
    node = project.nodes[rendered.node]
    doc = _baseline_doc(state)
    kv_entry = (doc.get("profiles") or {}).get(rendered.profile_identity) or {}
    kv = kv_entry.get("kv_cache_tokens")
    image_id = None
    current = state.current_release if state is not None else None
    manifest = (state.manifest if state is not None else None) or {}
    if isinstance(manifest.get("image_id"), str):
        image_id = manifest["image_id"]  # recorded by the rollout, when it does
    elif current is not None:
        entry = (doc.get("releases") or {}).get(current) or {}
        image_id = entry.get("image_id") if isinstance(entry.get("image_id"), str) else None
    return desired_deployment(
        node=rendered.node, deployment=rendered.deployment, profile=rendered.profile,
        profile_identity=rendered.profile_identity,
        release_id=rendered.release_id if rendered.secrets_rendered else None,
        files=rendered.files, file_hashes=rendered.file_hashes,
        compose_files=rendered.compose_files, secret_names=rendered.secret_names,
        secrets=secrets, engine=rendered.engine, engine_version=rendered.engine_version,
        kv_tolerance=profile.health.kv_tolerance,
        cudagraph_mode=derive_expectations(profile, node).cudagraph_mode,
        kv_baseline_tokens=kv if isinstance(kv, int) else None,
        kv_baseline_source=f"{BASELINE_FILE}, recorded {kv_entry.get('recorded_at', '?')}"
        if isinstance(kv, int) else None,
        image_id=image_id,
    )


def _baseline_update(want: DesiredDeployment, state: ObservedDeploymentState,
                     items: Sequence[DriftItem], now: str) -> dict[str, Any] | None:
    """The new ``baseline.json`` content when this check may record one, else None."""
    container, boot = state.container, state.boot
    if any(i.deployment == want.deployment for i in items):
        return None
    if container is None or not container.running or container.restart_count:
        return None
    if boot is None or boot.outcome != "ready" or state.current_release is None:
        return None
    doc = _baseline_doc(state)
    profiles = dict(doc.get("profiles") or {})
    releases = dict(doc.get("releases") or {})
    changed = False
    if want.kv_baseline_tokens is None and boot.kv_cache_tokens is not None:
        profiles[want.profile_identity] = {
            "profile": want.profile, "kv_cache_tokens": boot.kv_cache_tokens,
            "cudagraph_mode": boot.cudagraph_mode, "release_id": state.current_release,
            "recorded_at": now,
        }
        changed = True
    if want.image.image_id is None and container.image_id and \
            state.current_release not in releases:
        releases[state.current_release] = {"image_id": container.image_id,
                                           "image_ref": container.image_ref,
                                           "recorded_at": now}
        while len(releases) > MAX_RELEASE_ENTRIES:
            oldest = min(releases, key=lambda k: str(releases[k].get("recorded_at", "")))
            del releases[oldest]
        changed = True
    if not changed:
        return None
    return {"schema": BASELINE_SCHEMA, "written_by": "servefleet drift",
            "profiles": profiles, "releases": releases}


_SPLIT_WRITER = (
    "import os,sys\n"
    "docs=sys.stdin.buffer.read().split(b'\\0')\n"
    "for path,doc in zip(sys.argv[1:],docs):\n"
    "    tmp=path+'.tmp.%d'%os.getpid()\n"
    "    with open(tmp,'wb') as f: f.write(doc+b'\\n')\n"
    "    os.replace(tmp,path)\n"
)
"""Writes each NUL-separated document of stdin to the path of the same position in argv,
through a temporary file renamed into place (a reader never sees half a file)."""


def write_baselines(project: Project, node: str, updates: Mapping[str, dict[str, Any]], *,
                    python: str = "python3",
                    transport_factory: Callable[..., SshTransport] = SshTransport,
                    timeout: float = 30) -> list[str]:
    """Write ``baseline.json`` of each deployment in ``updates`` in one command; the
    problems met (one line each), empty when all were written."""
    if not updates:
        return []
    base = project.nodes[node].base_dir
    paths = [f"{deployment_dir(base, name)}/{BASELINE_FILE}" for name in updates]
    payload = b"\0".join(json.dumps(doc, indent=2, sort_keys=True).encode()
                         for doc in updates.values())
    try:
        with transport_factory(project.nodes[node], connect_attempts=1) as ssh:
            result = ssh.run([python, "-c", _SPLIT_WRITER, *paths], stdin=payload,
                             timeout=timeout, check=False, what="record drift baselines")
    except ServefleetError as error:
        return [f"{node}: baselines not recorded: {error}"]
    if not result.ok:
        tail = result.stderr.decode("utf-8", "replace").strip()[-200:]
        return [f"{node}: baselines not recorded (exit {result.exit_status}): {tail}"]
    return []


def check_fleet(project: Project, nodes: Sequence[str] | None = None, *,
                secrets: Mapping[str, str] | None = None,
                options: CollectOptions | None = None,
                record_baselines: bool = True,
                transport_factory: Callable[..., SshTransport] = SshTransport,
                clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> DriftReport:
    """Check every deployment of the stack (or of ``nodes``) and report the drift.

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
        observation = observations[name]
        items, updates = _node_items(project, name, plans, observation, secrets, options, now)
        if record_baselines and updates and observation.unreachable is None:
            for problem in write_baselines(project, name, updates, python=options.python,
                                           transport_factory=transport_factory):
                items.append(DriftItem(node=name, deployment=None, kind=DriftKind.ERROR,
                                       message=problem))
        items_by_node[name] = items
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
                options: CollectOptions, now: str
                ) -> tuple[list[DriftItem], dict[str, dict[str, Any]]]:
    items: list[DriftItem] = []
    wanted: list[DesiredDeployment] = []
    for plan in plans:
        if plan.error is not None:
            items.append(DriftItem(node=name, deployment=plan.deployment.name,
                                   kind=DriftKind.ERROR,
                                   message=f"cannot render: {plan.error}"))
            continue
        desired = _desired(project, plan, observation.deployments.get(plan.deployment.name),
                           secrets)
        if desired is not None:
            wanted.append(desired)
    node = project.nodes[name]
    desired_node = DesiredNode(node=name,
                               gpu=node.expected_gpu_facts() if options.probe else None,
                               deployments=tuple(wanted))
    items.extend(compare(desired_node, observation))
    updates: dict[str, dict[str, Any]] = {}
    if observation.unreachable is None:
        for want in wanted:
            state = observation.deployments.get(want.deployment)
            if state is None:
                continue
            doc = _baseline_update(want, state, items, now)
            if doc is not None:
                updates[want.deployment] = doc
    return items, updates

"""Drift of engines spanning nodes: one report entry per engine (``name@head+worker``),
each item naming its rank.

Every rank is read and compared like a one-node deployment (release, files, container
command, environment, labels, image, patch set, boot log) against its own rendering under
the engine's one release id (:func:`~servefleet.core.render.ranks.render_multinode`), so
a worker left on another release than the head shows as that rank's release drift. Only
the head serves ``/version``; a worker's engine version is not asked. A node's GPU probe
runs here only when no per-node deployment of the stack already reads that node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from servefleet.adapters.drift_collect import CollectOptions, DeploymentQuery, collect_fleet
from servefleet.adapters.drift_collect.check import _node_items, _Planned
from servefleet.adapters.multinode_result import rank_role
from servefleet.adapters.runtime import Transport, connect
from servefleet.core.drift import DriftItem, DriftKind
from servefleet.core.errors import RenderError
from servefleet.core.models import MultiNodeDeployment
from servefleet.core.project import Project
from servefleet.core.render.ranks import render_multinode


def check_multinode(project: Project, deployments: Sequence[MultiNodeDeployment], *,
                    secrets: Mapping[str, str] | None = None,
                    options: CollectOptions | None = None,
                    transport_factory: Callable[..., Transport] = connect,
                    ) -> dict[str, list[DriftItem]]:
    """Report entry (``name@head+worker``) → its items, each message led by the rank
    (``rank 1 worker: …``). Read only."""
    options = options or CollectOptions()
    entries: dict[str, list[DriftItem]] = {}
    for dep in deployments:
        try:
            release = render_multinode(project, dep, secrets, require_secrets=False)
        except RenderError as error:
            entries[dep.key] = [DriftItem(node=dep.head, deployment=dep.name,
                                          kind=DriftKind.ERROR,
                                          message=f"cannot render: {error}")]
            continue
        items: list[DriftItem] = []
        for index, (rendered, placed) in enumerate(zip(release.ranks, release.rank_deployments,
                                                       strict=True)):
            query = DeploymentQuery(name=dep.name, engine=rendered.engine,
                                    port=rendered.port if index == 0 else None,
                                    secret_env=tuple(rendered.secret_names))
            planned = _Planned(placed, rendered, None, query)
            node = project.nodes[rendered.node]
            own = dataclasses.replace(
                options, probe=options.probe and rendered.node not in project.stack.nodes)
            observed = collect_fleet([(node, [query])], own,
                                     transport_factory=transport_factory)[rendered.node]
            prefix = f"rank {index} {rank_role(index)}: "
            items += [item.model_copy(update={"message": prefix + item.message})
                      for item in _node_items(project, rendered.node, [planned], observed,
                                              secrets, own)]
        entries[dep.key] = items
    return entries

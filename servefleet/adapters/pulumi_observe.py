"""What a Pulumi resource reads of its node (``read``, and after every update): per
deployment the release, image, file hashes, boot facts and one health verdict."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servefleet.adapters.pulumi_common import _int
from servefleet.core.errors import ConfigError, UnreachableNode
from servefleet.core.models import Node
from servefleet.core.project import load_nodes
from servefleet.core.render.release import LABEL_PREFIX

if TYPE_CHECKING:
    from servefleet.core.observed import ObservedDeployment

HEALTHY = "healthy"
"""The health verdict of an engine that serves its current release."""
OBSERVE_TIMEOUT_SECONDS = 60.0


def _load_node(project_dir: str, name: str) -> Node:
    nodes, _, problems = load_nodes(Path(project_dir).resolve())
    if name not in nodes:
        detail = f" ({'; '.join(problems)})" if problems else ""
        raise ConfigError(
            f"node {name!r} is not in the inventory of {project_dir}{detail}; if the node is "
            "gone for good, drop it from the Pulumi state with `pulumi state delete <urn>`")
    return nodes[name]


def _health(state: ObservedDeployment) -> str:
    """One verdict per deployment: ``healthy`` or what is wrong (the shared serving verdict
    over the full read, boot log and API included). An ungated engine is not healthy:
    ``pulumi up`` after a refresh puts it through the gate again."""
    from servefleet.core.observed.serving import FULL, serving

    return serving(state, FULL).words()


def _observed_deployment(node: Node, port: int, state: ObservedDeployment | None,
                         ) -> dict[str, Any]:
    """The stable facts of one deployment (no timestamps or counters, so that observing an
    unchanged node twice gives the same outputs)."""
    endpoint = f"http://{node.address}:{port}"
    if state is None:
        return {"endpoint": endpoint, "currentRelease": None, "runningRelease": None,
                "health": "absent: no engine container", "fileHashes": {}}
    container = state.engine_container
    running = container is not None and container.running
    manifest = state.manifest or {}
    return {
        "endpoint": endpoint,
        "currentRelease": state.current_release,
        "runningRelease": (container.labels.get(f"{LABEL_PREFIX}release") or None)
        if running and container is not None else None,
        "profile": manifest.get("profile") if isinstance(manifest.get("profile"), str) else None,
        "engineState": container.status if container is not None else "no container",
        "image": container.image_ref if container is not None else None,
        "imageId": container.image_id if container is not None else None,
        "imageRepoDigest": (container.repo_digests[0] if container.repo_digests else None)
        if container is not None else None,
        "fileHashes": dict(sorted((state.file_hashes or {}).items())),
        "bootOutcome": state.boot.outcome if state.boot else None,
        "kvCacheTokens": state.boot.kv_cache_tokens if state.boot else None,
        "cudagraphMode": state.boot.cudagraph_mode if state.boot else None,
        "engineVersion": state.engine_version,
        "health": _health(state),
    }


def observe(node: Node, deployments: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Read the node (one SSH connection, one command) and return the output properties."""
    from servefleet.adapters.drift_collect import CollectOptions, DeploymentQuery, collect_node

    queries = [DeploymentQuery(name=name, engine=str(dep.get("engine") or "vllm"),
                               port=_int(dep.get("port")))
               for name, dep in deployments.items()]
    options = CollectOptions(timeout=OBSERVE_TIMEOUT_SECONDS, probe=False,
                             baseline_files=())
    seen = collect_node(node, queries, options)
    if seen.unreachable:
        raise UnreachableNode(seen.unreachable)
    observed = {}
    for name, dep in deployments.items():
        port = _int(dep.get("port")) or node.ports[0]
        observed[name] = _observed_deployment(node, port, seen.deployments.get(name))
    return {
        "observed": observed,
        "endpoints": {n: o["endpoint"] for n, o in observed.items()},
        "releaseIds": {n: o["currentRelease"] for n, o in observed.items()},
        "kvCacheTokens": {n: o.get("kvCacheTokens") for n, o in observed.items()},
        "cudagraphModes": {n: o.get("cudagraphMode") for n, o in observed.items()},
        "health": {n: o["health"] for n, o in observed.items()},
    }

"""Read ``servefleet:multiNode`` from a stack file: engines spanning several nodes."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from servefleet.core.models import MultiNodeDeployment, Node, Profile
from servefleet.core.pydantic_errors import describe

KEY = "servefleet:multiNode"
"""The stack-file key: deployment name → ``{profile, nodes, port, …}``."""

# Stack-file spelling (Pulumi's camelCase) → model field.
_FIELDS = {"profile": "profile", "nodes": "nodes", "port": "port",
           "masterPort": "master_port", "pipelineParallel": "pipeline_parallel_size",
           "backend": "backend", "ncclDebug": "nccl_debug"}
_SHOWN = {model: stack for stack, model in _FIELDS.items()}


def multinode_from_config(config: dict[str, Any],
                          source: str) -> tuple[list[MultiNodeDeployment], list[str]]:
    """The multi-node deployments of a stack's ``config:`` mapping, and one line per
    problem (file, key path, reason)."""
    mapping = config.get(KEY)
    if mapping is None:
        return [], []
    if not isinstance(mapping, dict):
        return [], [f"{source}: {KEY}: expected a mapping of deployment name → "
                    "{profile, nodes: [head, worker…]}"]
    found: list[MultiNodeDeployment] = []
    problems: list[str] = []
    for name, spec in mapping.items():
        path = f"{KEY}.{name}"
        if not isinstance(spec, dict):
            problems.append(f"{source}: {path}: expected {{profile, nodes: [head, worker…]}}")
            continue
        unknown = sorted(str(k) for k in spec if k not in _FIELDS)
        if unknown:
            problems.append(f"{source}: {path}: unknown setting {', '.join(unknown)} "
                            f"(known: {', '.join(_FIELDS)})")
            continue
        values = {_FIELDS[k]: v for k, v in spec.items()}

        def where(loc: tuple[Any, ...], path: str = path) -> str:
            head = str(loc[0]) if loc else ""
            return ".".join([path, _SHOWN.get(head, head), *(str(p) for p in loc[1:])])

        try:
            found.append(MultiNodeDeployment.model_validate({**values, "name": name}))
        except ValidationError as error:
            problems.extend(describe(error, source, where=where))
    return found, problems


def check_multinode_references(nodes: dict[str, Node], profiles: dict[str, Profile],
                               deployments: list[MultiNodeDeployment],
                               source: str) -> list[str]:
    """Every node and profile a multi-node deployment names exists."""
    problems = []
    for dep in deployments:
        where = f"{source}: {KEY}.{dep.name}"
        missing = [n for n in dep.nodes if n not in nodes]
        if missing:
            hint = " (run `servefleet sim up` to create the simulated nodes)" if any(
                n.startswith("sim-") for n in missing) else ""
            problems.append(f"{where}.nodes: no node {', '.join(missing)} in nodes/{hint}")
        if dep.profile not in profiles:
            problems.append(f"{where}.profile: no profile {dep.profile!r} in profiles/ "
                            f"(known: {', '.join(sorted(profiles))})")
    return problems

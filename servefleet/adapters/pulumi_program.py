"""The Pulumi program's body: load the project and the stack, declare one ``NodeDeployment``
per node and one ``MultiNodeDeployment`` per engine spanning nodes
(:mod:`servefleet.adapters.pulumi_multinode`), export what booted.

``__main__.py`` at the project root calls :func:`run`. Everything about a node's deployments
is rendered here, at program time, so ``pulumi preview`` shows which release, profile and
engine flags change without connecting to any node. Profiles, ports and the strategy come
from ``Pulumi.<stack>.yaml`` (the same file the ``servefleet`` CLI reads; the one-line
``pulumi config set servefleet:profiles.<node> <profile>`` form wins over the mapping).
Secret values come from Pulumi's config (decrypted by Pulumi), are used to render the
release id (which carries only their sha256), and reach the resource only as a Pulumi
secret input.

In a preview (``pulumi preview``, and the preview ``pulumi up`` shows before asking) the
program also says, per changed vLLM deployment, what the change does in engine terms: the
line ``servefleet plan`` prints (predicted KV pool and its change, CUDA-graph mode,
concurrency; calibrated on the node's KV baselines when it has some). It needs what runs
on the node now, so it reads each node once, read-only, with the node read ``plan``
uses. A dynamic provider's ``diff`` cannot show it: Python dynamic providers return no
detailed diff (pulumi/pulumi#3080) and their logs do not reach the CLI (#18249), whereas a
program's ``pulumi.log.info(message, resource)`` is shown under the resource. Stack config
``servefleet:enginePreview: false`` turns the node read off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pulumi

from servefleet.adapters.pulumi_gateway import GatewayResource, gateway_args
from servefleet.adapters.pulumi_multinode import MultiNodeDeploymentResource, multinode_args
from servefleet.adapters.pulumi_provider import (
    PROVIDER_VERSION,
    DeploymentInputs,
    NodeDeployment,
    NodeDeploymentArgs,
)
from servefleet.adapters.rollout import NodeResult, check_rules, plan_fleet
from servefleet.core.errors import ConfigError, ServefleetError
from servefleet.core.gateway.routes import GATEWAY_DEPLOYMENT
from servefleet.core.kvplan.preview import plan_item_preview
from servefleet.core.models import MultiNodeDeployment
from servefleet.core.plan import PlanItem, flags_from_argv
from servefleet.core.project import SECRET_KEYS, Project, load_project
from servefleet.core.render import RenderedRelease, render_deployments
from servefleet.core.render.ranks import render_multinode
from servefleet.core.rules import Severity
from servefleet.core.secrets import optional_blanks

CONFIG_NAMESPACE = "servefleet"


def secret_config_key(env_name: str) -> str:
    """The stack config key (after ``servefleet:``) that holds secret ``env_name``:
    ``hfToken`` for ``HF_TOKEN``, ``apiKey`` for ``VLLM_API_KEY``, else
    ``secretEnv.<NAME>``."""
    for key, env in SECRET_KEYS.items():
        if env == env_name:
            return key
    return f"secretEnv.{env_name}"


def node_secret_names(project: Project, node: str) -> list[str]:
    """The secret variables the profiles placed on ``node`` need, sorted."""
    names = {name for dep in project.stack.for_node(node)
             for name in project.profiles[dep.profile].secret_env}
    return sorted(names)


def multinode_secret_names(project: Project, dep: MultiNodeDeployment) -> list[str]:
    """The secret variables the profile of an engine spanning nodes needs, sorted."""
    profile = project.profiles.get(dep.profile)
    return sorted(profile.secret_env) if profile is not None else []


def stack_secrets(project: Project, config: pulumi.Config) -> dict[str, str]:
    """Every secret value the stack's profiles need that the stack config holds (a missing
    one is reported by rendering, with the ``pulumi config set --secret`` line to fix it)."""
    values: dict[str, str] = {}
    wanted = [name for node in project.stack.nodes for name in node_secret_names(project, node)]
    wanted += [name for dep in project.stack.multi_node
               for name in multinode_secret_names(project, dep)]
    for name in wanted:
        value = config.get(secret_config_key(name))
        if value is not None:
            values[name] = value
    # A public model's hfToken is optional: blank when not set.
    used = {dep.profile for node in project.stack.nodes for dep in project.stack.for_node(node)}
    used |= {dep.profile for dep in project.stack.multi_node}
    return optional_blanks((project.profiles[p] for p in sorted(used) if p in project.profiles),
                           values)


def deployment_inputs(rendered: RenderedRelease, adopt: str | None = None) -> DeploymentInputs:
    """The resource inputs of one rendered deployment (nothing secret in them)."""
    return DeploymentInputs(
        adopt=adopt,
        profile=rendered.profile,
        port=rendered.port,
        release_id=rendered.release_id,
        engine=rendered.engine,
        image=rendered.image,
        # The same parser the provider and the planner use on a deployed command line.
        engine_flags=flags_from_argv(rendered.engine_argv),
        file_hashes=dict(sorted(rendered.file_hashes.items())),
    )


def node_args(project: Project, node: str, secrets: Mapping[str, str]) -> NodeDeploymentArgs:
    """Render ``node``'s deployments and build its resource inputs."""
    placed = project.stack.for_node(node)
    releases = render_deployments(project, placed, secrets)
    adopted = {d.name: d.adopt for d in placed if d.adopt}
    needed = {name: secrets[name] for name in node_secret_names(project, node)
              if name in secrets}
    return NodeDeploymentArgs(
        node=node,
        address=project.nodes[node].address,
        project_dir=str(project.root),
        stack=project.stack.stack,
        strategy=project.stack.strategy,
        deployments={r.deployment: deployment_inputs(r, adopted.get(r.deployment))
                     for r in releases},
        secrets=pulumi.Output.secret(needed) if needed else None,
        provider_version=PROVIDER_VERSION,
    )


def force_unlock_ids(config: pulumi.Config) -> dict[str, str]:
    """``servefleet:forceUnlock``: node → the id of the stale lock to remove before its
    rollout (``pulumi config set --path 'servefleet:forceUnlock.NODE' LOCK_ID``, the id the
    lock error printed). A live lock has another id and stays."""
    value = config.get_object("forceUnlock") or {}
    if not isinstance(value, dict):
        raise ConfigError(f"Pulumi.<stack>.yaml: servefleet:forceUnlock: expected a mapping "
                          f"node -> lock id, got {type(value).__name__}; fix: pulumi config "
                          "set --path 'servefleet:forceUnlock.NODE' LOCK_ID")
    return {str(k): str(v) for k, v in value.items()}


Planner = Callable[[Project, Sequence[str] | None, Mapping[str, str]],
                   tuple[list[PlanItem], list[NodeResult]]]
"""How the preview learns what runs on the nodes (``rollout.plan_fleet``'s signature)."""


def engine_preview_messages(project: Project, items: Sequence[PlanItem],
                            errors: Sequence[NodeResult]) -> list[tuple[str, str]]:
    """``(node, message)`` per changed vLLM deployment: ``<deployment>: <the plan's engine
    line>``, and one per node that could not be read."""
    messages: list[tuple[str, str]] = []
    for item in items:
        line = plan_item_preview(project, item)
        if line is not None:
            messages.append((item.node, f"{item.deployment}: {line}"))
    for error in errors:
        messages.append((error.node, f"engine preview: node not read ({error.error})"))
    return messages


def preview_in_engine_terms(project: Project, resources: Mapping[str, NodeDeployment],
                            secrets: Mapping[str, str], planner: Planner = plan_fleet,
                            ) -> list[tuple[str, str]]:
    """Read the nodes (read-only), then log each engine-terms line under its node's
    resource, where ``pulumi preview`` shows it. Returns what was logged."""
    items, errors = planner(project, list(resources), secrets)
    messages = engine_preview_messages(project, items, errors)
    for node, message in messages:
        log = pulumi.log.warn if message.startswith("engine preview:") else pulumi.log.info
        log(message, resource=resources.get(node))
    return messages


def declare_fleet(root: Path, stack: str, config: pulumi.Config,
                  planner: Planner | None = None) -> dict[str, NodeDeployment]:
    """One :class:`NodeDeployment` per node of the stack (see :func:`declare_stack`, which
    also declares the engines spanning nodes)."""
    return declare_stack(root, stack, config, planner)[0]


def declare_multinode(project: Project, nodes: Mapping[str, NodeDeployment],
                      secrets: Mapping[str, str], unlock: Mapping[str, str],
                      ) -> dict[str, MultiNodeDeploymentResource]:
    """One :class:`MultiNodeDeploymentResource` per ``servefleet:multiNode`` entry, named
    after the deployment. Each depends on the ``NodeDeployment`` of every node it spans and
    on every earlier engine sharing a node, so no two rollouts want one node lock at once
    (:mod:`servefleet.adapters.pulumi_multinode` says why); with ``rolling`` also on the
    resource declared before it."""
    declared: dict[str, MultiNodeDeploymentResource] = {}
    spans: dict[str, set[str]] = {}
    previous: pulumi.Resource | None = list(nodes.values())[-1] if nodes else None
    for dep in project.stack.multi_node:
        after: list[pulumi.Resource] = [nodes[n] for n in dep.nodes if n in nodes]
        after += [declared[name] for name, used in spans.items() if used & set(dep.nodes)]
        if project.stack.strategy == "rolling" and previous is not None \
                and previous not in after:
            after.append(previous)
        release = render_multinode(project, dep, secrets)
        needed = {name: secrets[name] for name in multinode_secret_names(project, dep)
                  if name in secrets}
        args = multinode_args(project, release,
                              secrets=pulumi.Output.secret(needed) if needed else None,
                              unlock_id=next((unlock[n] for n in dep.nodes if n in unlock),
                                             None))
        previous = declared[dep.name] = MultiNodeDeploymentResource(
            dep.name, args, pulumi.ResourceOptions(depends_on=after) if after else None)
        spans[dep.name] = set(dep.nodes)
    return declared


def declare_stack(root: Path, stack: str, config: pulumi.Config,
                  planner: Planner | None = None,
                  ) -> tuple[dict[str, NodeDeployment], dict[str, MultiNodeDeploymentResource]]:
    """One :class:`NodeDeployment` per node of the stack, named after the node, then one
    :class:`MultiNodeDeploymentResource` per engine spanning nodes (:func:`declare_multinode`).
    With the ``rolling`` strategy each node depends on the one before it, so Pulumi rolls
    them one at a time and stops at the first failure; ``parallel`` lets Pulumi run them
    together."""
    project = load_project(root, stack)
    # The rules `servefleet validate` runs: an error stops preview and up before any node
    # is touched; warnings show in Pulumi's diagnostics.
    for finding in check_rules(project):
        if finding.severity is Severity.WARNING:
            pulumi.log.warn(str(finding))
    secrets = stack_secrets(project, config)
    unlock = force_unlock_ids(config)
    resources: dict[str, NodeDeployment] = {}
    previous: NodeDeployment | None = None
    # The gateway first: every engine's rollout drains and re-admits it there.
    gateway = (GatewayResource(GATEWAY_DEPLOYMENT, gateway_args(project))
               if project.stack.gateway.enabled else None)
    if gateway is not None:
        pulumi.export("gateway", {"endpoint": gateway.endpoint})
    allow_outage = bool(config.get_bool("allowOutage"))
    for node in project.stack.nodes:
        after: list[pulumi.Resource] = [gateway] if gateway is not None else []
        if project.stack.strategy == "rolling" and previous is not None:
            after.append(previous)
        opts = pulumi.ResourceOptions(depends_on=after) if after else None
        args = dataclasses.replace(node_args(project, node, secrets),
                                   unlock_id=unlock.get(node), allow_outage=allow_outage)
        previous = resources[node] = NodeDeployment(node, args, opts)
    # A stack of engines spanning nodes only has no node resource to log under (and the
    # per-node planner refuses an empty placement).
    if resources and pulumi.runtime.is_dry_run() \
            and config.get_bool("enginePreview") is not False:
        preview_in_engine_terms(project, resources, secrets, planner or plan_fleet)
    return resources, declare_multinode(project, resources, secrets, unlock)


def export_outputs(resources: Mapping[str, NodeDeployment]) -> None:
    """Stack output ``nodes``: per node and deployment its endpoint, release, KV pool,
    CUDA-graph mode and health."""

    def per_deployment(values: list[Any]) -> dict[str, Any]:
        endpoints, releases, kv, graphs, health = (v or {} for v in values)
        return {name: {"endpoint": endpoints.get(name), "releaseId": releases.get(name),
                       "kvCacheTokens": _whole(kv.get(name)),
                       "cudagraphMode": graphs.get(name), "health": health.get(name)}
                for name in endpoints}

    pulumi.export("nodes", {
        node: pulumi.Output.all(res.endpoints, res.releaseIds, res.kvCacheTokens,
                                res.cudagraphModes, res.health).apply(per_deployment)
        for node, res in resources.items()
    })


def export_multinode(engines: Mapping[str, MultiNodeDeploymentResource]) -> None:
    """Stack output ``multiNode`` (only when the stack has such engines): per engine its
    endpoint, the release per rank, each rank's health and the head's gate summary."""
    if not engines:
        return

    def summary(values: list[Any]) -> dict[str, Any]:
        endpoint, releases, health, kv, graphs, concurrency = values
        return {"endpoint": endpoint, "releaseIds": releases or {}, "health": health or {},
                "kvCacheTokens": _whole(kv), "cudagraphMode": graphs,
                "maxConcurrency": concurrency}

    pulumi.export("multiNode", {
        name: pulumi.Output.all(res.endpoint, res.releaseIds, res.health, res.kvCacheTokens,
                                res.cudagraphMode, res.maxConcurrency).apply(summary)
        for name, res in engines.items()
    })


def _whole(value: Any) -> Any:
    """Pulumi carries numbers as floats; a token count is a whole number."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def run(root: Path) -> dict[str, NodeDeployment]:
    """The whole program (``__main__.py``): a configuration problem is reported as one
    clear error rather than a Python traceback."""
    try:
        resources, engines = declare_stack(root, pulumi.get_stack(),
                                           pulumi.Config(CONFIG_NAMESPACE))
    except ServefleetError as error:
        raise pulumi.RunError(str(error)) from None
    export_outputs(resources)
    export_multinode(engines)
    return resources

"""Every rule, and :func:`validate`, which runs them over a loaded project."""

from __future__ import annotations

from types import ModuleType

from servefleet.core.errors import RenderError
from servefleet.core.project import CONFIG_NS, Project
from servefleet.core.render.inputs import RenderFieldError
from servefleet.core.render.release import render_release
from servefleet.core.rules import (
    capabilities,
    flags,
    hardware,
    kvcache,
    llamacpp,
    memory,
    model_files,
    node,
    planner,
    quantization,
    serving,
    speculative,
    unified_headroom,
    weights,
)
from servefleet.core.rules.base import (
    Finding,
    NodeContext,
    Placement,
    PlacementContext,
    ProfileContext,
    Rule,
    Scope,
    Severity,
)
from servefleet.core.rules.multinode import multinode_findings

RENDER_RULE = "render-refused"
"""Rule id of findings that come from rendering the stack's deployments in memory."""

RULE_MODULES: tuple[ModuleType, ...] = (
    capabilities, kvcache, quantization, serving, speculative, flags, llamacpp, hardware, memory,
    model_files, node,
    unified_headroom, weights, planner,
)
"""Modules whose :class:`Rule` objects make up the rule set, in report order."""


def _collect(modules: tuple[ModuleType, ...]) -> tuple[Rule, ...]:
    rules = [value for module in modules for value in vars(module).values()
             if isinstance(value, Rule)]
    ids = [r.id for r in rules]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise RuntimeError(f"rule ids defined twice: {', '.join(duplicates)}")
    return tuple(rules)


ALL_RULES: tuple[Rule, ...] = _collect(RULE_MODULES)
"""The rule set (immutable)."""


def rule_by_id(rule_id: str) -> Rule:
    """The rule called ``rule_id``; ``KeyError`` if there is none."""
    for rule in ALL_RULES:
        if rule.id == rule_id:
            return rule
    raise KeyError(rule_id)


def placements(project: Project) -> list[Placement]:
    """The stack's deployments with their resolved profiles and ports."""
    return [
        Placement(deployment=dep, profile=project.profiles[dep.profile],
                  profile_file=_file_of(project, dep.profile), port=project.port_of(dep))
        for dep in project.stack.deployments
    ]


def _file_of(project: Project, profile: str) -> str:
    """The file a profile was read from; a profile made in memory (a program or a test adds
    it to the project) is named as the file it would have."""
    return project.profile_files.get(profile, f"profiles/{profile}.yaml")


def validate(project: Project, rules: tuple[Rule, ...] = ALL_RULES, *,
             render: bool = True) -> list[Finding]:
    """Run ``rules`` over ``project``: every profile once, every deployment against its
    node (with its neighbours), and every node the stack uses; with ``render``, also
    :func:`render_findings` (rule tests on synthetic projects without files turn it off).
    Errors come first."""
    findings: list[Finding] = []
    by_scope = {scope: [r for r in rules if r.scope is scope] for scope in Scope}
    for name in sorted(project.profiles):
        own = project.raw_profiles.get(name)
        parent = own.get("extends") if own is not None else None
        context = ProfileContext(profile=project.profiles[name],
                                 file=_file_of(project, name), root=project.root, own=own,
                                 parent=project.profiles.get(parent)
                                 if isinstance(parent, str) else None)
        for rule in by_scope[Scope.PROFILE]:
            if rule.applies_to(context.profile.engine):
                findings.extend(rule.run(context))
    placed = placements(project)
    for placement in placed:
        node_name = placement.deployment.node
        neighbours = tuple(p for p in placed
                           if p.deployment.node == node_name and p is not placement)
        placement_context = PlacementContext(
            placement=placement, node=project.nodes[node_name],
            node_file=project.node_files[node_name], stack_file=project.stack_file,
            neighbours=neighbours, root=project.root)
        for rule in by_scope[Scope.PLACEMENT]:
            if rule.applies_to(placement.profile.engine):
                findings.extend(rule.run(placement_context))
    for node_name in project.stack.nodes:
        node_context = NodeContext(
            node=project.nodes[node_name], node_file=project.node_files[node_name],
            stack_file=project.stack_file,
            placements=tuple(p for p in placed if p.deployment.node == node_name))
        for rule in by_scope[Scope.NODE]:
            findings.extend(rule.run(node_context))
    if render:
        findings.extend(render_findings(project))
    # Engines spanning nodes are checked as a whole (one line can name every rank).
    findings.extend(multinode_findings(project, render=render))
    # Stable order: by severity, then file; rules keep their order within a file.
    return sorted(findings, key=lambda f: (f.severity.rank, f.file))


def render_findings(project: Project) -> list[Finding]:
    """Render every deployment of the stack in memory (secrets as placeholders) and turn each
    refusal into an error finding, so ``validate`` refuses everything ``render`` would:
    patch digests, symlinked or missing patches, override files and override templates.
    Nothing is written."""
    findings: list[Finding] = []
    seen: set[str] = set()
    for deployment in project.stack.deployments:
        try:
            render_release(project, deployment, None, require_secrets=False)
        except RenderFieldError as error:
            finding = Finding(
                rule=RENDER_RULE, severity=Severity.ERROR, file=error.file, field=error.field,
                message=error.reason,
                why=f"servefleet render refuses it (deployment {deployment.key})",
                fix=error.fix)
        except RenderError as error:
            finding = Finding(
                rule=RENDER_RULE, severity=Severity.ERROR, file=project.stack_file,
                field=f"{CONFIG_NS}profiles.{deployment.node}",
                message=" ".join(str(error).split()),
                why="servefleet render refuses this deployment",
                fix="fix the file named in the message, then run servefleet validate again")
        else:
            continue
        # One patch or override shared by several deployments is reported once.
        key = f"{finding.file}\0{finding.field}\0{finding.message}"
        if key not in seen:
            seen.add(key)
            findings.append(finding)
    return findings

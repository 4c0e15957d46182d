"""Load a servefleet project: node inventory, serving profiles and a stack.

Every problem found is collected and reported together (one line each), so an operator
fixes a broken change in one go. Nothing here writes anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servefleet.core.errors import ConfigError
from servefleet.core.models import Deployment, MultiNodeDeployment, Node, Profile, StackConfig
from servefleet.core.models.common import NAME_RE
from servefleet.core.multinode_config import check_multinode_references
from servefleet.core.pydantic_errors import describe
from servefleet.core.stack_file import CONFIG_NS as CONFIG_NS  # the stack file's names,
from servefleet.core.stack_file import SECRET_KEYS as SECRET_KEYS  # re-exported
from servefleet.core.stack_file import STACK_FILE as STACK_FILE
from servefleet.core.stack_file import load_stack as load_stack
from servefleet.core.stack_file import missing_stack_message as missing_stack_message
from servefleet.core.suggest import did_you_mean, unknown_name
from servefleet.core.yamlfile import read_yaml

NODES_DIR = "nodes"
PROFILES_DIR = "profiles"
@dataclass(frozen=True)
class Project:
    """Everything loaded from a project folder for one stack."""

    root: Path
    """The project folder."""
    nodes: dict[str, Node]
    """Every node in the inventory, by name."""
    node_files: dict[str, str]
    """Inventory file of each node, relative to the root."""
    profiles: dict[str, Profile]
    """Every profile, resolved (``extends`` merged), by name."""
    profile_files: dict[str, str]
    """Profile file of each profile, relative to the root."""
    stack: StackConfig
    """The chosen stack."""
    stack_file: str
    """Stack file relative to the root."""
    raw_profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each profile's own keys as written (before ``extends``)."""

    def deployments(self, nodes: list[str] | None = None) -> list[Deployment]:
        """The stack's deployments, optionally only those on ``nodes``."""
        chosen = self.stack.deployments
        if nodes:
            unknown = [n for n in nodes if n not in self.stack.nodes]
            if unknown:
                raise ConfigError(
                    f"{', '.join(unknown)}: not in stack {self.stack.stack!r} "
                    f"(its nodes: {', '.join(self.stack.nodes) or 'none'})"
                )
            chosen = [d for d in chosen if d.node in nodes]
        return list(chosen)

    def placing(self, node: str, deployments: Sequence[Deployment]) -> Project:
        """This project with the stack placing exactly ``deployments`` on ``node`` (and
        nothing else anywhere): what one call deploys, whoever asks (a Pulumi resource
        says what its node runs; the stack file may say more or less)."""
        placed = [d.model_copy(update={"node": node}) for d in deployments]
        return dataclasses.replace(self, stack=self.stack.model_copy(
            update={"deployments": placed}))

    def placing_multinode(self, deployment: MultiNodeDeployment) -> Project:
        """This project with the stack's engines spanning nodes reduced to ``deployment``
        (what one multi-node resource deploys)."""
        return dataclasses.replace(self, stack=self.stack.model_copy(
            update={"multi_node": [deployment]}))

    def port_of(self, deployment: Deployment) -> int:
        """The port a deployment listens on (explicit, or the node's first port)."""
        return deployment.port or self.nodes[deployment.node].ports[0]


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _read_mapping(path: Path, rel: str, what: str, problems: list[str]) -> dict[str, Any] | None:
    """The YAML mapping of one inventory or profile file; None, with the reasons added to
    ``problems``, when it does not read or is not a mapping of ``what`` settings."""
    try:
        data = read_yaml(path, rel)
    except ConfigError as error:
        problems.extend(error.problems)
        return None
    if not isinstance(data, dict):
        problems.append(f"{rel}: expected a mapping of {what} settings at the top level")
        return None
    return data


def load_nodes(root: Path) -> tuple[dict[str, Node], dict[str, str], list[str]]:
    """Load ``nodes/*.yaml`` and ``nodes/*/*.yaml`` (e.g. the generated ``nodes/sim/``)."""
    nodes: dict[str, Node] = {}
    files: dict[str, str] = {}
    problems: list[str] = []
    folder = root / NODES_DIR
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*/*.yaml")]):
        rel = _relative(path, root)
        data = _read_mapping(path, rel, "node", problems)
        if data is None:
            continue
        data.setdefault("name", path.stem)
        try:
            node = Node.model_validate(data)
        except ValidationError as error:
            problems.extend(describe(error, rel, model=Node, schema="node"))
            continue
        if node.name != path.stem:
            problems.append(f"{rel}: name: {node.name!r} differs from the file name "
                            f"{path.stem!r}; rename one of them")
            continue
        if node.name in nodes:
            problems.append(f"{rel}: node {node.name!r} is also defined in {files[node.name]}")
            continue
        nodes[node.name] = node
        files[node.name] = rel
    return nodes, files, problems


def unloaded_nodes(root: Path, nodes: Collection[str],
                   problems: Sequence[str]) -> dict[str, list[str]]:
    """Node files under ``nodes/`` that exist but did not load (:func:`load_nodes`'s
    problems): node name → the problems of its file, so that a stack naming it is told why
    rather than that the node does not exist."""
    unloaded: dict[str, list[str]] = {}
    folder = root / NODES_DIR
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*/*.yaml")]):
        if path.stem in nodes or path.stem in unloaded:
            continue
        rel = _relative(path, root)
        mine = [p for p in problems if p.startswith(f"{rel}: ")]
        if mine:
            unloaded[path.stem] = mine
    return unloaded


def _unloaded_reason(name: str, file_problems: Sequence[str]) -> str:
    rel, _, first = file_problems[0].partition(": ")
    reason = first.split("; ")[0]
    reason = reason if len(reason) <= 120 else reason[:119] + "…"
    more = f", and {len(file_problems) - 1} more" if len(file_problems) > 1 else ""
    return (f"node {name!r} failed to load from {rel} ({reason}{more}): fix {rel} as its "
            "own error says")


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; lists and scalars in ``override`` replace the base's.

    ``null`` in the override removes an inherited setting (e.g. ``speculative: null``).
    """
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_profiles(
    root: Path,
) -> tuple[dict[str, Profile], dict[str, str], dict[str, dict[str, Any]], list[str]]:
    """Load ``profiles/*.yaml`` and resolve ``extends`` chains."""
    raw: dict[str, dict[str, Any]] = {}
    files: dict[str, str] = {}
    problems: list[str] = []
    for path in sorted((root / PROFILES_DIR).glob("*.yaml")):
        rel = _relative(path, root)
        if not NAME_RE.match(path.stem):
            problems.append(f"{rel}: file name is not a valid profile name (lower-case letters, "
                            "digits, '.', '_', '-')")
            continue
        data = _read_mapping(path, rel, "profile", problems)
        if data is None:
            continue
        if "name" in data and data["name"] != path.stem:
            problems.append(f"{rel}: name: {data['name']!r} differs from the file name "
                            f"{path.stem!r}; rename one of them")
            continue
        raw[path.stem] = data
        files[path.stem] = rel
    profiles, resolve_problems = resolve_profiles(raw, files)
    return profiles, files, raw, problems + resolve_problems


def resolve_profiles(raw: Mapping[str, dict[str, Any]], files: Mapping[str, str],
                     ) -> tuple[dict[str, Profile], list[str]]:
    """Resolve ``extends`` chains of profiles given as their own keys (``raw``, by name, with
    each one's file in ``files``) and validate each: what :func:`load_profiles` does once the
    files are read (``servefleet import`` checks a profile it has not written yet with it)."""
    problems: list[str] = []
    profiles: dict[str, Profile] = {}
    for name in raw:
        chain = [name]
        merged: dict[str, Any] = {}
        current: str | None = name
        broken = False
        layers: list[dict[str, Any]] = []
        while current is not None:
            layers.append(raw[current])
            parent = raw[current].get("extends")
            if parent is None:
                break
            if not isinstance(parent, str) or parent not in raw:
                hint = did_you_mean(str(parent), raw)
                problems.append(f"{files[current]}: extends: no profile named {parent!r} "
                                f"in {PROFILES_DIR}/ ({hint}known: {', '.join(sorted(raw))})")
                broken = True
                break
            if parent in chain:
                problems.append(f"{files[name]}: extends: cycle {' -> '.join([*chain, parent])}")
                broken = True
                break
            chain.append(parent)
            current = parent
        if broken:
            continue
        for layer in reversed(layers):
            merged = _deep_merge(merged, layer)
        merged["name"] = name
        merged["extends"] = raw[name].get("extends")
        try:
            profiles[name] = Profile.model_validate(merged)
        except ValidationError as error:
            chain_files = [files[n] for n in chain]
            for line in describe(error, files[name], model=Profile, schema="profile",
                                 source_of=partial(_layer_with, layers, chain_files)):
                if line not in problems:  # an inherited error: reported once, by its file
                    problems.append(line)
    return profiles, problems


def _layer_with(layers: list[dict[str, Any]], chain_files: list[str],
                loc: tuple[Any, ...]) -> str:
    """The file of the nearest layer of an ``extends`` chain (the profile itself first) that
    sets the value at ``loc``; a missing field belongs to the root of the chain."""
    for layer, file in zip(layers, chain_files, strict=True):
        value: Any = layer
        for part in loc:
            present = part in value if isinstance(value, dict) else (
                isinstance(value, list) and isinstance(part, int) and part < len(value))
            if not present:
                break
            value = value[part]
        else:
            return file
    return chain_files[len(layers) - 1] if loc and loc[0] not in layers[0] else chain_files[0]


def _check_references(project_nodes: dict[str, Node], profiles: dict[str, Profile],
                      stack: StackConfig, source: str,
                      profile_files: Collection[str] = (),
                      unloaded: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Nodes and profiles the stack names that do not exist. A profile whose file exists but
    did not load (``profile_files``) is not named again: its own error says why. A node
    whose file did not load (``unloaded``, see :func:`unloaded_nodes`) is said to have
    failed to load, with the first reason."""
    unloaded = unloaded or {}
    problems = []
    seen: set[str] = set()
    reported: set[str] = set()
    # Simulated nodes exist once `servefleet sim up` wrote nodes/sim/: say so once, not per node.
    sim_missing = [d.node for d in stack.deployments
                   if d.node not in project_nodes and d.node not in unloaded
                   and d.node.startswith("sim-")]
    if sim_missing:
        problems.append(f"{source}: nodes {', '.join(dict.fromkeys(sim_missing))} are "
                        "simulated and not created yet: run `sudo servefleet sim up` to start "
                        "the simulated fleet, or pick a stack of real nodes with --stack")
    for dep in stack.deployments:
        where = f"{source}: {CONFIG_NS}profiles.{dep.node}"
        if dep.node in unloaded:
            if dep.node not in reported:
                problems.append(f"{where}: {_unloaded_reason(dep.node, unloaded[dep.node])}")
                reported.add(dep.node)
        elif dep.node not in project_nodes and dep.node not in sim_missing:
            problems.append(f"{where}: "
                            + unknown_name("node", dep.node, project_nodes, f"{NODES_DIR}/"))
        if dep.profile not in profiles and dep.profile not in profile_files:
            problems.append(f"{where}: "
                            + unknown_name("profile", dep.profile, profile_files or profiles,
                                           f"{PROFILES_DIR}/"))
        if dep.key in seen:
            problems.append(f"{where}: deployment {dep.name!r} is defined twice")
        seen.add(dep.key)
    return problems


def load_project(root: Path, stack: str) -> Project:
    """Load and cross-check everything; raise one :class:`ConfigError` with every problem."""
    root = root.resolve()
    nodes, node_files, problems = load_nodes(root)
    profiles, profile_files, raw, profile_problems = load_profiles(root)
    problems += profile_problems
    stack_config, stack_file, stack_problems = load_stack(root, stack)
    problems += stack_problems
    if stack_config is not None:
        problems += _check_references(nodes, profiles, stack_config, stack_file, raw,
                                      unloaded_nodes(root, nodes, problems))
        problems += check_multinode_references(nodes, profiles, stack_config.multi_node,
                                               stack_file)
    if problems or stack_config is None:
        raise ConfigError(problems)
    return Project(root=root, nodes=nodes, node_files=node_files, profiles=profiles,
                   profile_files=profile_files, stack=stack_config, stack_file=stack_file,
                   raw_profiles=raw)


def canonical_json(value: Any) -> str:
    """Deterministic JSON for hashing: sorted keys, no whitespace variation."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def profile_identity(profile: Profile) -> str:
    """sha256 over the resolved profile's behaviour-defining fields.

    Name, description and ``extends`` are left out: renaming a profile or moving a setting
    into a parent does not change what runs; nor do the canaries, which judge an engine,
    nor the tokenizer a bench counts with, nor whether the model is gated (which secrets a
    deploy asks for; the env file names them).
    """
    data = profile.model_dump(mode="json", exclude={"name": True, "description": True,
                                                    "extends": True,
                                                    "health": {"canaries"},
                                                    "model": {"tokenizer", "gated"}})
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()

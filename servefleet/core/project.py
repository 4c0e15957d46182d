"""Load a servefleet project: node inventory, serving profiles and a stack.

Every problem found is collected and reported together (one line each), so an operator
fixes a broken change in one go. Nothing here writes anything.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servefleet.core.errors import ConfigError
from servefleet.core.models import Deployment, Node, Profile, StackConfig
from servefleet.core.models.common import NAME_RE
from servefleet.core.multinode_config import (
    check_multinode_references,
    multinode_from_config,
)
from servefleet.core.pydantic_errors import describe
from servefleet.core.suggest import did_you_mean, unknown_name
from servefleet.core.watch.config import snake_keys
from servefleet.core.yamlfile import read_yaml

NODES_DIR = "nodes"
PROFILES_DIR = "profiles"
STACK_FILE = "Pulumi.{stack}.yaml"
CONFIG_NS = "servefleet:"
# Stack secrets with a friendly config key, and the variable each one fills.
SECRET_KEYS = {"hfToken": "HF_TOKEN", "apiKey": "VLLM_API_KEY"}


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

    def port_of(self, deployment: Deployment) -> int:
        """The port a deployment listens on (explicit, or the node's first port)."""
        return deployment.port or self.nodes[deployment.node].ports[0]


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def load_nodes(root: Path) -> tuple[dict[str, Node], dict[str, str], list[str]]:
    """Load ``nodes/*.yaml`` and ``nodes/*/*.yaml`` (e.g. the generated ``nodes/sim/``)."""
    nodes: dict[str, Node] = {}
    files: dict[str, str] = {}
    problems: list[str] = []
    folder = root / NODES_DIR
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*/*.yaml")]):
        rel = _relative(path, root)
        try:
            data = read_yaml(path, rel)
        except ConfigError as error:
            problems.extend(error.problems)
            continue
        if not isinstance(data, dict):
            problems.append(f"{rel}: expected a mapping of node settings at the top level")
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
        try:
            data = read_yaml(path, rel)
        except ConfigError as error:
            problems.extend(error.problems)
            continue
        if not isinstance(data, dict):
            problems.append(f"{rel}: expected a mapping of profile settings at the top level")
            continue
        if "name" in data and data["name"] != path.stem:
            problems.append(f"{rel}: name: {data['name']!r} differs from the file name "
                            f"{path.stem!r}; rename one of them")
            continue
        raw[path.stem] = data
        files[path.stem] = rel

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
    return profiles, files, raw, problems


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


def _key(value: Any) -> str:
    """A stack key as shown in messages: plain names as they are, anything odd quoted."""
    text = str(value)
    return text if NAME_RE.match(text) else repr(value)


def _deployments_from_config(
    config: dict[str, Any], source: str
) -> tuple[list[Deployment], list[str]]:
    problems: list[str] = []
    entries: dict[Any, Any] = {}
    mapping = config.get(f"{CONFIG_NS}profiles", {})
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, dict):
        problems.append(f"{source}: {CONFIG_NS}profiles: expected a mapping of node → profile")
        mapping = {}
    entries.update(mapping)
    prefix = f"{CONFIG_NS}profiles."
    for key, value in config.items():
        if isinstance(key, str) and key.startswith(prefix):
            entries[key[len(prefix):]] = value
    # Each entry with the key path the operator wrote, and whether it is the one-line form.
    raw: list[tuple[dict[str, Any], str, bool]] = []
    for node, value in entries.items():
        node_path = f"{CONFIG_NS}profiles.{_key(node)}"
        if isinstance(value, str):
            raw.append(({"node": node, "profile": value}, node_path, True))
        elif isinstance(value, dict):
            for dep_name, spec in value.items():
                dep_path = f"{node_path}.{_key(dep_name)}"
                if isinstance(spec, str):
                    raw.append(({"node": node, "name": dep_name, "profile": spec}, dep_path, True))
                elif isinstance(spec, dict):
                    raw.append(({**spec, "node": node, "name": dep_name}, dep_path, False))
                else:
                    problems.append(f"{source}: {dep_path}: expected a profile name or "
                                    "{profile, port}")
        else:
            problems.append(f"{source}: {node_path}: expected a profile name or a "
                            "mapping of deployment name → {profile, port}")
    deployments: list[Deployment] = []
    for values, path, one_line in raw:
        try:
            deployments.append(Deployment.model_validate(values))
        except ValidationError as error:
            problems.extend(describe(error, source, where=_deployment_where(path, one_line),
                                     schema="stack"))
    return deployments, problems


def _deployment_where(path: str, one_line: bool) -> Callable[[tuple[Any, ...]], str]:
    """Map a :class:`Deployment` field to the stack-file key that holds it."""

    def where(loc: tuple[Any, ...]) -> str:
        head = loc[0] if loc else None
        if head in {"node", "name"} or (head == "profile" and one_line):
            return path
        return ".".join([path, *(str(p) for p in loc)])

    return where


# Config keys that name a credential, in any namespace (aws:secretKey, servefleet:apiKey…).
_SECRET_KEY_RE = re.compile(r"(token|secret|password|passwd|credential|api_?key|private_?key)",
                            re.IGNORECASE)
# Values shaped like a credential whatever the key: Hugging Face, OpenAI-style and GitHub
# tokens, and PEM private keys.
_SECRET_VALUE_RE = re.compile(r"^(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{8,}"
                              r"|-----BEGIN [A-Z ]*PRIVATE KEY-----)")


def _is_secure(value: Any) -> bool:
    """A Pulumi-encrypted config value: ``{secure: <ciphertext>}``."""
    return isinstance(value, dict) and set(value) == {"secure"} and isinstance(
        value["secure"], str)


def _secret_hint(key: str) -> str:
    return f"pulumi config set --secret {key} …"


def _plaintext_secrets(config: dict[str, Any], source: str) -> list[str]:
    """Credentials written in clear into a (committed) stack file; values are never shown."""
    problems: list[str] = []
    for key, value in config.items():
        if not isinstance(key, str) or _is_secure(value):
            continue
        shown = key if key.isprintable() else repr(key)
        bare = key.split(":", 1)[-1]
        secret_key = (key.startswith(f"{CONFIG_NS}secretEnv.")
                      or (key.startswith(CONFIG_NS) and bare in SECRET_KEYS)
                      or bool(_SECRET_KEY_RE.search(bare)))
        if secret_key:
            if value is None or value == "":
                continue
            problems.append(f"{source}: {shown}: a secret is stored in plain text in the stack "
                            "file (which is committed to git); remove the line and run "
                            f"`{_secret_hint(key)}` so Pulumi stores it encrypted "
                            "(secure: …)")
            continue
        leaked = [v for v in _strings(value) if _SECRET_VALUE_RE.match(v)]
        if leaked:
            problems.append(f"{source}: {shown}: holds a value that looks like a credential "
                            "(a token or private key) in plain text; remove it and keep it as "
                            f"a Pulumi secret (`{_secret_hint(key)}`)")
    return problems


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


# Stack settings other than profiles and secrets: model field → key after "servefleet:".
_STACK_KEYS = {"strategy": "strategy", "keep_releases": "keepReleases"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def load_stack(root: Path, stack: str) -> tuple[StackConfig | None, str, list[str]]:
    """Read the servefleet keys of ``Pulumi.<stack>.yaml``."""
    if not NAME_RE.match(stack):
        return None, stack, [f"stack name {stack!r} is not valid (lower-case letters, digits, "
                             "'.', '_', '-')"]
    rel = STACK_FILE.format(stack=stack)
    path = root / rel
    if not path.exists():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        hint = did_you_mean(stack, known)
        return None, rel, [f"{rel}: no such stack file ({hint}stacks here: "
                           f"{', '.join(known) or 'none'})"]
    try:
        data = read_yaml(path, rel)
    except ConfigError as error:
        return None, rel, error.problems
    config = (data or {}).get("config", {}) if isinstance(data, dict) else None
    if not isinstance(config, dict):
        return None, rel, [f"{rel}: expected a 'config:' mapping"]
    leaks = _plaintext_secrets(config, rel)
    if leaks:
        # Nothing else is checked: later messages could quote the credential back.
        return None, rel, leaks
    deployments, problems = _deployments_from_config(config, rel)
    multi_node, multi_problems = multinode_from_config(config, rel)
    problems += multi_problems
    secret_names = [env for key, env in SECRET_KEYS.items() if f"{CONFIG_NS}{key}" in config]
    # forceUnlock (node -> lock id) is read by the Pulumi program, not by the CLI.
    known = [*_STACK_KEYS.values(), "profiles", "multiNode", "forceUnlock", "watch",
             *SECRET_KEYS]
    for key in config:
        if not isinstance(key, str) or not key.startswith(CONFIG_NS):
            continue  # other providers' settings (aws:region…) are Pulumi's business
        if key.startswith(f"{CONFIG_NS}secretEnv."):
            name = key.split(".", 1)[1]
            if not re.match(r"^[A-Z_][A-Z0-9_]*\Z", name):
                problems.append(f"{rel}: {key!r}: {name!r} is not an environment variable name "
                                "(A-Z, 0-9, _); rename the key")
                continue
            secret_names.append(name)
        elif key[len(CONFIG_NS):].split(".", 1)[0] not in known:
            shown = key if key.isprintable() and " " not in key else repr(key)
            hint = did_you_mean(key, [CONFIG_NS + k for k in known])
            problems.append(f"{rel}: {shown}: unknown setting ({hint}known: "
                            f"{', '.join(CONFIG_NS + k for k in [*known, 'secretEnv.NAME'])})")
    values: dict[str, Any] = {
        "stack": stack,
        "deployments": deployments,
        "multi_node": multi_node,
        "secret_names": secret_names,
    }
    if f"{CONFIG_NS}strategy" in config:
        values["strategy"] = config[f"{CONFIG_NS}strategy"]
    if f"{CONFIG_NS}keepReleases" in config:
        values["keep_releases"] = config[f"{CONFIG_NS}keepReleases"]
    if f"{CONFIG_NS}watch" in config:
        # Pulumi's camelCase keys (intervalSeconds) as the model's field names.
        values["watch"] = snake_keys(config[f"{CONFIG_NS}watch"])

    def where(loc: tuple[Any, ...]) -> str:
        head = str(loc[0]) if loc else ""
        if head == "watch" and len(loc) > 1:
            # The field inside the block, as the operator spells it (recovery.maxRestarts).
            return CONFIG_NS + "watch." + ".".join(_camel(str(part)) for part in loc[1:])
        return CONFIG_NS + _STACK_KEYS.get(head, head)

    try:
        return StackConfig.model_validate(values), rel, problems
    except ValidationError as error:
        return None, rel, [*problems, *describe(error, rel, where=where, schema="stack")]


def _check_references(project_nodes: dict[str, Node], profiles: dict[str, Profile],
                      stack: StackConfig, source: str,
                      profile_files: Collection[str] = ()) -> list[str]:
    """Nodes and profiles the stack names that do not exist. A profile whose file exists but
    did not load (``profile_files``) is not named again: its own error says why."""
    problems = []
    seen: set[str] = set()
    # Simulated nodes exist once `servefleet sim up` wrote nodes/sim/: say so once, not per node.
    sim_missing = [d.node for d in stack.deployments
                   if d.node not in project_nodes and d.node.startswith("sim-")]
    if sim_missing:
        problems.append(f"{source}: nodes {', '.join(dict.fromkeys(sim_missing))} are "
                        "simulated and not created yet: run `sudo servefleet sim up` to start "
                        "the simulated fleet, or pick a stack of real nodes with --stack")
    for dep in stack.deployments:
        where = f"{source}: {CONFIG_NS}profiles.{dep.node}"
        if dep.node not in project_nodes and dep.node not in sim_missing:
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
        problems += _check_references(nodes, profiles, stack_config, stack_file, raw)
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
    into a parent does not change what runs.
    """
    data = profile.model_dump(mode="json", exclude={"name", "description", "extends"})
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()

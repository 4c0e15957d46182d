"""The stack file, ``Pulumi.<stack>.yaml``: where the stack places profiles on nodes, its
rollout settings, and the checks that keep secrets out of it in plain text."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servefleet.core.errors import ConfigError
from servefleet.core.models import Deployment, StackConfig
from servefleet.core.models.common import NAME_RE
from servefleet.core.multinode_config import multinode_from_config
from servefleet.core.pydantic_errors import describe
from servefleet.core.suggest import did_you_mean
from servefleet.core.watch.config import snake_keys
from servefleet.core.yamlfile import read_yaml

STACK_FILE = "Pulumi.{stack}.yaml"
CONFIG_NS = "servefleet:"
# Stack secrets with a friendly config key, and the variable each one fills.
SECRET_KEYS = {"hfToken": "HF_TOKEN", "apiKey": "VLLM_API_KEY"}


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
                                    "{profile, port, adopt}")
        else:
            problems.append(f"{source}: {node_path}: expected a profile name or a "
                            "mapping of deployment name → {profile, port, adopt}")
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
_STACK_KEYS = {"strategy": "strategy", "keep_releases": "keepReleases",
               "bench_scenarios": "benchScenarios", "bench_image": "benchImage"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def missing_stack_message(root: Path, stack: str) -> str:
    """``Pulumi.<stack>.yaml`` is not in ``root``: the stacks that are, and how to pick one."""
    rel = STACK_FILE.format(stack=stack)
    known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
    if not known:
        return (f"{rel}: no such stack file, and no stack files at all in {root}: run "
                "servefleet inside your config repo (the folder with Pulumi.yaml and "
                "Pulumi.<stack>.yaml), or pass --project DIR")
    name = known[0] if len(known) == 1 else "NAME"
    return (f"{rel}: no such stack file in {root} ({did_you_mean(stack, known)}stacks here: "
            f"{', '.join(known)}); pick one with --stack {name} (or export "
            f"SERVEFLEET_STACK={name})")


def load_stack(root: Path, stack: str) -> tuple[StackConfig | None, str, list[str]]:
    """Read the servefleet keys of ``Pulumi.<stack>.yaml``."""
    if not NAME_RE.match(stack):
        return None, stack, [f"stack name {stack!r} is not valid (lower-case letters, digits, "
                             "'.', '_', '-')"]
    rel = STACK_FILE.format(stack=stack)
    path = root / rel
    if not path.exists():
        return None, rel, [missing_stack_message(root, stack)]
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
    # forceUnlock (node -> lock id) and allowOutage are read by the Pulumi program, not by
    # the CLI (whose flags say the same).
    known = [*_STACK_KEYS.values(), "profiles", "multiNode", "forceUnlock", "allowOutage",
             "watch",
             "gateway", *SECRET_KEYS]
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
    if f"{CONFIG_NS}benchScenarios" in config:
        values["bench_scenarios"] = config[f"{CONFIG_NS}benchScenarios"]
    if f"{CONFIG_NS}benchImage" in config:
        values["bench_image"] = config[f"{CONFIG_NS}benchImage"]
    if f"{CONFIG_NS}watch" in config:
        # Pulumi's camelCase keys (intervalSeconds) as the model's field names.
        values["watch"] = snake_keys(config[f"{CONFIG_NS}watch"])
    if f"{CONFIG_NS}gateway" in config:
        values["gateway"] = snake_keys(config[f"{CONFIG_NS}gateway"])

    def where(loc: tuple[Any, ...]) -> str:
        head = str(loc[0]) if loc else ""
        if head in ("watch", "gateway") and len(loc) > 1:
            # The field inside the block, as the operator spells it (recovery.maxRestarts).
            return CONFIG_NS + head + "." + ".".join(_camel(str(part)) for part in loc[1:])
        return CONFIG_NS + _STACK_KEYS.get(head, head)

    try:
        return StackConfig.model_validate(values), rel, problems
    except ValidationError as error:
        return None, rel, [*problems, *describe(error, rel, where=where, schema="stack")]

"""JSON Schemas of the files an operator edits, for editors (``servefleet schema NAME``).

They come from the pydantic models, field docstrings as descriptions, reshaped for the
files as written rather than the models as loaded:

* ``profile``: a file with ``extends:`` holds only what it changes, so nothing below the top
  is required; without ``extends:`` the model's required fields are; ``name`` comes from the
  file name. Unknown fields are refused at every level (that is what catches a typo).
* ``node``: :class:`~servefleet.core.models.Node`, ``name`` from the file name.
* ``stack``: ``Pulumi.<stack>.yaml``: Pulumi's own keys, the ``servefleet:`` settings the
  loader knows (``profiles`` in both forms, flat ``profiles.<node>`` keys, ``multiNode``,
  secrets as ``{secure: …}``), any other provider's keys untouched.

The shipped YAML files point at the copies in ``schemas/`` with a
``# yaml-language-server: $schema=…`` first line (VS Code's YAML extension reads it);
:data:`SCHEMA_FILES` names them, and a test holds them equal to what this module builds.
The rules that span files (a profile that does not fit its node…) stay ``servefleet
validate``'s: a schema checks one file's shape.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from servefleet.core.models import Deployment, MultiNodeDeployment, Node, Profile, StackConfig
from servefleet.core.multinode_config import _FIELDS as MULTINODE_KEYS
from servefleet.core.project import CONFIG_NS, SECRET_KEYS

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = "schemas"
SCHEMA_FILES = {name: f"{SCHEMA_DIR}/{name}.schema.json" for name in ("profile", "node", "stack")}
"""Schema name → its path in the project (``schemas/profile.schema.json``…)."""
MODELINE = "# yaml-language-server: $schema="


def modeline(name: str, depth: int) -> str:
    """The first line of a YAML file ``depth`` folders below the project root that points
    the YAML language server at schema ``name``."""
    return MODELINE + "../" * depth + SCHEMA_FILES[name]


def _drop_required(node: Any) -> None:
    """Remove ``required`` from every object schema (overlays hold partial mappings)."""
    if isinstance(node, dict):
        node.pop("required", None)
        for value in node.values():
            _drop_required(value)
    elif isinstance(node, list):
        for value in node:
            _drop_required(value)


def _headed(schema: dict[str, Any], title: str, description: str) -> dict[str, Any]:
    return {"$schema": DRAFT, "title": title, "description": description,
            **{k: v for k, v in schema.items() if k not in ("title", "description")}}


def profile_schema() -> dict[str, Any]:
    """The schema of one ``profiles/<name>.yaml``."""
    schema = copy.deepcopy(Profile.model_json_schema(mode="validation"))
    required = [f for f in schema.get("required", []) if f != "name"]
    _drop_required(schema)
    if required:
        schema["if"] = {"not": {"required": ["extends"]}}
        schema["then"] = {"required": required}
    return _headed(schema, "servefleet serving profile",
                   "A serving profile (profiles/<name>.yaml): engine, model, image, engine "
                   "settings, health expectations. `extends: PARENT` inherits PARENT and holds "
                   "only what changes. Cross-file rules: `servefleet validate`.")


def node_schema() -> dict[str, Any]:
    """The schema of one ``nodes/<name>.yaml``."""
    schema = copy.deepcopy(Node.model_json_schema(mode="validation"))
    schema["required"] = [f for f in schema.get("required", []) if f != "name"]
    return _headed(schema, "servefleet node",
                   "One machine of the inventory (nodes/<name>.yaml): address, pinned SSH "
                   "host key, GPUs, driver, ports.")


def _described(model: Any, field: str) -> dict[str, Any]:
    info = model.model_fields[field]
    return {"description": info.description} if info.description else {}


def stack_schema() -> dict[str, Any]:
    """The schema of ``Pulumi.<stack>.yaml``."""
    dep = Deployment.model_json_schema(mode="validation")["properties"]
    deployment = {
        "type": "object", "additionalProperties": False, "required": ["profile"],
        "properties": {"profile": {**dep["profile"], "type": "string"},
                       "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                                **_described(Deployment, "port")},
                       "adopt": {"type": "string",
                                 "pattern": "^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$",
                                 **_described(Deployment, "adopt")}},
    }
    profile_name = {"type": "string", "description": "Serving profile (profiles/<name>.yaml)."}
    node_entry: dict[str, Any] = {
        "description": "A profile name (one deployment `main` on the node's first port), or "
                       "deployment name → profile name or {profile, port, adopt}.",
        "anyOf": [profile_name, {"type": "object", "additionalProperties": {
            "anyOf": [profile_name, deployment]}}],
    }
    multi = MultiNodeDeployment.model_json_schema(mode="validation")
    multi_props = {key: multi["properties"].get(field, {})
                   for key, field in MULTINODE_KEYS.items()}
    secure = {"type": "object", "additionalProperties": False, "required": ["secure"],
              "properties": {"secure": {"type": "string"}},
              "description": "A Pulumi secret: `pulumi config set --secret KEY VALUE`."}
    properties: dict[str, Any] = {
        f"{CONFIG_NS}strategy": {"enum": ["parallel", "rolling"],
                                 **_described(StackConfig, "strategy")},
        f"{CONFIG_NS}keepReleases": {"type": "integer", "minimum": 1, "maximum": 100,
                                     **_described(StackConfig, "keep_releases")},
        f"{CONFIG_NS}benchScenarios": {"type": "string",
                                       **_described(StackConfig, "bench_scenarios")},
        f"{CONFIG_NS}benchImage": {"type": "string",
                                   **_described(StackConfig, "bench_image")},
        f"{CONFIG_NS}profiles": {"type": "object", "additionalProperties": node_entry,
                                 "description": "Node name → what runs on it."},
        f"{CONFIG_NS}multiNode": {
            "type": "object", "description": "Engines spanning several nodes.",
            "additionalProperties": {"type": "object", "additionalProperties": False,
                                     "properties": multi_props, "$defs": multi.get("$defs", {}),
                                     "required": ["profile", "nodes"]}},
        f"{CONFIG_NS}allowOutage": {"type": "boolean",
                                    "description": "pulumi up with a gateway: let a rollout "
                                                   "drain the last engine serving a route "
                                                   "(read by the Pulumi program)."},
        f"{CONFIG_NS}forceUnlock": {"type": "object",
                                    "additionalProperties": {"type": "string"},
                                    "description": "Node → lock id to remove before the "
                                                   "rollout (read by the Pulumi program)."},
        **{f"{CONFIG_NS}{key}": {**secure, "description": f"{env} for the nodes' env files, "
                                 f"as a Pulumi secret: `pulumi config set --secret "
                                 f"{CONFIG_NS}{key} …`."}
           for key, env in SECRET_KEYS.items()},
    }
    # Settings added to StackConfig later (their nested keys are camelCase in the file, the
    # model's are snake_case): known as keys, their content left to `servefleet validate`.
    handled = {"stack", "deployments", "multi_node", "secret_names", "strategy",
               "keep_releases"}
    for field_name, info in StackConfig.model_fields.items():
        if field_name not in handled:
            head, *rest = field_name.split("_")
            key = CONFIG_NS + head + "".join(part.title() for part in rest)
            properties.setdefault(key, {"description": info.description or field_name})
    config = {
        "type": "object", "properties": properties, "additionalProperties": False,
        "patternProperties": {
            rf"^{CONFIG_NS}profiles\.": node_entry,
            rf"^{CONFIG_NS}forceUnlock\.": {"type": "string"},
            rf"^{CONFIG_NS}secretEnv\.[A-Z_][A-Z0-9_]*$": secure,
            rf"^(?!{CONFIG_NS})": {},
        },
    }
    return {
        "$schema": DRAFT, "title": "servefleet stack (Pulumi.<stack>.yaml)",
        "description": "Which profile runs on which node; read by `pulumi up` and by the "
                       "servefleet CLI (--stack NAME).",
        "type": "object", "properties": {"config": config},
    }


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "profile": profile_schema, "node": node_schema, "stack": stack_schema}
"""Schema name → the function that builds it."""

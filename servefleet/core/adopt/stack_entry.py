"""The stack file's entry for an imported engine, added as text so that the operator's
comments and layout stay as they are.

The entry is the flat key Pulumi's ``pulumi config set servefleet:profiles.<node> …``
writes, appended at the end of the ``config:`` mapping::

      servefleet:profiles.gpu-box:
        main: {profile: gpu-box-main, port: 8000, adopt: vllm-qwen}

A node the stack already places anything on is refused: a flat key replaces the node's
whole entry (:mod:`servefleet.core.stack_file`), so its deployments would be lost; the
operator adds the line under the node's entry instead.
"""

from __future__ import annotations

import re
from typing import Any

from servefleet.core.errors import ConfigError
from servefleet.core.stack_file import CONFIG_NS
from servefleet.core.yamlfile import parse_yaml

_TOP_KEY = re.compile(r"^[^\s#]")


def deployment_line(deployment: str, profile: str, port: int, adopt: str) -> str:
    """``<deployment>: {profile: …, port: …, adopt: …}`` (names are plain YAML scalars:
    profile, deployment and container names allow no YAML syntax)."""
    return f"{deployment}: {{profile: {profile}, port: {port}, adopt: {adopt}}}"


def _node_placed(config: dict[str, Any], node: str) -> bool:
    mapping = config.get(f"{CONFIG_NS}profiles")
    return (isinstance(mapping, dict) and node in mapping) or \
        f"{CONFIG_NS}profiles.{node}" in config


def add_deployment(text: str, source: str, node: str, entries: list[str],
                   comment: str) -> str:
    """``text`` (the stack file ``source``) with ``entries`` (from :func:`deployment_line`)
    placed on ``node``, under a ``# comment`` line; :class:`ConfigError` when it cannot be
    added without touching what is there."""
    data = parse_yaml(text, source)
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected a 'config:' mapping to add the entry to")
    if _node_placed(config, node):
        raise ConfigError(
            f"{source}: node {node!r} already has an entry under {CONFIG_NS}profiles: add "
            f"the deployment there by hand: " + "; ".join(entries))
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"^config:\s*(#.*)?$",
                                                                 line.rstrip("\n"))), None)
    if start is None:
        raise ConfigError(f"{source}: 'config:' is not written as a block ('config:' on a "
                          "line of its own); add the entry by hand: " + "; ".join(entries))
    end = next((i for i in range(start + 1, len(lines)) if _TOP_KEY.match(lines[i])),
               len(lines))
    # Keep comment and blank lines that come before the next top-level key with it.
    while end > start + 1 and (not lines[end - 1].strip()
                               or lines[end - 1].lstrip().startswith("#")) \
            and not lines[end - 1].startswith("  "):
        end -= 1
    indent = next((line[:len(line) - len(line.lstrip())] for line in lines[start + 1:end]
                   if line.strip() and not line.lstrip().startswith("#")), "  ")
    block = [f"{indent}# {comment}\n", f"{indent}{CONFIG_NS}profiles.{node}:\n",
             *(f"{indent}  {entry}\n" for entry in entries)]
    if end > 0 and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    new = "".join([*lines[:end], *block, *lines[end:]])
    added = parse_yaml(new, source)
    # The edit must add exactly the new key: anything else changed means the text was not
    # laid out as expected.
    want = dict(config)
    want[f"{CONFIG_NS}profiles.{node}"] = parse_yaml("\n".join(entries), source)
    if not isinstance(added, dict) or added.get("config") != want or \
            {k: v for k, v in added.items() if k != "config"} != \
            {k: v for k, v in data.items() if k != "config"}:
        raise ConfigError(f"{source}: could not add the entry without changing other "
                          "settings (an unusual layout); add it by hand: "
                          + "; ".join(entries))
    return new

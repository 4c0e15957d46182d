"""What ``plan``, ``deploy``, ``rollback``, ``releases`` and ``logs NODE`` share: the
console, secrets from the environment, the validation rules' warnings, and node lines.

Secrets for the nodes' env files come from the operator's environment (``HF_TOKEN``…): the
names are those the deployed profiles list in ``secret_env``; a missing one is named before
anything is touched.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from servefleet.core.errors import ConfigError
    from servefleet.core.project import Project


def console() -> Console:
    """The console every rollout command prints to."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def secrets_from_env(project: Project, nodes: Sequence[str] | None) -> tuple[dict[str, str],
                                                                             list[str]]:
    """The secret values the chosen deployments need (those spanning nodes included), from
    the environment, and the names that are missing. A public model's ``HF_TOKEN`` that is
    not set is not missing: it goes empty into the env file
    (:func:`servefleet.core.secrets.optional_blanks`; :func:`hub_token_lines` warns)."""
    from servefleet.core.secrets import optional_blanks

    profiles = [project.profiles[p] for p in _chosen_profiles(project, nodes)]
    names = sorted({name for profile in profiles for name in profile.secret_env})
    found = optional_blanks(profiles, {n: os.environ[n] for n in names if os.environ.get(n)})
    return found, [n for n in names if n not in found]


def hub_token_lines(project: Project) -> list[str]:
    """A warning per profile the stack places whose hub token (``HF_TOKEN``) is not set:
    a public model deploys without it; a gated one (``model.gated``) cannot download."""
    from servefleet.core.models.profile import HUB_TOKEN_SECRETS

    used = sorted({d.profile for d in project.deployments(None)}
                  | {d.profile for d in project.stack.multi_node})
    by_model: dict[tuple[str, str, bool], list[str]] = {}
    for name in used:
        profile = project.profiles.get(name)
        if profile is None:
            continue
        for secret in sorted(set(profile.secret_env) & HUB_TOKEN_SECRETS):
            if not os.environ.get(secret):
                key = (secret, profile.model.id, profile.model.gated)
                by_model.setdefault(key, []).append(name)
    lines = []
    for (secret, model, gated), names in by_model.items():
        which = f"profile{'s' if len(names) > 1 else ''} {', '.join(names)}"
        if gated:
            lines.append(f"{secret} is not set: {model} ({which}) is a gated model "
                         f"(model.gated): its download needs the token; export {secret}=… "
                         "before deploying")
        else:
            lines.append(f"{secret} is not set: {model} ({which}) is a public model and "
                         "deploys without a token (set it for the hub's rate limits; a gated "
                         "model says model.gated: true)")
    return lines


def _chosen_profiles(project: Project, nodes: Sequence[str] | None) -> list[str]:
    return [profile for _, profile in _chosen_keys(project, nodes)]


def _chosen_keys(project: Project, nodes: Sequence[str] | None) -> list[tuple[str, str]]:
    """``(deployment key, profile)`` of every deployment NODES selects, spanning ones too."""
    from servefleet.adapters.multinode import select_multinode

    single, multi = select_multinode(project, nodes)
    chosen = [] if single == [] else project.deployments(single)
    return [*((d.key, d.profile) for d in chosen), *((d.key, d.profile) for d in multi)]


def node_secrets(project: Project, node: str) -> dict[str, str]:
    """The secrets NODE's deployments use, from the environment: what its probes send (an
    API key) and what every line read from it is masked with. Empty for a node the stack
    does not place anything on (the command then names the node's own problem)."""
    from servefleet.core.errors import ConfigError

    try:
        return secrets_from_env(project, [node])[0]
    except ConfigError:
        return {}


def show_findings(out: Console, project: Project) -> None:
    """Run the validation rules: errors raise (nothing is touched), warnings are printed."""
    from rich.text import Text

    from servefleet.adapters import rollout
    from servefleet.core.rules import Severity

    for finding in rollout.check_rules(project):
        if finding.severity is Severity.WARNING:
            out.print(Text(f"warning: {finding}", style="yellow"))
    for line in hub_token_lines(project):
        out.print(Text(f"warning: {line}", style="yellow"))


def node_line(node: str, message: str) -> str:
    """``node: message``, the node named once (errors from the SSH layer already start
    with it)."""
    return message if message.startswith(f"{node}: ") else f"{node}: {message}"


def uncomparable(project: Project, nodes: Sequence[str] | None,
                 missing: Sequence[str]) -> list[str]:
    """One line per missing secret: the deployments whose release id it is part of, which
    plan cannot compare with what runs (the ids would differ whatever the node holds)."""
    lines = []
    for name in missing:
        keys = [key for key, profile in _chosen_keys(project, nodes)
                if name in project.profiles[profile].secret_env]
        lines.append(f"{name} is not set in the environment: {', '.join(keys)} cannot be "
                     f"compared with what runs (their release ids include it) and show as "
                     f"changed; export {name}=… to compare them")
    return lines


def missing_error(missing: list[str]) -> ConfigError:
    """The error of a deploy started without secrets its profiles need."""
    from servefleet.core.errors import ConfigError

    return ConfigError([f"secret {name} is not set in the environment: export {name}=… "
                        "before deploying (it goes only into the node's 0600 env file)"
                        for name in missing])

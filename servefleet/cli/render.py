"""``servefleet render``, ``servefleet show`` and ``servefleet diff-profiles``.

``render`` writes each deployment's release to ``OUT/<node>/<deployment>/`` exactly as a
deploy would ship it. Without ``--with-secrets-from-env`` the secret env file holds empty
``NAME=`` placeholders (with a comment saying so), and the release ids differ from a deploy's,
because secret values (as hashes) are part of the id. Everything is rendered in memory first;
any error means nothing is written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from servefleet.core.models import Profile
    from servefleet.core.render import RenderedRelease

SHOW_PORT = 8000
"""Port used to show a profile's command when no deployment fixes one."""


def write_releases(out: Path, releases: list[RenderedRelease]) -> list[Path]:
    """Write releases under ``out/<node>/<deployment>/`` with their modes.

    Files go to a private staging folder inside ``out`` first (created 0700, each file
    created with its final mode, so the secret file is never readable by others), then
    each release folder replaces the previous one, so no stale file of an earlier render
    survives next to new ones.
    """
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".servefleet-render-", dir=out))
    written: list[Path] = []
    try:
        for release in releases:
            folder = staging / release.node / release.deployment
            for rel, content in release.files.items():
                target = folder / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                mode = release.modes[rel]
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(content)
                os.chmod(target, mode)  # the umask may have removed bits
        for release in releases:
            final = out / release.node / release.deployment
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)
            elif final.exists() or final.is_symlink():
                final.unlink()
            os.replace(staging / release.node / release.deployment, final)
            written.append(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


@click.command("render")
@click.argument("nodes", nargs=-1)
@click.option("--all", "all_nodes", is_flag=True, help="Render every node of the stack.")
@click.option("--out", "out_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Folder to write <node>/<deployment>/ release folders into.")
@click.option("--with-secrets-from-env", is_flag=True,
              help="Fill the secret env file from environment variables of the same names "
                   "(a missing one is an error). Without it, secrets are empty placeholders.")
@click.pass_obj
def render_command(obj: CliContext, nodes: tuple[str, ...], all_nodes: bool, out_dir: Path,
                   with_secrets_from_env: bool) -> None:
    """Render the release files of NODE(s) (or --all) into --out, as a deploy would."""
    from servefleet.core.project import load_project
    from servefleet.core.render import render_deployments

    if all_nodes == bool(nodes):
        raise click.UsageError("give one or more NODE names, or --all (not both)")
    project = load_project(obj.project_dir, obj.stack)
    deployments = project.deployments(None if all_nodes else list(nodes))
    secrets: dict[str, str] | None = None
    if with_secrets_from_env:
        names = {n for d in deployments for n in project.profiles[d.profile].secret_env}
        secrets = {n: os.environ[n] for n in sorted(names) if n in os.environ}
    releases = render_deployments(project, deployments, secrets,
                                  require_secrets=with_secrets_from_env)
    written = write_releases(out_dir, releases)
    for release, folder in zip(releases, written, strict=True):
        click.echo(f"{release.key}: release {release.release_id} ({release.profile}) -> {folder}")
    if any(not r.secrets_rendered for r in releases):
        click.echo("note: secrets were not rendered: engine.env holds empty NAME= placeholders "
                   "and the release ids differ from a deploy's; use --with-secrets-from-env "
                   "to fill them from the environment")


def _load_profiles(root: Path, *names: str) -> list[Profile]:
    """``names`` resolved; every other file of the project that cannot be read is named on
    stderr (a warning: the profiles asked for loaded), as ``validate`` names it."""
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_nodes, load_profiles
    from servefleet.core.suggest import unknown_name

    profiles, _, _, problems = load_profiles(root)
    for name in names:
        if name not in profiles:
            raise ConfigError(problems or unknown_name("profile", name, profiles, "profiles/"))
    _warn_unreadable([*problems, *load_nodes(root)[2]])
    return [profiles[name] for name in names]


def _warn_unreadable(problems: list[str]) -> None:
    """One warning line per problem."""
    for problem in dict.fromkeys(problems):
        click.echo(f"warning: {problem} (`servefleet validate` lists every problem)", err=True)


def _show_data(profile: Profile, port: int) -> dict[str, Any]:
    from servefleet.core.project import profile_identity
    from servefleet.core.render import engine_command

    return {
        "name": profile.name,
        "identity": profile_identity(profile),
        "engine_command": engine_command(profile, port),
        "profile": profile.model_dump(mode="json", exclude_none=True),
    }


@click.command("show")
@click.argument("profile_name", metavar="PROFILE")
@click.option("--port", type=click.IntRange(1, 65535), default=SHOW_PORT, show_default=True,
              help="Port to show in the engine command.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@click.pass_obj
def show_command(obj: CliContext, profile_name: str, port: int, as_json: bool) -> None:
    """Show PROFILE resolved (after extends), its identity hash and its engine command."""
    import yaml

    [profile] = _load_profiles(obj.project_dir, profile_name)
    data = _show_data(profile, port)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    parent = f" (extends {profile.extends})" if profile.extends else ""
    click.echo(f"# profile {profile.name}{parent}, resolved")
    click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100), nl=False)


@click.command("diff-profiles")
@click.argument("profile_a", metavar="A")
@click.argument("profile_b", metavar="B")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@click.pass_obj
def diff_profiles_command(obj: CliContext, profile_a: str, profile_b: str,
                          as_json: bool) -> None:
    """Show the engine flags that change from profile A to profile B.

    One line each: '- flag value' (only in A), '+ flag value' (only in B),
    '~ flag: old -> new' (changed).
    """
    from servefleet.core.render import diff_flags, engine_flags

    a, b = _load_profiles(obj.project_dir, profile_a, profile_b)
    diff = diff_flags(engine_flags(a), engine_flags(b))
    if as_json:
        click.echo(json.dumps({"a": a.name, "b": b.name, "engine": [a.engine, b.engine],
                               **diff.to_json()}, indent=2))
        return
    if a.engine != b.engine:
        click.echo(f"# engines differ: {a.engine} -> {b.engine}")
    if diff.empty:
        click.echo(f"no engine flag changes between {a.name} and {b.name}")
        return
    for line in diff.lines():
        click.echo(line)

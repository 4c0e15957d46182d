"""``servefleet models NODE``: the weights staged on a node, the releases using each, and
``--prune`` for those no release on the node needs; ``servefleet models pin REPO[@REV]``:
a checkpoint's own config.json (and its other small files) pinned under
``profiles/models/``, its weights' size read from the hub, and, with ``--profile``, the
pin written into a profile."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext
from servefleet.cli.node_group import NodeOrSubcommandGroup
from servefleet.cli.rollout_common import console

if TYPE_CHECKING:
    from servefleet.core.modelpin import PinnedCheckpoint
    from servefleet.core.models import Profile


def _short(pin: str) -> str:
    """A pin with its digests cut to 12 hex digits, for a table."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{28,52}\b", r"\1…", pin)


@click.command("models")
@click.argument("node")
@click.option("--prune", is_flag=True,
              help="Remove staged weights that no release on the node uses.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_obj
def models_command(obj: CliContext, node: str, prune: bool, as_json: bool) -> None:
    """List the weights servefleet staged on NODE (snapshots in its Hugging Face cache,
    files in its models_dir) and the releases that use each (* = current). With --prune,
    remove those no release still on the node needs; anything the operator put there by
    hand is never listed nor touched."""
    from rich.table import Table

    from servefleet.adapters.runtime import connect
    from servefleet.adapters.weights import size_text
    from servefleet.adapters.weights.models import staged_models
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    if node not in project.nodes:
        raise ConfigError(f"unknown node {node!r}; the inventory has: "
                          f"{', '.join(sorted(project.nodes))}")
    with connect(project.nodes[node]) as transport:
        report = staged_models(transport, prune=prune)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        table = Table(box=None, header_style="bold")
        for column in ("kind", "weights", "size", "used by", *(("pruned",) if prune else ())):
            table.add_column(column)
        for item in report.items:
            row = [item.kind, _short(item.pin), size_text(item.size),
                   ", ".join(item.used_by) or "-"]
            if prune:
                row.append("yes" if item.pruned else "no (in use)" if item.pruned is None
                           else "FAILED")
            table.add_row(*row)
        out = console()
        if report.items:
            out.print(table)
        else:
            out.print(f"{node}: no staged weights")
        freed = sum(i.size for i in report.items if i.pruned)
        if prune:
            out.print(f"{node}: pruned {sum(1 for i in report.items if i.pruned)} item(s), "
                      f"{size_text(freed)} freed")
        for error in report.errors:
            out.print(f"[red]error:[/red] {error}")
    if report.errors:
        sys.exit(1)


@click.group("models", cls=NodeOrSubcommandGroup, node_command=models_command,
             usage="NODE [--prune] | pin REPO[@REVISION] ...")
def models_group() -> None:
    """Model weights and checkpoints.

    ``models NODE [--prune]`` lists the weights staged on a node; ``models pin REPO``
    pins a checkpoint's config.json and weights' size into git.
    """


def _token() -> str | None:
    from servefleet.adapters.hub_pin import TOKEN_VARS

    return next((os.environ[v] for v in TOKEN_VARS if os.environ.get(v)), None)


def _write_files(root: Path, pinned: PinnedCheckpoint) -> list[str]:
    """Write the pinned files; the names of those that were there with other bytes (a hand
    edit undone)."""
    from servefleet.core.project import PROFILES_DIR

    folder = root / PROFILES_DIR / pinned.folder
    folder.mkdir(parents=True, exist_ok=True)
    restored = []
    for name, data in sorted(pinned.files.items()):
        path = folder / name
        if path.exists() and path.read_bytes() != data:
            restored.append(name)
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return restored


def _target_profile(root: Path, name: str, repo: str) -> tuple[Profile, str]:
    """The profile ``--profile`` names (and its file), refused before anything is fetched
    when it does not serve ``repo``."""
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_profiles
    from servefleet.core.suggest import unknown_name

    profiles, files, _, problems = load_profiles(root)
    if name not in profiles:
        if name in files:
            raise ConfigError(problems)
        raise ConfigError(problems or unknown_name("profile", name, profiles, "profiles/"))
    profile = profiles[name]
    source = profile.model.source
    serves = source.repo_for(profile.model.id) if source is not None and \
        source.kind != "url" else profile.model.id
    if repo not in (profile.model.id, serves):
        raise ConfigError(f"{files[name]}: model.id is {profile.model.id}, not {repo}: the pin "
                          f"would describe another checkpoint; pin {profile.model.id} "
                          f"(servefleet models pin {profile.model.id} --profile {name}), or "
                          "change model.id first")
    return profile, files[name]


def _pin_profile(root: Path, name: str, profile: Profile, file: str,
                 pinned: PinnedCheckpoint) -> list[str]:
    """Write the pin into ``profiles/<name>.yaml`` (text edit, checked by loading the
    profiles again); the keys written."""
    from servefleet.core.errors import ConfigError
    from servefleet.core.modelpin import write_pin
    from servefleet.core.project import load_profiles, resolve_profiles
    from servefleet.core.yamlfile import parse_yaml

    source = profile.model.source
    snapshot = source is not None and source.kind == "snapshot" and \
        source.repo_for(profile.model.id) == pinned.repo
    if snapshot and source is not None and source.revision != pinned.commit:
        raise ConfigError(
            f"{file}: model.source.revision stages commit {source.revision}, not "
            f"{pinned.commit}: the pin would describe another revision than the one served; "
            f"pin that commit (servefleet models pin {pinned.repo}@{source.revision} "
            f"--profile {name}) or change model.source.revision first")
    pin = pinned.profile_pin(revision=not snapshot, had_config=profile.model.config is not None)
    path = root / file
    text = path.read_text(encoding="utf-8")
    new = write_pin(text, file, pin)
    _, files, raw, before = load_profiles(root)
    after_profiles, after = resolve_profiles({**raw, name: parse_yaml(new, file)}, files)
    added = [problem for problem in after if problem not in before]
    if added or name not in after_profiles:
        raise ConfigError([f"{file}: the pin was not written: the profile would not load "
                           "with it:", *added])
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(new, encoding="utf-8")
    tmp.replace(path)
    return [f"model.{key}" for key in pin.values()]


@models_group.command("pin")
@click.argument("spec", metavar="REPO[@REVISION]")
@click.option("--profile", "profile_name", metavar="NAME",
              help="Write the pin (revision, weights_gib, config) into profiles/NAME.yaml.")
@click.option("--endpoint", metavar="URL",
              help="Hub or mirror to read from (default: HF_ENDPOINT, else huggingface.co).")
@click.option("--gguf", metavar="FILE",
              help="The GGUF file whose size is the weights' (a repository of several).")
@click.pass_obj
def pin_command(obj: CliContext, spec: str, profile_name: str | None, endpoint: str | None,
                gguf: str | None) -> None:
    """Pin REPO at REVISION (a branch, tag or commit; main by default): resolve it to its
    commit, write the checkpoint's config.json and its other small files (generation and
    quantization configs, safetensors index) under profiles/models/<org>--<name>@<commit>/,
    print config.json's sha256, the weights' size (the sum of the sizes the hub publishes for
    the weight files) and what the KV planner makes of the config. HF_TOKEN is read for a
    gated or private repository."""
    from servefleet.adapters.hub_pin import DEFAULT_ENDPOINT, read_checkpoint
    from servefleet.adapters.weights import size_text
    from servefleet.core.modelpin import parse_spec, pinned_checkpoint

    wanted = parse_spec(spec)
    root = obj.project_dir
    target = _target_profile(root, profile_name, wanted.repo) if profile_name else None
    hub_url = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    hub = read_checkpoint(wanted.repo, wanted.revision, hub_url, _token())
    pinned = pinned_checkpoint(hub.repo, hub.asked, hub.commit, hub.sizes, hub.files, gguf)
    restored = _write_files(root, pinned)
    click.echo(f"{pinned.repo}@{pinned.asked} is commit {pinned.commit} ({hub_url})")
    click.echo(f"wrote {pinned.where}: {', '.join(sorted(pinned.files))}"
              + (f" (restored the hub's {', '.join(restored)})" if restored else ""))
    if pinned.config_sha256 is not None:
        click.echo(f"config.json sha256 {pinned.config_sha256}")
    weights = pinned.weights
    click.echo(f"weights {weights.gib:.2f} GiB: {weights.total_bytes:,} bytes "
              f"({size_text(weights.total_bytes)}) in {weights.how}, as the hub publishes them")
    verdict = pinned.verdict
    click.echo(f"planner: {verdict.text}" if verdict is not None else
              "planner: no config.json (a GGUF repository): the KV planner plans vLLM "
              "profiles from a config.json")
    for note in verdict.notes if verdict is not None else ():
        click.echo(f"note: {note}")
    if target is None:
        values = pinned.profile_pin(revision=True, had_config=False).values()
        click.echo("pin it in a profile: --profile NAME, or by hand under model: "
                   + ", ".join(f"{key}: {value}".replace("'", "") for key, value in
                               values.items()))
        return
    profile, file = target
    written = _pin_profile(root, profile_name or "", profile, file, pinned)
    click.echo(f"{file}: wrote {', '.join(written)}")
    if verdict is not None and not verdict.planned:
        click.echo(f"{file}: model.config not pinned: the planner refuses this config, so plan "
                  "and tune do not predict its KV pool; read the pool from the first boot's "
                  f"'GPU KV cache size' (the files stay under {pinned.where})")


COMMANDS: list[click.Command] = [models_group]
"""Commands of this module."""

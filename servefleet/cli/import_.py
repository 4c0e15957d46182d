"""``servefleet import NODE``: read the engines started by hand on a node and write the
servefleet config that describes them (a profile each, and the stack entry that adopts the
container). Prints what it found and would write; ``--write`` writes it, never over an
existing file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from servefleet.core.adopt import ImportedProfile, RunningEngine


def _deployment_names(engines: list[RunningEngine], given: str | None) -> list[str]:
    """One deployment per engine: ``given`` or ``main`` for a single one, else each
    container's name made a valid deployment name."""
    from servefleet.core.errors import ConfigError
    from servefleet.core.models.common import NAME_RE

    if len(engines) == 1:
        return [given or "main"]
    if given is not None:
        raise ConfigError(
            f"--deployment {given}: the node runs {len(engines)} engines "
            f"({', '.join(e.container for e in engines)}); pick one with --container NAME")
    names: list[str] = []
    for engine in engines:
        name = re.sub(r"[^a-z0-9._-]+", "-", engine.container.lower()).strip("-._")[:63]
        name = name if NAME_RE.match(name) else f"engine-{len(names) + 1}"
        while name in names:
            name += "-2"
        names.append(name)
    return names


def _entry(result: ImportedProfile, deployment: str) -> str:
    from servefleet.core.adopt.stack_entry import deployment_line

    assert result.port is not None
    return deployment_line(deployment, result.name, result.port, result.container)


def _print(node: str, running: list[RunningEngine], results: list[ImportedProfile],
           deployments: list[str], stack_file: str) -> None:
    click.echo(f"{node}: {len(results)} engine container(s)")
    for engine, result, deployment in zip(running, results, deployments, strict=True):
        image = engine.image or "unknown image"
        click.echo(f"\n{result.container}: {result.engine or 'unknown engine'}, {image} "
                   f"({engine.state})")
        if result.refused is not None:
            click.echo(f"  refused: {result.refused}")
        else:
            base = f"extends {result.base}" if result.base else "in full (no shipped profile "\
                "of this engine and model)"
            click.echo(f"  profile: {result.file} ({base})")
            click.echo(f"  stack:   {stack_file}: servefleet:profiles.{node}: "
                       f"{_entry(result, deployment)}")
        for note in result.notes:
            click.echo(f"  note: {note}")
        if result.text is not None:
            click.echo("  " + result.text.rstrip("\n").replace("\n", "\n  | ")
                       .replace("# yaml", "| # yaml", 1))


def _write(root: Path, node: str, stack_file: str, results: list[ImportedProfile],
           deployments: list[str]) -> list[str]:
    """Write the profiles and the stack entry; nothing when a file to create exists."""
    from servefleet.core.adopt import add_deployment
    from servefleet.core.errors import ConfigError

    chosen = [(r, d) for r, d in zip(results, deployments, strict=True) if r.text is not None]
    if not chosen:
        return []
    existing = [r.file for r, _ in chosen if (root / r.file).exists()]
    if existing:
        raise ConfigError(f"{', '.join(existing)}: already exist(s); servefleet import never "
                          "overwrites a file: move it away or pick another name with "
                          "--deployment NAME")
    stack_path = root / stack_file
    if not stack_path.is_file():
        raise ConfigError(f"{stack_file}: no such stack file; pick one with --stack NAME")
    containers = ", ".join(r.container for r, _ in chosen)
    new_stack = add_deployment(
        stack_path.read_text(encoding="utf-8"), stack_file, node,
        [_entry(r, d) for r, d in chosen],
        f"Imported by `servefleet import {node}` (adopts {containers} on the first deploy)")
    written = []
    for result, _ in chosen:
        assert result.text is not None
        path = root / result.file
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as handle:  # "x": never over a file
            handle.write(result.text)
        written.append(result.file)
    stack_path.write_text(new_stack, encoding="utf-8")
    return [*written, stack_file]


@click.command("import")
@click.argument("node")
@click.option("--deployment", default=None, metavar="NAME",
              help="Deployment name for the node's one engine (default: main).")
@click.option("--container", default=None, metavar="NAME",
              help="Import only this container.")
@click.option("--write", is_flag=True,
              help="Write the profiles and the stack entry (never over an existing file).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def import_command(obj: CliContext, node: str, deployment: str | None, container: str | None,
                   write: bool, as_json: bool) -> None:
    """Read the engines (vLLM, llama.cpp) running on NODE, started by `docker run` or a
    compose file of your own, and show the profile and the stack entry that describe each:
    the closest profile in profiles/ plus what differs, checked by rendering it again.
    With --write, write profiles/<node>-<deployment>.yaml and add the deployment, with
    `adopt: <container>`, to the stack file. Exits 1 when an engine cannot be imported."""
    from servefleet.adapters.importer import read_engines
    from servefleet.cli.nodes import _node
    from servefleet.core.adopt import imported_profile
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import SECRET_KEYS, STACK_FILE, load_profiles, load_stack
    from servefleet.sim.engines.vllm_cpu import ENGINE_ENV

    root = obj.project_dir
    target, _ = _node(obj, node)
    profiles, files, raw, problems = load_profiles(root)
    if problems:
        raise ConfigError(problems)
    stack, stack_file, _ = load_stack(root, obj.stack)
    stack_file = STACK_FILE.format(stack=obj.stack)
    secret_names = {*SECRET_KEYS.values(), *(stack.secret_names if stack else ())}
    # A simulated node's engine sets these for its CPU build (servefleet.sim); they are left
    # out of a simulated container's env only.
    running = read_engines(target, secret_names=secret_names, sim_env=set(ENGINE_ENV))
    if container is not None:
        running = [e for e in running if e.container == container]
        if not running:
            raise ConfigError(f"{node}: no engine container named {container!r}")
    deployments = _deployment_names(running, deployment)
    results = [imported_profile(engine, f"{node}-{name}", profiles, raw, files, node=node)
               for engine, name in zip(running, deployments, strict=True)]
    written = _write(root, node, stack_file, results, deployments) if write else []
    if as_json:
        click.echo(json.dumps({
            "node": node, "stack_file": stack_file, "written": written,
            "engines": [_json(r, e, d, node) for r, e, d in
                        zip(results, running, deployments, strict=True)]}, indent=2))
    else:
        _print(node, running, results, deployments, stack_file)
        ready = [r.file for r in results if r.text is not None]
        if written:
            click.echo(f"\nwrote {', '.join(written)}")
        elif ready:
            click.echo(f"\nwould write {', '.join(ready)} and add to {stack_file}: run again "
                       "with --write")
        elif not results:
            click.echo(f"{node}: no vLLM or llama.cpp container found")
    if not results or any(r.refused for r in results):
        raise SystemExit(1)


def _json(result: ImportedProfile, engine: RunningEngine, deployment: str,
          node: str) -> dict[str, Any]:
    return {
        "container": result.container, "engine": result.engine, "image": engine.image,
        "state": engine.state, "profile": result.name, "file": result.file,
        "base": result.base, "text": result.text, "port": result.port,
        "deployment": deployment, "notes": list(result.notes), "refused": result.refused,
        "stack_entry": None if result.text is None else {
            f"servefleet:profiles.{node}": {deployment: {
                "profile": result.name, "port": result.port, "adopt": result.container}}},
    }

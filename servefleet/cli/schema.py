"""``servefleet schema profile|node|stack``: the JSON Schema of a file an operator edits.

Editors use it to complete and check fields as they are typed: the shipped YAML files start
with ``# yaml-language-server: $schema=../schemas/<name>.schema.json`` (VS Code's YAML
extension reads that line). After a model change, regenerate the copies with
``servefleet schema --write`` (writes ``schemas/`` in the project).
"""

from __future__ import annotations

import json

import click

from servefleet.cli.main import CliContext

NAMES = ("profile", "node", "stack")


@click.command("schema")
@click.argument("name", type=click.Choice(NAMES), required=False)
@click.option("--write", is_flag=True,
              help="Write every schema to the project's schemas/ folder instead.")
@click.pass_obj
def schema_command(obj: CliContext, name: str | None, write: bool) -> None:
    """Print the JSON Schema of a profile, node or stack file (for editors: completion,
    descriptions, typos flagged as you type)."""
    from servefleet.core.schema import SCHEMA_FILES, SCHEMAS

    if write == (name is not None):
        raise click.UsageError("give a NAME (profile, node, stack) or --write")
    if name is not None:
        click.echo(json.dumps(SCHEMAS[name](), indent=2, ensure_ascii=False))
        return
    for each, build in SCHEMAS.items():
        path = obj.project_dir / SCHEMA_FILES[each]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n")
        click.echo(f"wrote {path}")

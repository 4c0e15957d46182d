"""``servefleet validate``: load the project for a stack and run every rule.

Findings are printed grouped by file (errors red, warnings yellow, notices dim); ``--json``
prints one JSON object instead. Exit status 1 when any rule reports an error or the project
does not load; warnings alone exit 0.
"""

from __future__ import annotations

import json
from itertools import groupby
from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from rich.console import Console

    from servefleet.core.project import Project
    from servefleet.core.rules import Finding

STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}
"""Style per severity value."""


def _counts(findings: list[Finding]) -> dict[str, int]:
    from servefleet.core.rules import Severity

    return {s.value: sum(1 for f in findings if f.severity is s) for s in Severity}


def _print_report(console: Console, stack: str, findings: list[Finding]) -> None:
    from rich.text import Text


    ordered = sorted(findings, key=lambda f: (f.file, f.severity.rank))
    for file, group in groupby(ordered, key=lambda f: f.file):
        console.print(Text(file, style="bold"))
        for finding in group:
            line = Text("  ")
            line.append(f"{finding.severity.value:<7}", style=STYLES[finding.severity.value])
            line.append(f" {finding.field}: ", style="bold")
            line.append(finding.message)
            line.append(f" ({finding.why})", style="dim")
            line.append("\n          fix: ", style="green")
            line.append(finding.fix)
            line.append(f"  [{finding.rule}]", style="dim")
            console.print(line)
    counts = _counts(findings)
    summary = Text(f"stack {stack}: ")
    summary.append(f"{counts['error']} error(s)",
                   style="bold red" if counts["error"] else "bold green")
    summary.append(f", {counts['warning']} warning(s), {counts['info']} notice(s)")
    console.print(summary)


def _check_gateway(project: Project) -> None:
    """The gateway's routes against the stack's deployments (a :class:`ConfigError` that
    names what the stack serves), when the stack has a gateway."""
    if project.stack.gateway.enabled:
        from servefleet.core.gateway.render import render_gateway

        render_gateway(project)


@click.command("validate")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (findings, counts) instead of the report.")
@click.pass_obj
def validate_command(ctx: CliContext, as_json: bool) -> None:
    """Check the inventory, profiles and stack against every validation rule.

    Exits 1 on any error; warnings and notices alone exit 0.
    """
    from rich.console import Console

    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_project
    from servefleet.core.rules import Severity, validate

    if not as_json:
        project = load_project(ctx.project_dir, ctx.stack)  # ConfigError: one line each
        _check_gateway(project)
        findings = validate(project)
        _print_report(Console(highlight=False, soft_wrap=True), ctx.stack, findings)
    else:
        try:
            project = load_project(ctx.project_dir, ctx.stack)
            _check_gateway(project)
        except ConfigError as error:
            click.echo(json.dumps({"stack": ctx.stack, "ok": False,
                                   "load_errors": error.problems, "findings": []}, indent=2))
            raise SystemExit(error.exit_code) from None
        findings = validate(project)
        counts = _counts(findings)
        click.echo(json.dumps({
            "stack": ctx.stack, "ok": counts["error"] == 0, "load_errors": [],
            "counts": counts, "findings": [f.model_dump(mode="json") for f in findings],
        }, indent=2))
    if any(f.severity is Severity.ERROR for f in findings):
        raise SystemExit(1)

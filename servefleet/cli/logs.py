"""``servefleet logs parse FILE`` (what an engine boot log proves) and ``servefleet logs
NODE [--follow]`` (a node's engine log), one ``logs`` group serving both.

``--json`` prints the one JSON object of the contract in DESIGN.md (the contract keys, then
``extra`` with engine-specific facts, the failure class and the proving lines). Without it,
a table of the stated facts and the lines that decide the outcome. ``FILE`` may be ``-`` for
standard input (``docker logs vllm 2>&1 | servefleet logs parse -``). The exit status is 0
whenever the log could be read; the outcome is in the output.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from servefleet.cli.main import CliContext
from servefleet.cli.node_group import NodeOrSubcommandGroup

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from servefleet.core.bootlog import BootFacts, BootLogParser

# The parser's engine choices, spelled out so that --help need not import the parser
# (pydantic); a test holds them equal to servefleet.core.bootlog.ENGINE_CHOICES.
ENGINE_CHOICES: tuple[str, ...] = ("auto", "vllm", "llama.cpp", "sglang")

_OUTCOME_STYLE = {"ready": "bold green", "failed": "bold red", "incomplete": "bold yellow"}
# Flags whose "no" is the normal case; the table shows them only when set.
_QUIET_WHEN_FALSE = frozenset({"moe_default_config_warning", "mtp_detected", "model_loaded"})


def read_log(path: str, engine: str) -> BootFacts:
    """Parse a log file (``-`` = standard input) in constant memory."""
    from servefleet.core.bootlog import BootLogParser
    from servefleet.core.errors import BootLogError

    parser = BootLogParser(engine)
    try:
        if path == "-":
            _feed(parser, sys.stdin.buffer)
        else:
            with open(path, "rb") as handle:
                _feed(parser, handle)
    except OSError as error:
        raise BootLogError(f"{path}: cannot read the log: {error.strerror or error}") from None
    return parser.close()


def _feed(parser: BootLogParser, stream: BinaryIO) -> None:
    from servefleet.core.bootlog.parser import BLOCK_BYTES

    while block := stream.read(BLOCK_BYTES):
        parser.feed(block)


def _show(value: Any) -> Text:
    from rich.text import Text

    if value is None:
        return Text("—", style="dim")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, float):
        return Text(f"{value:g}")
    if isinstance(value, tuple | list):
        return Text(", ".join(str(item) for item in value))
    if isinstance(value, dict):
        return Text(", ".join(f"{k}={v}" for k, v in value.items() if v not in (None, ())))
    return Text(str(value))


def print_facts(console: Console, path: str, facts: BootFacts) -> None:
    """The readable report: outcome, the facts the log states, the deciding lines."""
    from rich.table import Table
    from rich.text import Text

    from servefleet.core.bootlog import CONTRACT_KEYS

    header = Text(f"{path}: ")
    header.append(facts.engine or "unknown engine", style="bold")
    if facts.engine_version:
        header.append(f" {facts.engine_version}")
    header.append(" — ")
    header.append(facts.outcome, style=_OUTCOME_STYLE[facts.outcome])
    console.print(header)
    if facts.failure_reason:
        reason = Text(f"  {facts.failure_class}: ", style="red")
        reason.append(facts.failure_reason)
        console.print(reason)

    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("fact")
    table.add_column("value")
    table.add_column("line", justify="right", style="dim")
    rows: dict[str, Any] = {k: getattr(facts, k) for k in CONTRACT_KEYS[4:]}
    rows.update(facts.extra_dict())
    for key, value in rows.items():
        if value is None or value == () or (value is False and key not in CONTRACT_KEYS):
            continue
        proof = facts.evidence.get(key)
        table.add_row(key, _show(value), str(proof[0].line) if proof else "")
    console.print(table)
    decisive = facts.evidence.get("outcome", ())
    if decisive:
        console.print(Text("lines that decide the outcome:", style="bold"))
        for item in decisive:
            line = Text(f"  {item.line:>6}  ", style="dim")
            line.append(item.text)
            console.print(line)


@click.command("logs")
@click.argument("node")
@click.option("--deployment", "-d", default="main", show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep streaming new lines (Ctrl-C stops).")
@click.option("--tail", default=200, show_default=True, help="Lines of history to show.")
@click.pass_obj
def node_logs_command(obj: CliContext, node: str, deployment: str, follow: bool,
                      tail: int) -> None:
    """Print the engine log of NODE's deployment (stdout and stderr, as written)."""
    from servefleet.adapters import rollout
    from servefleet.cli.rollout_common import node_secrets
    from servefleet.core.project import load_project

    project = load_project(obj.project_dir, obj.stack)
    try:
        for line in rollout.stream_logs(project, node, deployment, follow=follow, tail=tail,
                                        secrets=node_secrets(project, node)):
            click.echo(line)
    except KeyboardInterrupt:
        pass


@click.group("logs", cls=NodeOrSubcommandGroup, node_command=node_logs_command,
             usage="NODE [--follow] | COMMAND [ARGS]...")
def logs_group() -> None:
    """Read engine boot logs (vLLM, SGLang, llama.cpp).

    ``logs NODE [--follow]`` prints a node's engine log.
    """


@logs_group.command("parse")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--engine", type=click.Choice(ENGINE_CHOICES), default="auto", show_default=True,
              help="Engine that wrote the log; auto detects it from the content.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the contract's JSON object instead of a table.")
def parse_command(file: str, engine: str, as_json: bool) -> None:
    """Parse FILE (or - for stdin) and print the facts it proves: KV-cache size,
    CUDA-graph mode, load times, speculative decoding, and whether the engine became
    ready or failed (with the line that proves it)."""
    facts = read_log(file, engine)
    if as_json:
        click.echo(json.dumps(facts.to_json_dict(), indent=2, ensure_ascii=False))
    else:
        from rich.console import Console

        print_facts(Console(highlight=False, soft_wrap=True), file, facts)

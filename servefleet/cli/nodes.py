"""Node-level commands: ``probe`` (GPU, driver, CUDA against the inventory) and ``keyscan``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from servefleet.core.models import Node


def _node(obj: CliContext, name: str) -> tuple[Node, str]:
    """The node and its inventory file; a node whose file did not load is refused with
    that file's errors, not as unknown."""
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_nodes, unloaded_nodes
    from servefleet.core.suggest import unknown_name

    nodes, files, problems = load_nodes(obj.project_dir)
    if name not in nodes:
        unloaded = unloaded_nodes(obj.project_dir, nodes, problems)
        if name in unloaded:
            raise ConfigError(unloaded[name])
        raise ConfigError([*problems, unknown_name("node", name, nodes, "nodes/")])
    return nodes[name], files[name]


@click.command("probe")
@click.argument("node")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def probe_command(obj: CliContext, node: str, as_json: bool) -> None:
    """Read NODE's GPUs, driver and CUDA (NVML, else nvidia-smi) and compare with the
    inventory. Exits 1 when anything differs with severity error."""
    from rich.console import Console
    from rich.table import Table

    from servefleet.adapters.gpu_probe import run_probe
    from servefleet.adapters.runtime import connect
    from servefleet.core.gpu import compare_with_inventory, foreign_processes

    target, _ = _node(obj, node)
    with connect(target) as transport:
        def run_remote(argv: Sequence[str], stdin: bytes) -> tuple[int, bytes, bytes]:
            done = transport.run(argv, stdin=stdin, check=False, timeout=60,
                                 what="GPU probe")
            return done.exit_status, done.stdout, done.stderr

        result = run_probe(run_remote, node=target.name, cuda=True)
    mismatches = [*compare_with_inventory(result, target.expected_gpu_facts()),
                  *foreign_processes(result)]
    failed = any(m.severity == "error" for m in mismatches)
    if as_json:
        click.echo(json.dumps({
            "node": target.name,
            "probe": result.model_dump(mode="json"),
            "mismatches": [m.model_dump(mode="json") for m in mismatches],
            "ok": not failed,
        }, indent=2))
    else:
        console = Console()
        console.print(f"[bold]{target.name}[/]: source {result.source}, driver "
                      f"{result.driver_version or '?'}, CUDA {result.cuda_driver_version or '?'}")
        table = Table("GPU", "name", "compute capability", "memory total (GiB)",
                      "as CUDA reports it (GiB)", "processes")
        cuda = {c.index: c for c in result.cuda_memory or ()}
        for gpu in result.gpus:
            total, _free = result.gpu_memory(gpu)
            reading = cuda.get(gpu.index)
            table.add_row(str(gpu.index), gpu.name, gpu.compute_capability or "?",
                          f"{total / 2**30:.1f}" if total else "?",
                          f"{reading.total_bytes / 2**30:.2f} ({reading.free_bytes / 2**30:.2f}"
                          " free)" if reading else "?", str(len(gpu.processes)))
        console.print(table)
        for error in result.errors:
            console.print(f"[yellow]probe: {error}[/]")
        for mismatch in mismatches:
            colour = "red" if mismatch.severity == "error" else "yellow"
            console.print(f"[{colour}]{mismatch.severity}[/]: {mismatch.field}: "
                          f"{mismatch.message}")
        if not mismatches:
            console.print("[green]matches the inventory[/]")
    if failed:
        raise SystemExit(1)


@click.command("keyscan")
@click.argument("node")
@click.option("--type", "key_type", default="ssh-ed25519", show_default=True,
              type=click.Choice(["ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512"]))
@click.pass_obj
def keyscan_command(obj: CliContext, node: str, key_type: str) -> None:
    """Print NODE's SSH host key line (stdout) and its fingerprint (stderr) for pinning.

    Compare the fingerprint with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the
    node's console before pasting the line under ssh.host_keys in its inventory file:
    servefleet never trusts a key on first use. A line `ssh-keyscan` prints (host name
    first) is accepted there too.
    """
    from servefleet.adapters.keyscan import scan_host_key

    target, file = _node(obj, node)
    scanned = scan_host_key(target, key_type)
    click.echo(f"# {node}: fingerprint {scanned.fingerprint}: check it on the node's console "
               "(`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), then paste the line "
               f"below under ssh.host_keys in {file}", err=True)
    click.echo(scanned.line)

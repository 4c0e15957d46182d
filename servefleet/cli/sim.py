"""``servefleet sim up | down | status``: the simulated fleet on this machine."""

from __future__ import annotations

import json
import time

import click

from servefleet.cli.main import CliContext

MAX_NODES = 250
"""``--nodes``' upper bound, spelled out so that --help need not import the fleet; a test
holds it equal to :data:`servefleet.sim.spec.MAX_NODES`."""


def _say(message: str) -> None:
    click.echo(f"sim: {message}", err=True)


@click.group("sim")
def sim() -> None:
    """The simulated fleet: nodes in network namespaces with real sshd and Docker Engine.

    Needs root. State lives in $SERVEFLEET_SIM_DIR (default /var/lib/servefleet-sim); the
    inventory of the running nodes is written to <project>/nodes/sim.
    """


@sim.command("up")
@click.option("--nodes", "count", type=click.IntRange(1, MAX_NODES), default=3,
              show_default=True,
              help="How many nodes: the reference fleet (sim-spark-1, sim-spark-2, sim-5090) "
                   "first, then sim-node-4, sim-node-5, …")
@click.option("--sshd-only", is_flag=True,
              help="Start no Docker Engine on the nodes (SSH benchmarks with many nodes).")
@click.pass_obj
def up(ctx: CliContext, count: int, sshd_only: bool) -> None:
    """Start the simulated nodes (a quick check when they already run)."""
    from servefleet.sim import fleet
    from servefleet.sim.spec import fleet_specs

    started = time.monotonic()
    current = fleet.up(fleet_specs(count, sshd_only=sshd_only), project_dir=ctx.project_dir,
                       say=_say)
    for node in sorted(current.nodes.values(), key=lambda n: n.spec.index):
        engine = "sshd + dockerd" if node.spec.docker else "sshd only"
        click.echo(f"{node.spec.name:<14} {node.spec.address:<12} {engine}")
    _say(f"ready in {time.monotonic() - started:.1f} s; inventory in "
         f"{ctx.project_dir / 'nodes' / 'sim'}")


@sim.command("down")
@click.option("--purge", is_flag=True,
              help="Also delete the state folder: keys, node data and the image store.")
def down(purge: bool) -> None:
    """Stop every node `up` started and remove its namespace (idempotent)."""
    from servefleet.sim import fleet

    stopped = fleet.down(purge=purge, say=_say)
    _say(f"stopped {len(stopped)} node(s)" if stopped else "nothing was running")


@sim.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def status(as_json: bool) -> None:
    """List the nodes and what runs on them."""
    from servefleet.sim import fleet

    report = fleet.status()
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    if not report["nodes"]:
        click.echo("no simulated node is running")
        return
    for node in report["nodes"]:
        health = "up" if node["running"] else "DOWN"
        click.echo(f"{node['name']:<14} {node['address']:<12} {health:<5} "
                   f"sshd={node['sshd_pid'] or '-'} "
                   f"dockerd={node['dockerd_pid'] or ('-' if node['docker'] else 'n/a')}")
        for container in node["containers"]:
            click.echo(f"    {container['name']:<30} {container['image']:<45} "
                       f"{container['status']}")

"""``servefleet doctor [NODES...]``: is each node ready to run engines, and if not, what to do.

One SSH round trip per node (nodes in parallel) gathers every fact
(:mod:`servefleet.adapters.doctor`); :mod:`servefleet.core.doctor` parses and judges them.
Each line is ``pass``, ``warn`` or ``fail`` with the fix. A node that cannot be reached, or
whose host key differs from the pinned one, is one failed line. Exit status 0 when nothing
failed (warnings allowed), 1 otherwise.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from servefleet.core.doctor import Check, DoctorFacts, DoctorSettings, StagedHere
    from servefleet.core.models import Node

MAX_PARALLEL = 16
_COLOURS = {"pass": "green", "warn": "yellow", "fail": "red"}


def _chosen_nodes(obj: CliContext, names: tuple[str, ...]
                  ) -> tuple[list[Node], dict[str, str], dict[str, dict[int, tuple[str, ...]]]
                             | None, str]:
    """The nodes to check (NODES, else the stack's, else every node of the inventory),
    their inventory files, the ports the stack places on each (``None``: the stack did not
    load) and the stack file."""
    from servefleet.core.doctor import placed_ports
    from servefleet.core.errors import ConfigError
    from servefleet.core.project import load_nodes, load_stack, unloaded_nodes
    from servefleet.core.suggest import unknown_name

    root = obj.project_dir
    nodes, files, problems = load_nodes(root)
    stack, stack_file, _stack_problems = load_stack(root, obj.stack)
    if names:
        wanted = list(dict.fromkeys(names))
    elif stack is not None and (stack.nodes or stack.multi_node):
        wanted = list(dict.fromkeys([*stack.nodes,
                                     *(n for m in stack.multi_node for n in m.nodes)]))
    else:
        wanted = list(nodes)
    missing = [n for n in wanted if n not in nodes]
    if missing:
        unloaded = unloaded_nodes(root, nodes, problems)
        raise ConfigError([*(p for n in missing if n in unloaded for p in unloaded[n]),
                           *(unknown_name("node", n, nodes, "nodes/") for n in missing
                             if n not in unloaded)])
    if not wanted:
        raise ConfigError(f"no nodes in {root / 'nodes'}: add one (nodes/NAME.yaml) or run "
                          "`sudo servefleet sim up` for the simulated fleet")
    chosen = [nodes[n] for n in wanted]
    placements = None if stack is None else {n.name: placed_ports(stack, n) for n in chosen}
    return chosen, files, placements, stack_file


def _staged(obj: CliContext, chosen: list[Node]) -> dict[str, dict[str, StagedHere]]:
    """Node → disk kind → the weights the stack stages there; empty where the stack or
    the profiles do not load (``validate`` says why; the other checks still run)."""
    from servefleet.core.doctor import staged_weights
    from servefleet.core.project import load_profiles, load_stack

    stack, _, _ = load_stack(obj.project_dir, obj.stack)
    if stack is None:
        return {}
    profiles = load_profiles(obj.project_dir)[0]
    return {node.name: staged_weights(stack, node, profiles) for node in chosen}


def _examine(node: Node, inventory_file: str, placed: dict[int, tuple[str, ...]] | None,
             stack_file: str, settings: DoctorSettings, gpu_image: str | None,
             staged: dict[str, StagedHere] | None = None,
             ) -> tuple[list[Check], DoctorFacts | None]:
    """One node: the round trip, then the verdicts."""
    from servefleet.adapters.doctor import read_node
    from servefleet.core.doctor import Check, GpuContainer, judge, parse_doctor, ssh_failed
    from servefleet.sim.doctor import gpu_container

    gpu = gpu_container(node) or GpuContainer()
    if gpu_image:
        gpu = gpu.model_copy(update={"image": gpu_image})
    reading = read_node(node, gpu, sorted(placed or {}),
                        gpu_timeout_seconds=settings.gpu_timeout_seconds)
    if reading.failure is not None or reading.trip is None:
        return [ssh_failed(node, reading.failure or "unreachable", reading.message,
                           inventory_file)], None
    facts = parse_doctor(reading.text)
    checks = judge(node, facts, trip=reading.trip, gpu=gpu, placements=placed or {},
                   settings=settings, inventory_file=inventory_file, stack_file=stack_file,
                   staged=staged)
    if placed is None:
        checks.append(Check(check="ports", verdict="warn",
                            detail=f"not checked: {stack_file} did not load",
                            fix="`servefleet validate` says why"))
    elif not placed:
        checks.append(Check(check="ports", verdict="pass",
                            detail=f"{stack_file} places no deployment on this node"))
    return checks, facts


@click.command("doctor")
@click.argument("nodes", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--min-free-images-gib", type=click.FloatRange(min=0), default=20.0,
              show_default=True, help="Free space needed under Docker's root dir.")
@click.option("--min-free-weights-gib", type=click.FloatRange(min=0), default=50.0,
              show_default=True, help="Free space needed for the HF cache and models dir.")
@click.option("--gpu-image", default=None, metavar="IMAGE",
              help="Image of the one-shot GPU container [default: ubuntu:24.04].")
@click.option("--gpu-timeout", type=click.FloatRange(min=1), default=120.0,
              show_default=True, help="Seconds the GPU container may take (a pull included).")
@click.pass_obj
def doctor_command(obj: CliContext, nodes: tuple[str, ...], as_json: bool,
                   min_free_images_gib: float, min_free_weights_gib: float,
                   gpu_image: str | None, gpu_timeout: float) -> None:
    """Check that NODES (default: the stack's) have everything servefleet needs: SSH with
    the pinned host key, Docker and Compose, the NVIDIA runtime (a one-shot GPU container),
    the SSH user's docker access, free disk for images and weights, a writable base_dir,
    the stack's ports free, the fast link up, and the clock in step. One SSH round trip per
    node; each line says pass, warn or fail, with the fix. Exits 1 when anything failed."""
    from servefleet.core.doctor import DoctorSettings, failed, line

    chosen, files, placements, stack_file = _chosen_nodes(obj, nodes)
    staged = _staged(obj, chosen)
    settings = DoctorSettings(min_free_images_gib=min_free_images_gib,
                              min_free_weights_gib=min_free_weights_gib,
                              gpu_timeout_seconds=gpu_timeout)
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(chosen))) as pool:
        results = list(pool.map(
            lambda n: _examine(n, files[n.name],
                               None if placements is None else placements[n.name],
                               stack_file, settings, gpu_image, staged.get(n.name)), chosen))
    any_failed = any(failed(checks) for checks, _ in results)
    if as_json:
        click.echo(json.dumps({
            "ok": not any_failed,
            "nodes": [{"node": node.name, "ok": not failed(checks),
                       "checks": [c.model_dump(mode="json") for c in checks],
                       "facts": facts.model_dump(mode="json") if facts else None}
                      for node, (checks, facts) in zip(chosen, results, strict=True)],
        }, indent=2))
    else:
        for node, (checks, _) in zip(chosen, results, strict=True):
            bad = failed(checks)
            click.secho(f"{node.name} ({node.ssh.user}@{node.address}:{node.ssh.port})",
                        bold=True, fg="red" if bad else None)
            for check in checks:
                click.secho("  " + line(check), fg=_COLOURS[check.verdict])
        failures = sum(c.verdict == "fail" for checks, _ in results for c in checks)
        warnings = sum(c.verdict == "warn" for checks, _ in results for c in checks)
        ready = sum(not failed(checks) for checks, _ in results)
        click.secho(f"{ready} of {len(chosen)} node(s) ready; {failures} failure(s), "
                    f"{warnings} warning(s)", fg="red" if any_failed else
                    "yellow" if warnings else "green")
    if any_failed:
        raise SystemExit(1)

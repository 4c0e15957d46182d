"""Node-level rules: SSH trust, ports, and GPU memory as CUDA reports it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from servefleet.core.gpu.known import TABLE_SOURCE_PREFIX, known_gpu
from servefleet.core.hostkeys import pin_advice
from servefleet.core.rules.base import Issue, NodeContext, Placement, Severity, node_rule


@node_rule("ssh-host-key-not-pinned", Severity.WARNING)
def ssh_host_key_not_pinned(ctx: NodeContext) -> Iterator[Issue]:
    """No host key pinned: servefleet refuses to connect (no trust on first use)."""
    node = ctx.node
    if node.ssh.host_keys:
        return
    yield Issue(
        field="ssh.host_keys", value=[],
        message=(f"no host key is pinned for {node.name} (host_keys: []): servefleet will "
                 f"refuse to connect to {node.address} until one is, because it never trusts "
                 "a key on first use"),
        why="SSH host keys are pinned in the inventory; an unknown key could be a "
            "man-in-the-middle",
        fix=pin_advice(node.name, node.address),
    )


def _port_path(placement: Placement) -> str:
    return f"{placement.stack_path}.port"


def _port_note(placement: Placement) -> str:
    return "" if placement.deployment.port is not None else " (the node's first port, by default)"


@node_rule("port-clash", Severity.ERROR)
def port_clash(ctx: NodeContext) -> Iterator[Issue]:
    """Two deployments on one node listen on the same port."""
    by_port: dict[int, list[Placement]] = defaultdict(list)
    for placement in ctx.placements:
        by_port[placement.port].append(placement)
    for port, placements in by_port.items():
        if len(placements) < 2:
            continue
        names = ", ".join(p.deployment.name for p in placements)
        for placement in placements[1:]:
            yield Issue(
                file=ctx.stack_file, field=_port_path(placement), value=port,
                message=(f"{port}{_port_note(placement)} is used by several deployments on "
                         f"{ctx.node.name} ({names}): the second engine cannot bind it"),
                why="engines use host networking; one port, one listener",
                fix=(f"give deployment {placement.deployment.name} another port from the "
                     f"node's ports ({', '.join(map(str, ctx.node.ports))})"),
            )


@node_rule("port-not-on-node", Severity.ERROR)
def port_not_on_node(ctx: NodeContext) -> Iterator[Issue]:
    """A deployment's port is not among the node's ``ports``."""
    for placement in ctx.placements:
        if placement.port in ctx.node.ports:
            continue
        yield Issue(
            file=ctx.stack_file, field=_port_path(placement), value=placement.port,
            message=(f"{placement.port} is not one of {ctx.node.name}'s ports "
                     f"({', '.join(map(str, ctx.node.ports))} in {ctx.node_file})"),
            why="the inventory's ports are the ones the node's firewall and probes expect",
            fix=(f"use one of {', '.join(map(str, ctx.node.ports))}, or add "
                 f"{placement.port} to ports in {ctx.node_file}"),
        )


@node_rule("gpu-memory-from-table", Severity.WARNING)
def gpu_memory_from_table(ctx: NodeContext) -> Iterator[Issue]:
    """A known GPU written without CUDA's figure: planned from the known-GPU table, which is
    another box's reading, not this one's."""
    for index, gpu in enumerate(ctx.node.gpus):
        row = known_gpu(gpu.name)
        if row is None or not (gpu.memory_source or "").startswith(TABLE_SOURCE_PREFIX):
            continue
        box = (f"memory_gib {gpu.memory_gib:g} is the {gpu.name}'s figure on the box"
               if abs(gpu.memory_gib - row.marketing_gib) < 0.5 else
               f"memory_gib is {gpu.memory_gib:g}")
        unified = " and its memory is unified with the host's" if gpu.unified_memory else ""
        yield Issue(
            file=ctx.node_file, field=f"gpus[{index}].cuda_memory_gib", value=None,
            message=(f"{box}; CUDA reports {row.cuda_memory_gib:g} GiB of it{unified}, so "
                     f"servefleet plans {ctx.node.name} from that "
                     f"({row.source})"),
            why="vLLM sizes the KV pool against the memory CUDA reports, not the box's "
                "figure; planning from the box over-plans every pool",
            fix=(f"measure this node: `servefleet probe {ctx.node.name}` and set "
                 f"cuda_memory_gib{' and boot_free_gib' if row.unified_memory else ''} "
                 "from it, with memory_source saying so"),
        )

"""Node-level rules: SSH trust and ports."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

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

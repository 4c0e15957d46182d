"""A simulated node's network: its own namespace, joined to the host by a veth pair.

The node side is called ``eth0`` and holds 10.77.<index>.2/30; the host side (``sfsim<index>``)
holds 10.77.<index>.1/30, so the host reaches every node directly and a process on a node
sees only its own address. Two nodes can therefore both serve on port 8000. Nodes reach each
other through the host (a route to 10.77.0.0/16 and IPv4 forwarding), as a fleet's nodes
share a network.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from servefleet.core.errors import SimError
from servefleet.sim.spec import NodeSpec

NETNS_DIR = Path("/var/run/netns")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise SimError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def exists(netns: str) -> bool:
    """Whether the named network namespace exists."""
    return (NETNS_DIR / netns).exists()


def link_exists(name: str) -> bool:
    """Whether a network interface of that name exists in the host namespace."""
    return Path("/sys/class/net", name).exists()


def ensure_free(spec: NodeSpec) -> None:
    """Refuse a node whose namespace or host interface name exists already: the fleet did not
    record it, so it is someone else's, and it must not be touched."""
    for what, taken in (("network namespace", exists(spec.netns) and spec.netns),
                        ("network interface", link_exists(spec.host_veth) and spec.host_veth)):
        if taken:
            raise SimError(f"{spec.name}: {what} {taken} exists but this fleet did not start "
                           "it; remove it (or run `servefleet sim down` with the state folder "
                           "that started it)")


FLEET_NETWORK = "10.77.0.0/16"
"""Every node's address is in it (10.77.<index>.2)."""
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def enable_forwarding() -> None:
    """Let this machine route between the nodes' veths (what Docker does on its hosts)."""
    try:
        if IP_FORWARD.read_text().strip() != "1":
            IP_FORWARD.write_text("1\n")
    except OSError as error:
        raise SimError(f"cannot enable IPv4 forwarding between the simulated nodes "
                       f"({IP_FORWARD}: {error})") from None


def create(spec: NodeSpec) -> None:
    """Create the node's namespace and veth pair (after :func:`ensure_free`)."""
    _ip("netns", "add", spec.netns)
    try:
        # The peer is created directly inside the namespace under its final name.
        _ip("link", "add", spec.host_veth, "type", "veth", "peer", "name", "eth0",
            "netns", spec.netns)
        _ip("addr", "add", f"{spec.host_address}/30", "dev", spec.host_veth)
        _ip("link", "set", spec.host_veth, "up")
        _ip("-n", spec.netns, "addr", "add", f"{spec.address}/30", "dev", "eth0")
        _ip("-n", spec.netns, "link", "set", "eth0", "up")
        _ip("-n", spec.netns, "link", "set", "lo", "up")
        # Nodes reach each other through this machine, as a fleet's nodes share a network
        # (an engine spanning two nodes connects its ranks over it).
        _ip("-n", spec.netns, "route", "add", FLEET_NETWORK, "via", spec.host_address)
        enable_forwarding()
    except SimError:
        remove(spec.netns, spec.host_veth)
        raise


def remove(netns: str, host_veth: str) -> None:
    """Delete the veth pair and the namespace; no error when they are already gone."""
    if link_exists(host_veth):
        # Deleting one end of a veth pair deletes both.
        _ip("link", "del", host_veth, check=False)
    if exists(netns):
        _ip("netns", "del", netns)

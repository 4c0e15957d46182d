"""Staged weights copied from a neighbour: a node of the fleet that already holds them,
verified, sends them over SSH with rsync (over the fast link when both nodes name one),
instead of the node fetching them again from the internet.

The copy is pulled by the node that needs the weights, with a key made for this one copy:
``ssh-keygen`` makes it on that node (the private half never leaves it), the neighbour's
authorized keys get its public half restricted to that node's addresses (``restrict,
from=…``), the neighbour's host key is the one pinned in the inventory (no trust on first
use), and both are removed when the copy ends, whatever the outcome. rsync keeps partial
files in its own folder, so a cut copy never leaves a file under its final name. The
fetcher then runs as always: a copied file is verified by its sha256 here, a copied
snapshot carries the neighbour's verification record (rsync checked every byte against
the neighbour's). Any failure falls back to the hub.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from servefleet.adapters.remote import _sh
from servefleet.adapters.runtime import Transport
from servefleet.core.errors import ServefleetError
from servefleet.core.models import Node, Profile
from servefleet.core.render.weights import WeightsSpec, cache_folder, weights_for

OpenPeer = Callable[[Node], AbstractContextManager[Transport]]
"""Opens a neighbour's SSH connection (the rollout's transport factory, secrets masked)."""
COPY_TIMEOUT_SECONDS = 4 * 3600
"""35 GB over a 1 Gb/s link takes five minutes; a copy past this is cut and the hub used."""

# On the neighbour: the files to send, relative to the folder (one per line), with the
# total bytes first; nothing when it does not hold the weights verified.
HOLDS_SCRIPT = r"""
kind=$1; folder=$2; repo=$3; revision=$4; name=$5; sha=$6
cd -P "$folder" 2>/dev/null || exit 0
if [ "$kind" = snapshot ]; then
    record="servefleet/verified/$repo@$revision.json"
    snapshot="hub/$repo/snapshots/$revision"
    [ -f "$record" ] && [ -d "$snapshot" ] || exit 0
    total=0
    list=$(find "$snapshot" -type l | while IFS= read -r link; do
        blob=$(readlink -f "$link") || exit 1
        [ -f "$blob" ] || exit 1
        printf '%s\n%s\n' "$link" "${blob#"$PWD"/}"
    done) || exit 0
    for path in $(printf '%s\n' "$list" | grep '/blobs/'); do
        total=$((total + $(stat -c %s "$path")))
    done
    echo "total $total"
    echo "$record"
    printf '%s\n' "$list"
else
    [ -f ".servefleet/$name.verified" ] && [ -f "$name" ] || exit 0
    [ "$(cut -d' ' -f1 ".servefleet/$name.verified")" = "$sha" ] || exit 0
    echo "total $(stat -c %s "$name")"
    echo "$name"
fi
"""
KEYGEN_SCRIPT = (
    'd=$(mktemp -d /tmp/servefleet-peer.XXXXXX) && '
    'ssh-keygen -q -t ed25519 -N "" -C "$1" -f "$d/key" && cat "$d/key.pub" && echo "$d"'
)
AUTHORIZE_SCRIPT = (
    'f=${1:-$HOME/.ssh/authorized_keys}; mkdir -p "$(dirname "$f")" && umask 077 && '
    'printf "%s\\n" "$2" >> "$f"'
)
REVOKE_SCRIPT = (
    # Written back in place (cat, not mv): the file keeps its owner, mode and inode.
    'f=${1:-$HOME/.ssh/authorized_keys}; [ -f "$f" ] || exit 0; '
    't=$(mktemp) && grep -v -F -- "$2" "$f" > "$t"; cat "$t" > "$f"; rm -f "$t"'
)
RSYNC_SCRIPT = (
    'd=$1; printf "%s\\n" "$2" > "$d/known_hosts"; '
    'rsync -a --partial-dir=.rsync-partial --files-from=- '
    '-e "ssh -i $d/key -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes '
    '-o UserKnownHostsFile=$d/known_hosts -p $3 -l $4" "$5:$6/" "$7/"'
)


@dataclass(frozen=True)
class Holder:
    """A neighbour that holds the weights verified, and what to copy from it."""

    node: Node
    spec: WeightsSpec
    files: tuple[str, ...]
    """Paths relative to ``spec.host_folder`` (links, blobs, the record)."""
    size: int
    """Bytes to copy."""


def _ips(*addresses: str | None) -> list[str]:
    found = []
    for address in addresses:
        with contextlib.suppress(ValueError):
            if address:
                found.append(str(ipaddress.ip_address(address)))
    return found


def _route(source: Node, dest: Node) -> tuple[str, str]:
    """(the neighbour's address to copy from, how to name it): its fast-link address when
    both nodes are on that link."""
    if source.fast_link is not None and dest.fast_link is not None:
        return source.fast_link.address, "fast link"
    return source.address, "network"


def _known_hosts(node: Node, address: str) -> str:
    host = address if node.ssh.port == 22 else f"[{address}]:{node.ssh.port}"
    return "\n".join(f"{host} {' '.join(key.split()[:2])}" for key in node.ssh.host_keys)


def _holds(transport: Transport, spec: WeightsSpec) -> tuple[int, tuple[str, ...]] | None:
    """(bytes, files) of the weights the node holds verified, or ``None``."""
    done = transport.run(_sh(HOLDS_SCRIPT, spec.kind, spec.host_folder,
                             cache_folder(spec.repo) if spec.repo else "", spec.revision or "",
                             spec.file_name or "", spec.sha256 or ""),
                         idempotent=True, what="look for staged weights")
    lines = done.text().splitlines()
    if not lines or not lines[0].startswith("total "):
        return None
    return int(lines[0].split()[1]), tuple(lines[1:])


FREE_SCRIPT = (
    # The folder may not exist yet: its nearest existing parent is on the same filesystem.
    'd=$1; while [ ! -d "$d" ]; do d=$(dirname "$d"); done; '
    'df -Pk "$d" | awk \'NR == 2 { printf "%.0f\\n", $4 * 1024 }\''
)
SPARE_BYTES = 1 << 30
"""What the fetchers keep free (see fetch_snapshot.py)."""


def _free_bytes(transport: Transport, folder: str) -> int | None:
    """Free bytes on the filesystem of ``folder`` on the node, if ``df`` says."""
    text = transport.run(_sh(FREE_SCRIPT, folder), idempotent=True,
                         what="read the free disk space").text().strip()
    return int(text) if text.isdigit() else None


@dataclass
class PeerCopy:
    """Copies a release's weights from the fleet's other nodes (see the module docstring)."""

    nodes: Sequence[Node]
    """Every node of the inventory."""
    open_peer: OpenPeer

    def candidates(self, node: Node, profile: Profile) -> Iterator[tuple[Node, WeightsSpec]]:
        """The other nodes (fast-linked ones first) and where each would hold the weights;
        a simulated node only has simulated neighbours."""
        for peer in sorted(self.nodes, key=lambda n: (n.fast_link is None, n.name)):
            if peer.name == node.name or peer.simulated != node.simulated:
                continue
            spec = weights_for(profile, peer)
            if spec is not None:
                yield peer, spec

    def held(self, transport: Transport, spec: WeightsSpec) -> bool:
        """Whether this node already holds the weights verified (then nothing is copied)."""
        return _holds(transport, spec) is not None

    def find(self, node: Node, profile: Profile) -> Holder | None:
        """The first neighbour that holds the weights verified (unreachable ones skipped)."""
        for peer, spec in self.candidates(node, profile):
            try:
                with self.open_peer(peer) as transport:
                    found = _holds(transport, spec)
            except ServefleetError:
                continue
            if found is not None:
                return Holder(peer, spec, found[1], found[0])
        return None

    def source(self, transport: Transport, profile: Profile, spec: WeightsSpec) -> str:
        """Where a deploy would take the weights from, and whether they fit the disk (for
        ``plan``): already here, a neighbour, or the hub."""
        hub = spec.hub_source
        try:
            if self.held(transport, spec):
                return "already on the node, verified"
            holder = self.find(transport.node, profile)
            free = _free_bytes(transport, spec.host_folder)
        except ServefleetError as error:
            return f"{hub} (the nodes could not be asked: {error})"
        if holder is not None:
            where = (f"copied from {holder.node.name} over the "
                     f"{_route(holder.node, transport.node)[1]}")
            need: float | None = holder.size
        else:
            where, weights_gib = hub, profile.model.weights_gib
            need = weights_gib * (1 << 30) if weights_gib else None
        if free is None:
            return where
        room = f"{free / (1 << 30):.1f} GiB free in {spec.host_folder}"
        if need is not None and need > free - SPARE_BYTES:
            return (f"{where} (about {need / (1 << 30):.1f} GiB; only {room}, with 1 GiB "
                    "kept spare: the staging will refuse to start; free space, or prune "
                    "with `servefleet models NODE --prune`)")
        return f"{where} ({room})"

    def copy(self, transport: Transport, spec: WeightsSpec, holder: Holder,
             say: Callable[[str], None]) -> None:
        """Pull ``holder``'s files into this node's folder with a one-copy key."""
        node = transport.node
        address, via = _route(holder.node, node)
        say(f"copying {holder.size} bytes from {holder.node.name} over the {via} ({address})")
        nonce = f"servefleet-weights-{secrets.token_hex(6)}"
        made = transport.run(_sh(KEYGEN_SCRIPT, nonce), what="make a one-copy key").text()
        public, folder = made.strip().splitlines()[-2:]
        allowed = _ips(node.address, node.fast_link.address if node.fast_link else None)
        options = "restrict" + (f',from="{",".join(allowed)}"' if allowed else "")
        keys_file = holder.node.ssh.authorized_keys or ""
        started = time.monotonic()
        try:
            with self.open_peer(holder.node) as peer:
                peer.run(_sh(AUTHORIZE_SCRIPT, keys_file, f"{options} {public}"),
                         what="allow the one-copy key")
                try:
                    transport.run(_sh(RSYNC_SCRIPT, folder, _known_hosts(holder.node, address),
                                      str(holder.node.ssh.port), holder.node.ssh.user,
                                      address, holder.spec.host_folder, spec.host_folder),
                                  stdin=("\n".join(holder.files) + "\n").encode(),
                                  timeout=COPY_TIMEOUT_SECONDS,
                                  what=f"copy the weights from {holder.node.name}")
                finally:
                    peer.run(_sh(REVOKE_SCRIPT, keys_file, nonce), idempotent=True,
                             what="remove the one-copy key")
        finally:
            with contextlib.suppress(ServefleetError):
                transport.run(["rm", "-rf", "--", folder], idempotent=True,
                              what="remove the one-copy key")
        seconds = max(time.monotonic() - started, 1e-3)
        say(f"copied from {holder.node.name} in {seconds:.1f} s "
            f"({holder.size / seconds / (1 << 20):.1f} MiB/s)")

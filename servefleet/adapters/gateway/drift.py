"""The running gateway against git: the release ``current`` names, its files as they are on
the node, and whether HAProxy runs (``servefleet drift``)."""

from __future__ import annotations

import hashlib

from servefleet.adapters import remote
from servefleet.adapters.runtime import Transport
from servefleet.core.drift.items import DriftItem, DriftKind
from servefleet.core.gateway.render import RenderedGateway
from servefleet.core.gateway.routes import GATEWAY_DEPLOYMENT

SCRIPT = (
    'dir=$1; project=$2; shift 2; '
    'echo "release=$(readlink "$dir/' + remote.CURRENT + '" 2>/dev/null | sed "s#.*/##")"; '
    'echo "running=$(docker ps -q --filter "label=' + remote.COMPOSE_PROJECT_LABEL
    + '=$project" --filter status=running | head -n1)"; '
    'cd "$dir/' + remote.CURRENT + '" 2>/dev/null && sha256sum "$@" 2>/dev/null; true'
)


def gateway_drift(rendered: RenderedGateway, transport: Transport) -> list[DriftItem]:
    """What differs between the rendered gateway and its node (nothing: an empty list)."""
    names = sorted(rendered.files)
    text = transport.run(["sh", "-c", SCRIPT, "sh",
                          remote.deployment_dir(transport.node.base_dir, GATEWAY_DEPLOYMENT),
                          remote.compose_project(GATEWAY_DEPLOYMENT), *names],
                         idempotent=True, what="read the gateway's state").text()
    facts: dict[str, str] = {}
    hashes: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(("release=", "running=")):
            key, _, value = line.partition("=")
            facts[key] = value.strip()
        elif "  " in line:
            digest, _, name = line.partition("  ")
            hashes[name.strip()] = digest.strip()
    node = rendered.node
    items: list[DriftItem] = []
    release = facts.get("release") or None
    if release != rendered.release_id:
        items.append(DriftItem(
            node=node, deployment=GATEWAY_DEPLOYMENT, kind=DriftKind.RELEASE,
            expected=rendered.release_id, observed=release,
            message=f"the gateway runs release {release or 'none'}, git renders "
                    f"{rendered.release_id}: servefleet gateway deploy (or pulumi up)"))
    else:
        for name in names:
            want = hashlib.sha256(rendered.files[name]).hexdigest()
            if hashes.get(name) != want:
                items.append(DriftItem(
                    node=node, deployment=GATEWAY_DEPLOYMENT, kind=DriftKind.FILE_HASH,
                    subject=name, expected=want[:12], observed=(hashes.get(name) or "")[:12]
                    or None, message=f"the gateway's {name} was changed on the node: "
                                     "servefleet gateway deploy puts git's back"))
    if not facts.get("running"):
        items.append(DriftItem(
            node=node, deployment=GATEWAY_DEPLOYMENT, kind=DriftKind.CONTAINER_MISSING,
            expected="running", observed=None,
            message="HAProxy does not run: servefleet gateway deploy"))
    return items

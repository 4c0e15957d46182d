"""The node reader's answer, as the rollout, the plan, ``health`` and watch see a node.

One program reads a node (:mod:`servefleet.adapters.drift_collect`): the rollout asks it for
the lock, the release links, the gate mark, the files and the containers; drift and the
Pulumi providers ask it for more (the image, the overlay marker, the boot log, the GPU).
Its answer is one JSON object; :func:`parse_answer` checks it, :func:`observed_deployment`
turns one deployment of it into an :class:`~servefleet.core.observed.deployment.
ObservedDeployment` and :func:`observed_node` the whole into an
:class:`~servefleet.core.observed.deployment.ObservedNode` (drift keeps the same deployments
in its own node view, :class:`servefleet.core.drift.observation.NodeObservation`, and adds
the boot log's facts and the engine's version).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from servefleet.core.observed.container import ObservedContainer, as_adopted, container_from_facts
from servefleet.core.observed.deployment import ComposeService, ObservedDeployment, ObservedNode
from servefleet.core.observed.gate import parse_gate_mark

ANSWER_SCHEMA = 1
"""The answer's ``schema``: a reader of another format is refused, not half understood."""


def parse_answer(text: str) -> dict[str, Any]:
    """The reader's JSON answer; :class:`ValueError` when it is not one (a node without
    ``python3`` answers with a shell error, a cut connection with half a document)."""
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"the node's reader printed no JSON ({error.msg}): "
                         f"{text[:200]!r}") from None
    if not isinstance(answer, dict) or answer.get("schema") != ANSWER_SCHEMA:
        raise ValueError("the node's reader answered in an unknown format")
    return answer


def _record(raw: Mapping[str, Any], name: str) -> dict[str, str]:
    return parse_gate_mark(str(raw.get(name) or "").splitlines())


def _candidate(raw: Mapping[str, Any]) -> ObservedContainer | None:
    found = raw.get("candidate")
    return container_from_facts(found) if isinstance(found, dict) else None


def observed_deployment(name: str, raw: Mapping[str, Any], docker_error: str | None,
                        keyed: bool = False) -> ObservedDeployment:
    """One deployment of the reader's answer (``raw``, its entry under ``deployments``;
    ``docker_error``, the answer's; ``keyed``: the request carried a key for the secret
    digests). The one parser of a deployment's entry, for the rollout's view and drift's."""
    adopted = _record(raw, "adopted")
    gated = _record(raw, "gated")
    containers = [as_adopted(container_from_facts(c), adopted)
                  for c in raw.get("containers") or [] if isinstance(c, dict)]
    # Running containers first: they are what serves.
    containers.sort(key=lambda c: (not c.running, c.name))
    manifest = raw.get("manifest")
    digests = raw.get("keyed_digests")
    chosen = raw.get("container")
    weights = raw.get("weights")
    return ObservedDeployment(
        name=name,
        present=bool(raw.get("present")),
        current_release=raw.get("current") or None,
        releases=tuple(sorted(str(r) for r in raw.get("releases") or [])),
        manifest=manifest if isinstance(manifest, dict) else None,
        manifest_error=raw.get("manifest_error") or None,
        file_hashes=dict(raw.get("files") or {}) if raw.get("current") else {},
        containers=tuple(containers),
        # The reader's choice, by id: it is one of the containers.
        engine_container_id=str(chosen.get("id") or "") if isinstance(chosen, dict) else None,
        docker_error=docker_error or None,
        previous_release=raw.get("previous") or None,
        last_good=raw.get("last_good") or None,
        gated_release=gated.get("release"),
        gated_started_at=gated.get("started"),
        # Only with a key: without one the node computed none.
        secret_digests=dict(digests) if keyed and isinstance(digests, dict) else None,
        adopted_release=adopted.get("release") or None,
        adopted_from=adopted.get("name") or None,
        adopt_candidate=_candidate(raw),
        release_secret_digests=dict(raw.get("secret_digests") or {}),
        weights=weights if isinstance(weights, dict) else None,
        **_compose(raw.get("compose_service")),
    )


def _compose(raw: Any) -> dict[str, Any]:
    """``compose_service`` and ``compose_error`` from the reader's compose answer."""
    if not isinstance(raw, dict):
        return {}
    if "error" in raw:
        return {"compose_error": str(raw["error"] or "docker compose config failed")[:300]}
    command = raw.get("command")
    return {"compose_service": ComposeService(
        image=raw.get("image"),
        command=tuple(command) if isinstance(command, list) and command else None,
        environment=dict(raw.get("environment") or {}),
        labels=dict(raw.get("labels") or {}))}


def observed_node(answer: Mapping[str, Any], deployments: Sequence[str], *,
                  keyed: bool = False) -> ObservedNode:
    """The node as the rollout sees it, from the reader's ``answer`` to a request for
    ``deployments`` (``keyed``: the request carried a key for the secret digests).

    A deployment with neither a folder nor a container is left out (it has never been
    deployed), unless the container the stack adopts runs there. An answer cut short by the reader's
    own deadline is refused: a plan is never made from half a picture.
    """
    errors = [str(e) for e in answer.get("errors") or []]
    if errors:
        raise ValueError("the node's answer is incomplete: " + "; ".join(errors))
    found: dict[str, ObservedDeployment] = {}
    docker_error = answer.get("docker_error")
    for name in deployments:
        raw = (answer.get("deployments") or {}).get(name) or {}
        if raw.get("present") or raw.get("containers"):
            # A folder removed by hand under a running engine still shows that engine.
            # The plan quotes docker's complaint in one line (drift reports it whole).
            found[name] = observed_deployment(name, raw, (docker_error or "")[:300] or None,
                                              keyed)
        elif _candidate(raw) is not None:
            # Never deployed, but the container the stack adopts runs there.
            found[name] = ObservedDeployment(name=name, present=False,
                                             adopt_candidate=_candidate(raw))
    baselines = answer.get("baselines") or {}
    return ObservedNode(lock_owner=answer.get("lock") or None, deployments=found,
                        baselines=next(iter(baselines.values()), None)
                        if isinstance(baselines, dict) else None)

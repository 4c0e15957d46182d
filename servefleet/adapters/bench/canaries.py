"""``servefleet bench NODE --canaries FILE``: the canaries sent to the gated engine from
this machine (as the gate's own canary probe sends them), each verdict kept on the node
with the release it judged."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from servefleet.adapters.bench import append_record
from servefleet.adapters.bench.session import BenchTarget
from servefleet.adapters.node_health.options import api_key_for
from servefleet.adapters.probes.client import EngineClient
from servefleet.adapters.probes.shared import probe_canaries
from servefleet.adapters.runtime import Transport
from servefleet.core.bench.record import BenchRecord
from servefleet.core.health_table import CheckRow
from servefleet.core.models import Profile
from servefleet.core.models.health import Canary


def served_name(client: EngineClient) -> str:
    """The first model the engine serves (its ``/v1/models``)."""
    answer = client.get("/v1/models")
    try:
        return str(answer.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise ValueError(f"GET /v1/models: {answer.shown()}") from None


def run_canaries(transport: Transport, target: BenchTarget, canaries: Sequence[Canary],
                 *, run_id: str, profile: Profile | None,
                 secrets: Mapping[str, str]) -> list[CheckRow]:
    """Send every canary to ``target``; record each verdict on the node. The API key is the
    one ``profile`` (the running one, from git) gives its engine, as the gate sends it."""
    api_key = api_key_for(profile, secrets) if profile is not None else None
    client = EngineClient(f"http://{transport.node.address}:{target.port}", api_key=api_key)
    rows = probe_canaries(client, served_name(client), canaries)
    for canary, row in zip(canaries, rows, strict=True):
        identity = hashlib.sha256(canary.model_dump_json().encode()).hexdigest()[:12]
        append_record(transport, BenchRecord(
            at=datetime.now(UTC).isoformat(timespec="seconds"), run_id=run_id,
            role="canary", node=target.node, deployment=target.deployment,
            release=target.release, profile=target.profile,
            profile_identity=target.profile_identity, engine=target.engine.name,
            engine_version=target.engine_version, image=target.image, image_id="",
            scenario=canary.name, scenario_identity=identity, shape="canary", seed=0,
            figures={"passed": row.verdict == "pass", "observed": row.observed}))
    return rows

"""llama.cpp's own probes: ``/props``, ``/slots`` and ``/metrics`` (``llamacpp:*``)."""

from __future__ import annotations

import re
from typing import Any

from servefleet.adapters.probes.client import EngineClient
from servefleet.adapters.probes.shared import _int, _row, metrics_of
from servefleet.core.health_table import CheckRow, Verdict, shown
from servefleet.core.metrics import parse_llamacpp_metrics
from servefleet.core.models import Profile
from servefleet.core.models.profile import version_tuple

BUILD_RE = re.compile(r"^b(\d+)")


def props_facts(props: dict[str, Any]) -> dict[str, Any]:
    """What ``/props`` states about the allocation: ``n_ctx_slot``
    (``default_generation_settings.n_ctx``, the context of one slot) and ``total_slots``.
    llama-server b11434 logs neither at its default verbosity beyond one line."""
    defaults = props.get("default_generation_settings")
    found = {"n_ctx_slot": _int(defaults.get("n_ctx")) if isinstance(defaults, dict) else None,
             "total_slots": _int(props.get("total_slots"))}
    return {key: value for key, value in found.items() if value is not None}


def probe_props(client: EngineClient, profile: Profile,
                engine_version: str | None = None,
                facts: dict[str, Any] | None = None) -> tuple[list[CheckRow], int | None]:
    """``GET /props``: slots, per-slot context and build against the profile (or against
    ``engine_version`` where another build runs, see :func:`run_probes`). Returns the rows
    and ``total_slots``; ``facts`` receives :func:`props_facts`."""
    settings = profile.llamacpp
    assert settings is not None
    answer = client.get("/props")
    if answer.status != 200:
        return [_row("GET /props", "200", answer.shown(), "fail", answer.shown())], None
    try:
        props = answer.json()
        if not isinstance(props, dict):
            raise ValueError("not an object")
    except ValueError:
        return [_row("GET /props", "a JSON object", "not JSON", "fail", answer.shown())], None
    rows: list[CheckRow] = []
    if facts is not None:
        facts.update(props_facts(props))
    slots = _int(props.get("total_slots"))
    if settings.parallel is not None:
        rows.append(_row("slots (total_slots)", str(settings.parallel), shown(slots),
                         "pass" if slots == settings.parallel else "fail",
                         f"/props total_slots={shown(slots)}"))
    else:
        rows.append(_row("slots (total_slots)", "-", shown(slots), "info"))
    defaults = props.get("default_generation_settings")
    n_ctx = _int(defaults.get("n_ctx")) if isinstance(defaults, dict) else None
    if settings.ctx_size:
        # Per slot: the whole context with a unified KV cache, else ctx_size / slots.
        parallel = settings.parallel or slots or 1
        allowed = sorted({settings.ctx_size, settings.ctx_size // parallel})
        expected = " or ".join(f"{v:,}" for v in allowed)
        rows.append(_row("context per slot (n_ctx)", expected, shown(n_ctx),
                         "pass" if n_ctx in allowed else "fail",
                         f"/props default_generation_settings.n_ctx={shown(n_ctx)}"))
    else:
        rows.append(_row("context per slot (n_ctx)", "-", shown(n_ctx), "info"))
    build = str(props.get("build_info") or "")
    match = BUILD_RE.match(build)
    pinned = engine_version or profile.engine_version
    want = version_tuple(pinned)
    if match is None or not want:
        rows.append(_row("build (build_info)", pinned, build or "-", "info"))
    else:
        same = (int(match.group(1)),) == want
        rows.append(_row("build (build_info)", pinned, build,
                         "pass" if same else "fail",
                         f"/props build_info={build}" + ("" if same else
                                                         ": the image tag moved, or the "
                                                         "profile's engine_version is wrong")))
    return rows, slots


def probe_slots(client: EngineClient, total_slots: int | None) -> CheckRow:
    """``GET /slots`` lists one entry per slot (``--no-slots`` turns it off: shown only)."""
    answer = client.get("/slots")
    if answer.status == 501:
        return _row("GET /slots", "-", "disabled (--no-slots)", "info")
    if answer.status != 200:
        return _row("GET /slots", "200", answer.shown(), "fail", answer.shown())
    try:
        slots = answer.json()
    except ValueError:
        slots = None
    if not isinstance(slots, list):
        return _row("GET /slots", "a JSON list", "not a list", "fail", answer.shown())
    busy = sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))
    expected = "-" if total_slots is None else f"{total_slots} slot(s)"
    verdict: Verdict = "info" if total_slots is None else \
        ("pass" if len(slots) == total_slots else "fail")
    return _row("GET /slots", expected, f"{len(slots)} slot(s), {busy} busy", verdict)


def probe_llamacpp_metrics(client: EngineClient, profile: Profile) -> list[CheckRow]:
    """``GET /metrics`` (``llamacpp:*``) when the profile turns ``--metrics`` on."""
    settings = profile.llamacpp
    assert settings is not None
    if not settings.metrics:
        return []
    answer = client.get("/metrics")
    metrics = metrics_of(answer, "200 (--metrics)", parse_llamacpp_metrics)
    if isinstance(metrics, CheckRow):
        return [metrics]
    if not metrics.names:
        return [_row("GET /metrics", "llamacpp:* metrics", "none", "fail", answer.shown())]
    rows = [_row("requests processing / deferred", "-",
                 f"{shown(metrics.requests_processing)} / {shown(metrics.requests_deferred)}",
                 "info")]
    if metrics.kv_cache_usage is not None:
        # Only older builds export it (serving.md D.3): shown when present.
        rows.append(_row("KV cache usage", "-", f"{metrics.kv_cache_usage:.1%}", "info"))
    if metrics.spec_decode is not None:
        rows.append(_row("speculative decoding", "-", metrics.spec_decode.describe(), "info"))
    return rows


"""Probes both engines answer: ``/health``, ``/v1/models``, a chat completion and the
determinism probe; the results of a run and the row helpers every probe uses."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from servefleet.adapters.probes.client import EngineClient, HttpAnswer
from servefleet.core.canary import expected_text, judge_canary
from servefleet.core.determinism import judge_determinism
from servefleet.core.engines import ENGINES
from servefleet.core.health_table import CheckRow, Verdict, shown
from servefleet.core.metrics import MetricsError
from servefleet.core.models import Profile
from servefleet.core.models.health import Canary

UNAVAILABLE_503 = "still loading the model, or unavailable"
"""What a 503 from ``/health`` says of an engine the registry does not know."""
CHAT_TIMEOUT_SECONDS = 120.0
"""A first request may wait for a lazy warm-up; still short against a boot."""
CHAT_MAX_TOKENS = 32
DETERMINISM_MAX_TOKENS = 64
DETERMINISM_RUNS = 3
DETERMINISM_SEED = 1234
CHAT_PROMPT = "Reply with one short sentence: what is the capital of France?"
DETERMINISM_PROMPT = ("Write four short sentences about the Moon: its size, its distance from "
                      "the Earth, its surface, and the tides.")


@dataclass
class ProbeResults:
    """Rows of a probe run, and whether the engine stopped answering during it."""

    rows: list[CheckRow] = field(default_factory=list)
    """Every row, in the order run."""
    engine_down: bool = False
    """The engine stopped answering (or answered 5xx) during the probes: its log should be
    read again for the reason."""
    outputs: dict[str, list[str]] = field(default_factory=dict)
    """Answers of the chat and determinism probes (for JSON and tests)."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Facts the API states that current boot logs no longer print (llama.cpp ``/props``:
    ``n_ctx_slot``, ``total_slots``); shown beside the boot facts."""


def _row(fact: str, expected: str, observed: str, verdict: Verdict,
         *evidence: str) -> CheckRow:
    return CheckRow(fact, expected, observed, verdict, tuple(evidence))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


M = TypeVar("M")


def metrics_of(answer: HttpAnswer, expected: str, parse: Callable[[str], M]) -> M | CheckRow:
    """The metrics of a ``GET /metrics`` answer, or the failed row that says why there are
    none (``expected``: the status the row expects)."""
    if answer.status != 200:
        return _row("GET /metrics", expected, answer.shown(), "fail", answer.shown())
    try:
        return parse(answer.body.decode("utf-8", "replace"))
    except MetricsError as error:
        return _row("GET /metrics", "Prometheus text", str(error), "fail", answer.shown())


def probe_health(client: EngineClient, engine: str) -> CheckRow:
    """``GET /health`` answers 200 (llama.cpp: ``{"status":"ok"}``)."""
    answer = client.get("/health")
    url = f"{client.base_url}/health"
    if answer.status == 200:
        return _row("GET /health", "200", "200", "pass")
    observed = answer.shown()
    if answer.status == 503:
        known = ENGINES.get(engine)
        observed += f" ({known.health_503 if known else UNAVAILABLE_503})"
    return _row("GET /health", "200", observed, "fail", f"{url}: {answer.shown()}")


def probe_models(client: EngineClient, served_name: str | None,
                 max_model_len: int | None) -> list[CheckRow]:
    """``GET /v1/models`` lists the served name (and vLLM's ``max_model_len``); with no
    ``served_name`` (a release known only by its manifest) the list is only required to be
    one."""
    answer = client.get("/v1/models")
    if answer.status != 200:
        return [_row("GET /v1/models", "200", answer.shown(), "fail", answer.shown())]
    try:
        cards = answer.json().get("data") or []
    except (ValueError, AttributeError):
        return [_row("GET /v1/models", "a JSON model list", "not JSON", "fail", answer.shown())]
    cards = [c for c in cards if isinstance(c, dict)]
    if served_name is None:
        return []
    names = [str(c.get("id")) for c in cards]
    listed = json.dumps([{k: c.get(k) for k in ("id", "max_model_len") if k in c}
                         for c in cards])[:300]
    card = next((c for c in cards if c.get("id") == served_name), None)
    rows = [_row("served model name", served_name, ", ".join(names) or "-",
                 "pass" if card is not None else "fail", listed)]
    if max_model_len is not None and card is not None:
        have = card.get("max_model_len")
        rows.append(_row("max_model_len", f"{max_model_len:,}", shown(have),
                         "pass" if have == max_model_len else "fail", listed))
    return rows


def chat_payload(served_name: str, prompt: str, max_tokens: int, *,
                 seed: int | None = None) -> dict[str, Any]:
    """A chat completion request with thinking off, at temperature 0."""
    payload: dict[str, Any] = {
        "model": served_name,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": False,
        # Qwen3.x thinks by default; a health probe wants the answer, not the reasoning.
        "chat_template_kwargs": {"enable_thinking": False},
    }
    if seed is not None:
        payload["seed"] = seed
    return payload


def _content(answer: HttpAnswer) -> tuple[str | None, str]:
    """The message content of a chat answer, and what to show when there is none."""
    if answer.status != 200:
        return None, answer.shown()
    try:
        message = answer.json()["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None, f"not a chat completion: {answer.shown()}"
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str) and content.strip():
        return content, ""
    reasoning = ""
    if isinstance(message, dict):
        reasoning = str(message.get("reasoning") or message.get("reasoning_content") or "")
    why = "empty content"
    if reasoning:
        why += f" ({len(reasoning)} characters of reasoning: thinking was not turned off)"
    return None, why


def probe_chat(client: EngineClient, served_name: str,
               results: ProbeResults | None = None) -> CheckRow:
    """One short chat completion with thinking off returns non-empty content."""
    answer = client.post_json("/v1/chat/completions",
                              chat_payload(served_name, CHAT_PROMPT, CHAT_MAX_TOKENS),
                              CHAT_TIMEOUT_SECONDS)
    content, why = _content(answer)
    fact = "chat completion (thinking off)"
    if content is None:
        return _row(fact, "non-empty content", why, "fail", answer.shown())
    if results is not None:
        results.outputs["chat"] = [content]
    flat = " ".join(content.split())
    return _row(fact, "non-empty content", repr(flat[:50] + ("…" if len(flat) > 50 else "")),
                "pass")


def determinism_outputs(client: EngineClient, served_name: str,
                        runs: int = DETERMINISM_RUNS) -> tuple[list[str], str | None]:
    """The answers of ``runs`` identical temperature-0 requests, one after another, or the
    problem that stopped them."""
    outputs: list[str] = []
    payload = chat_payload(served_name, DETERMINISM_PROMPT, DETERMINISM_MAX_TOKENS,
                           seed=DETERMINISM_SEED)
    for run in range(1, runs + 1):
        answer = client.post_json("/v1/chat/completions", payload, CHAT_TIMEOUT_SECONDS)
        content, why = _content(answer)
        if content is None:
            return outputs, f"run {run}: {why}"
        outputs.append(content)
    return outputs, None


def probe_canaries(client: EngineClient, served_name: str,
                   canaries: Sequence[Canary]) -> list[CheckRow]:
    """Each canary at temperature 0 with thinking off, its answer judged
    (:mod:`servefleet.core.canary`); one that gets no answer fails."""
    rows = []
    for canary in canaries:
        answer = client.post_json("/v1/chat/completions",
                                  chat_payload(served_name, canary.prompt, canary.max_tokens),
                                  CHAT_TIMEOUT_SECONDS)
        content, why = _content(answer)
        if content is None:
            rows.append(_row(f"canary {canary.name}", expected_text(canary), why, "fail",
                             answer.shown()))
        else:
            rows.append(judge_canary(canary, content))
    return rows


def probe_determinism(client: EngineClient, profile: Profile,
                      results: ProbeResults | None = None,
                      runs: int = DETERMINISM_RUNS) -> CheckRow:
    """The same prompt ``runs`` times at temperature 0: stable or not, with the differing
    answers (see :mod:`servefleet.core.determinism` for the verdicts)."""
    outputs, problem = determinism_outputs(client, profile.model.served_name, runs)
    if problem is not None:
        return _row("determinism (temperature 0)", f"{runs} answers", problem, "fail", problem)
    if results is not None:
        results.outputs["determinism"] = outputs
    return judge_determinism(outputs, profile)


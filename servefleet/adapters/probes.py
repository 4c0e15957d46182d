"""HTTP probes of a running engine: does it serve what the profile says it should?

Every probe is one or a few short HTTP requests (stdlib ``urllib``, no proxies, short
timeouts) and returns :class:`~servefleet.core.health_table.CheckRow` rows. The endpoints
and metric names are those of the real engines (serving.md B and D.3):

vLLM
    ``GET /health`` (200; 503 once the engine core is dead), ``GET /v1/models`` (the served
    name with the profile's ``max_model_len``), ``GET /version`` (the profile's
    ``engine_version``), one short chat completion with thinking off that must return
    content, ``GET /metrics`` (KV-cache usage, running/waiting requests, the KV pool of
    ``vllm:cache_config_info``, spec-decode acceptance when speculative decoding is on), and
    for TurboQuant KV a prompt longer than ``max_num_batched_tokens``: the continuation
    prefill that crashes vLLM 0.21 without the PR #40798 overlay (issues #41565/#41726).
llama.cpp
    ``GET /health`` (``{"status":"ok"}``; 503 while loading), ``GET /v1/models`` (the
    alias), ``GET /props`` (``total_slots`` against ``parallel``, per-slot ``n_ctx`` against
    ``ctx_size``, ``build_info`` against ``engine_version``), ``GET /slots``, the chat
    completion, and ``GET /metrics`` (``llamacpp:*``) when the profile turns metrics on.

The opt-in determinism probe sends one prompt n times at temperature 0 with a fixed seed;
:func:`servefleet.core.determinism.judge_determinism` gives the verdict.

An API key (the profile's ``VLLM_API_KEY`` / ``LLAMA_API_KEY`` secret) goes only into the
``Authorization`` header; no probe puts a header, a key or a request body into a row.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servefleet.core.determinism import judge_determinism
from servefleet.core.expectations import ExpectedHealth
from servefleet.core.health_table import CheckRow, Verdict, shown
from servefleet.core.metrics import MetricsError, parse_llamacpp_metrics, parse_vllm_metrics
from servefleet.core.models import Profile
from servefleet.core.models.profile import version_tuple

GET_TIMEOUT_SECONDS = 5.0
CHAT_TIMEOUT_SECONDS = 120.0
"""A first request may wait for a lazy warm-up; still short against a boot."""
LONG_PROMPT_TIMEOUT_SECONDS = 300.0
CHAT_MAX_TOKENS = 32
DETERMINISM_MAX_TOKENS = 64
DETERMINISM_RUNS = 3
DETERMINISM_SEED = 1234
CHAT_PROMPT = "Reply with one short sentence: what is the capital of France?"
DETERMINISM_PROMPT = ("Write four short sentences about the Moon: its size, its distance from "
                      "the Earth, its surface, and the tides.")
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
"""vLLM's default chunk size for the OpenAI server when the profile leaves it unset."""
SHOWN_BODY = 200
API_KEY_SECRETS = ("VLLM_API_KEY", "LLAMA_API_KEY")
"""Secret names whose value the probes send as ``Authorization: Bearer``."""


# -- HTTP ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HttpAnswer:
    """What one request got."""

    status: int
    """HTTP status; 0 when nothing answered."""
    body: bytes = b""
    """The response body."""
    error: str | None = None
    """Why nothing answered (``connection refused``, ``timed out``)."""

    @property
    def answered(self) -> bool:
        """An HTTP status came back."""
        return self.status > 0

    def shown(self) -> str:
        """``HTTP 503 <start of body>`` or ``no answer (<why>)``, for rows."""
        if not self.answered:
            return f"no answer ({self.error})"
        text = " ".join(self.body[:SHOWN_BODY].decode("utf-8", "replace").split())
        return f"HTTP {self.status}" + (f" {text}" if text else "")

    def json(self) -> Any:
        """The body as JSON; :class:`ValueError` when it is not."""
        return json.loads(self.body)


Send = Callable[[urllib.request.Request, float], HttpAnswer]


def urlopen(request: urllib.request.Request, timeout: float) -> HttpAnswer:
    """Send ``request``; every outcome is an answer (status 0 when nothing answered)."""
    # No proxies: engines sit on the operator's own network.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return HttpAnswer(response.status, response.read())
    except urllib.error.HTTPError as error:
        return HttpAnswer(error.code, error.read())
    except urllib.error.URLError as error:
        return HttpAnswer(0, error=str(error.reason))
    except (OSError, ValueError) as error:
        return HttpAnswer(0, error=str(error) or type(error).__name__)


@dataclass
class EngineClient:
    """Talks HTTP to one engine at ``base_url`` (``http://host:port``)."""

    base_url: str
    """``http://<node address>:<port>``."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer`` when set; never shown."""
    timeout: float = GET_TIMEOUT_SECONDS
    """Timeout of a GET."""
    send: Send = urlopen
    """How a request is sent (a test may record them)."""

    def _request(self, path: str, data: bytes | None = None) -> urllib.request.Request:
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return urllib.request.Request(self.base_url.rstrip("/") + path, data=data,
                                      headers=headers, method="POST" if data else "GET")

    def get(self, path: str, timeout: float | None = None) -> HttpAnswer:
        """``GET path``."""
        return self.send(self._request(path), timeout or self.timeout)

    def post_json(self, path: str, payload: dict[str, Any], timeout: float) -> HttpAnswer:
        """``POST path`` with a JSON body."""
        return self.send(self._request(path, json.dumps(payload).encode()), timeout)


# -- results ---------------------------------------------------------------------------------
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


# -- shared probes ---------------------------------------------------------------------------
def probe_health(client: EngineClient, engine: str) -> CheckRow:
    """``GET /health`` answers 200 (llama.cpp: ``{"status":"ok"}``)."""
    answer = client.get("/health")
    url = f"{client.base_url}/health"
    if answer.status == 200:
        return _row("GET /health", "200", "200", "pass")
    observed = answer.shown()
    if answer.status == 503 and engine == "vllm":
        observed += " (vLLM answers 503 once its engine core is dead)"
    elif answer.status == 503:
        observed += " (still loading the model, or unavailable)"
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


# -- vLLM ------------------------------------------------------------------------------------
def probe_version(client: EngineClient, engine_version: str) -> CheckRow:
    """``GET /version`` reports the profile's pinned engine version."""
    answer = client.get("/version")
    if answer.status != 200:
        return _row("GET /version", engine_version, answer.shown(), "fail", answer.shown())
    try:
        have = str(answer.json()["version"])
    except (ValueError, KeyError, TypeError):
        return _row("GET /version", engine_version, "no version in the answer", "fail",
                    answer.shown())
    if have == engine_version:
        return _row("GET /version", engine_version, have, "pass")
    same_release = version_tuple(have) == version_tuple(engine_version) != ()
    if same_release:
        # 0.21.0+cu130 and 0.21.0 are one release built differently.
        return _row("GET /version", engine_version, have, "pass",
                    f"{have} is release {engine_version} with a local build suffix")
    return _row("GET /version", engine_version, have, "fail",
                f"the image runs vLLM {have}, the profile pins {engine_version}: the image "
                "tag moved, or the profile's engine_version is wrong")


def probe_vllm_metrics(client: EngineClient, profile: Profile,
                       want_dtype: str | None = None) -> list[CheckRow]:
    """``GET /metrics``: KV usage, requests, the KV pool, spec-decode acceptance."""
    answer = client.get("/metrics")
    if answer.status != 200:
        return [_row("GET /metrics", "200", answer.shown(), "fail", answer.shown())]
    try:
        metrics = parse_vllm_metrics(answer.body.decode("utf-8", "replace"))
    except MetricsError as error:
        return [_row("GET /metrics", "Prometheus text", str(error), "fail", answer.shown())]
    rows: list[CheckRow] = []
    usage = "-" if metrics.kv_cache_usage is None else f"{metrics.kv_cache_usage:.1%}"
    rows.append(_row("KV cache usage", "-", usage, "info"))
    rows.append(_row("requests running / waiting", "-",
                     f"{shown(metrics.requests_running)} / {shown(metrics.requests_waiting)}",
                     "info"))
    if metrics.kv_capacity_tokens is not None:
        rows.append(_row("KV blocks (cache_config_info)", "-",
                         f"{metrics.num_gpu_blocks:,} blocks x {metrics.block_size} = "
                         f"{metrics.kv_capacity_tokens:,} token slots", "info"))
    if metrics.cache_dtype is not None and want_dtype is not None:
        rows.append(_row("KV cache dtype", want_dtype, metrics.cache_dtype,
                         "pass" if metrics.cache_dtype == want_dtype else "fail",
                         f"vllm:cache_config_info cache_dtype={metrics.cache_dtype}"))
    spec = profile.speculative
    counters = metrics.spec_decode
    if spec is not None:
        if counters is None:
            rows.append(_row("speculative decoding", f"{spec.method} active",
                             "no spec-decode counters in /metrics", "fail",
                             "vLLM registers vllm:spec_decode_* only when speculative decoding "
                             "is configured: the engine runs without it"))
        else:
            rows.append(_row("speculative decoding", f"{spec.method} active",
                             counters.describe(), "pass"))
    elif counters is not None:
        rows.append(_row("speculative decoding", "off", f"on: {counters.describe()}", "warn",
                         "vllm:spec_decode_* counters are exposed although the profile has no "
                         "speculative config"))
    return rows


def long_prompt_tokens(profile: Profile) -> int | None:
    """Tokens of the continuation-prefill probe: more than one chunk
    (``max_num_batched_tokens``) and within ``max_model_len``; ``None`` when the profile
    does not use TurboQuant KV, or one chunk already holds the longest request."""
    settings = profile.vllm
    if settings is None or not (settings.kv_cache_dtype or "").startswith("turboquant"):
        return None
    chunk = settings.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    tokens = chunk + max(256, chunk // 4)
    if settings.max_model_len is not None:
        tokens = min(tokens, settings.max_model_len - 64)
    return tokens if tokens > chunk else None


def probe_long_prompt(client: EngineClient, profile: Profile) -> CheckRow | None:
    """TurboQuant KV: a prompt longer than one prefill chunk is answered. vLLM 0.21 locks
    TurboQuant's workspace after CUDA-graph capture, and the continuation prefill of such a
    prompt then asserts and kills the engine (issues #41565/#41726; PR #40798 fixes it)."""
    tokens = long_prompt_tokens(profile)
    if tokens is None:
        return None
    settings = profile.vllm
    assert settings is not None
    chunk = settings.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    # A fresh prefix each time, so the prefix cache cannot shorten the prefill.
    prompt = f"[{uuid.uuid4().hex}] Count the words: " + " ".join(["word"] * tokens)
    answer = client.post_json("/v1/chat/completions",
                              chat_payload(profile.model.served_name, prompt, 1),
                              LONG_PROMPT_TIMEOUT_SECONDS)
    fact = f"prompt > max_num_batched_tokens ({chunk:,})"
    expected = f"answered (~{tokens:,} prompt tokens)"
    if answer.status == 200:
        return _row(fact, expected, "answered", "pass")
    return _row(fact, expected, answer.shown(), "fail", answer.shown(),
                "a TurboQuant KV cache without the PR #40798 overlay fails the continuation "
                "prefill of prompts longer than one chunk (vLLM issues #41565/#41726)")


# -- llama.cpp -------------------------------------------------------------------------------
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
    if answer.status != 200:
        return [_row("GET /metrics", "200 (--metrics)", answer.shown(), "fail", answer.shown())]
    try:
        metrics = parse_llamacpp_metrics(answer.body.decode("utf-8", "replace"))
    except MetricsError as error:
        return [_row("GET /metrics", "Prometheus text", str(error), "fail", answer.shown())]
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


# -- a whole run -----------------------------------------------------------------------------
def _down(rows: Sequence[CheckRow]) -> bool:
    """A row shows the engine gone: nothing answered, or a 5xx on a request."""
    return any(r.verdict == "fail" and ("no answer (" in r.observed or
                                        re.search(r"\bHTTP 5\d\d\b", r.observed))
               for r in rows)


def run_probes(client: EngineClient, profile: Profile, *, chat: bool | None = None,
               determinism: bool | None = None, basic: bool = True,
               expected: ExpectedHealth | None = None) -> ProbeResults:
    """Every probe of the profile's engine, in order; stops when nothing answers any more.

    ``chat`` and ``determinism`` override the profile's ``health.chat_probe`` and
    ``health.determinism.probe``; ``basic=False`` leaves out ``/health`` and ``/v1/models``
    (for a caller that has checked them already). ``expected`` (the node's
    :class:`ExpectedHealth`) says what the engine should report where it differs from the
    profile: its version and KV dtype on a simulated node's CPU build. The
    continuation-prefill probe (TurboQuant KV) runs last: on an engine that has the bug it
    kills the engine.
    """
    results = ProbeResults()
    rows = results.rows
    chat = profile.health.chat_probe if chat is None else chat
    determinism = profile.health.determinism.probe if determinism is None else determinism
    if basic:
        health = probe_health(client, profile.engine)
        rows.append(health)
        if health.verdict == "fail" and "no answer (" in health.observed:
            results.engine_down = True
            return results
    served = profile.model.served_name
    version = expected.engine_version if expected is not None else profile.engine_version
    if expected is not None:
        kv_dtype = expected.kv_cache_dtype
    else:
        kv_dtype = profile.vllm.kv_cache_dtype if profile.vllm else None
    steps: list[Callable[[], list[CheckRow]]] = []
    if profile.engine == "vllm":
        max_len = profile.vllm.max_model_len if profile.vllm else None
        if basic:
            steps.append(lambda: probe_models(client, served, max_len))
        steps.append(lambda: [probe_version(client, version)])
    else:
        slots: list[int | None] = [None]

        def props() -> list[CheckRow]:
            found, slots[0] = probe_props(client, profile, version, results.facts)
            return found

        if basic:
            steps.append(lambda: probe_models(client, served, None))
        steps += [props, lambda: [probe_slots(client, slots[0])]]
    if chat:
        steps.append(lambda: [probe_chat(client, served, results)])
    if determinism:
        steps.append(lambda: [probe_determinism(client, profile, results)])
    if profile.engine == "vllm":
        steps.append(lambda: probe_vllm_metrics(client, profile, kv_dtype))

        def long_prompt() -> list[CheckRow]:
            row = probe_long_prompt(client, profile)
            return [] if row is None else [row]

        steps.append(long_prompt)
    else:
        steps.append(lambda: probe_llamacpp_metrics(client, profile))
    for step in steps:
        found = step()
        rows.extend(found)
        if _down(found):
            results.engine_down = True
            break
    return results

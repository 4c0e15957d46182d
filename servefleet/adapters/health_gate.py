"""The health gate a rollout must pass before ``current`` is switched.

Two kinds of checks, each a small function that returns :class:`Check` rows:

* **boot checks** read the facts the boot-log parser extracted while the log streamed: the
  outcome must be ``ready`` (a failure reports its class and the log lines that prove it),
  and the profile's expectations hold (smallest KV pool, CUDA-graph mode; see
  :func:`servefleet.core.expectations.derive_expectations`);
* **HTTP probes** run from the control machine against ``http://<node address>:<port>``:
  ``/health`` answers 200 (polled until the deadline, since the server may start listening a
  moment after the ready line), and ``/v1/models`` serves the profile's name and
  ``max_model_len``.

To add a check, write a function of the same shape and append it to :data:`BOOT_CHECKS` or
:data:`HTTP_PROBES`; :func:`run_gate` runs them in order.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from servefleet.core.bootlog.model import BootFacts, Evidence
from servefleet.core.expectations import ExpectedHealth, derive_expectations
from servefleet.core.models import Node, Profile
from servefleet.core.plan import flags_from_argv
from servefleet.core.project import profile_identity

Verdict = Literal["pass", "fail", "warn", "info"]
HTTP_TIMEOUT_SECONDS = 5.0
HEALTH_POLL_SECONDS = 0.5
EVIDENCE_LINES = 5


@dataclass(frozen=True)
class Check:
    """One row of a health report."""

    fact: str
    """What was checked (``boot outcome``, ``KV cache tokens``, ``GET /health``…)."""
    expected: str
    """What the profile wants, as text (``-`` when nothing is expected: shown for info)."""
    observed: str
    """What was found, as text (``-`` when unknown)."""
    verdict: Verdict
    """``pass``, ``fail``, ``warn`` or ``info`` (shown, not judged)."""
    evidence: tuple[str, ...] = ()
    """Log lines (``L<n>: text``) or HTTP answers that prove the observation."""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"fact": self.fact, "expected": self.expected, "observed": self.observed,
                "verdict": self.verdict, "evidence": list(self.evidence)}


@dataclass(frozen=True)
class HealthReport:
    """The verdict of a gate: every check, and for a failed boot its class."""

    url: str
    """Base URL the probes used."""
    checks: tuple[Check, ...]
    """Every check, in the order run."""
    failure_class: str | None = None
    """The boot-log failure class (``kv_cache_oom``…) when the engine failed to boot, or
    ``boot_deadline`` / ``engine_exited`` when it never became ready."""
    facts: Mapping[str, Any] = field(default_factory=dict)
    """Headline boot facts (KV pool, CUDA-graph mode…) for tables and outputs."""

    @property
    def ok(self) -> bool:
        """No check failed."""
        return not any(c.verdict == "fail" for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        """The failed checks."""
        return [c for c in self.checks if c.verdict == "fail"]

    def summary(self) -> str:
        """One line: ``healthy`` or the first failure with what was expected."""
        if self.ok:
            return "healthy"
        first = self.failures[0]
        cls = f" [{self.failure_class}]" if self.failure_class else ""
        return f"{first.fact}: expected {first.expected}, observed {first.observed}{cls}"

    def evidence(self) -> list[str]:
        """The proving lines of every failed check."""
        return [line for check in self.failures for line in check.evidence]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"ok": self.ok, "url": self.url, "failure_class": self.failure_class,
                "facts": dict(self.facts), "checks": [c.to_json() for c in self.checks]}


@dataclass(frozen=True)
class GateSpec:
    """What the gate holds a deployment to."""

    engine: str
    """``vllm`` or ``llama.cpp``."""
    served_name: str | None
    """Name ``/v1/models`` must list; ``None``: not checked."""
    max_model_len: int | None
    """``max_model_len`` ``/v1/models`` must report (vLLM); ``None``: not checked."""
    expected: ExpectedHealth | None = None
    """Boot-log expectations of the profile; ``None`` when the profile is unknown (a
    release restored from its manifest alone)."""
    boot_deadline_seconds: float = 900
    """The boot must be ready (and ``/health`` answer) within this many seconds."""

    @classmethod
    def for_profile(cls, profile: Profile, node: Node) -> GateSpec:
        """The gate of ``profile`` booted on ``node``."""
        return cls(
            engine=profile.engine,
            served_name=profile.model.served_name,
            max_model_len=profile.vllm.max_model_len if profile.vllm else None,
            expected=derive_expectations(profile, node),
            boot_deadline_seconds=profile.health.boot_deadline_seconds,
        )

    @classmethod
    def for_manifest(cls, manifest: Mapping[str, Any], profiles: Mapping[str, Profile],
                     node: Node) -> GateSpec:
        """The gate of a release already on a node: its profile's when the project still
        has that profile unchanged, else what its engine command line says."""
        name = manifest.get("profile")
        profile = profiles.get(name) if isinstance(name, str) else None
        if profile is not None and profile_identity(profile) == manifest.get("profile_identity"):
            return cls.for_profile(profile, node)
        argv = manifest.get("engine_argv")
        flags = flags_from_argv([str(a) for a in argv]) if isinstance(argv, list) else {}
        engine = str(manifest.get("engine") or "vllm")
        served = flags.get("--served-model-name") or flags.get("--alias") or flags.get("-a")
        length = flags.get("--max-model-len")
        return cls(engine=engine, served_name=served,
                   max_model_len=int(length) if length and length.isdigit() else None,
                   expected=None,
                   boot_deadline_seconds=float(manifest.get("boot_deadline_seconds") or 900))


# -- boot checks -----------------------------------------------------------------------------
def _lines(facts: BootFacts, *keys: str) -> tuple[str, ...]:
    found: dict[int, Evidence] = {}
    for key in keys:
        for item in facts.evidence.get(key, ()):
            found.setdefault(item.line, item)
    return tuple(f"L{e.line}: {e.text}" for e in list(found.values())[:EVIDENCE_LINES])


def _shown(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def check_outcome(facts: BootFacts, spec: GateSpec) -> Check:
    """The boot log reached ``ready``; a failure names its class and proving lines."""
    if facts.outcome == "ready":
        return Check("boot outcome", "ready", "ready", "pass", _lines(facts, "outcome"))
    observed: str = facts.outcome
    if facts.failure_class is not None:
        observed = f"failed: {facts.failure_class.value}"
    evidence = _lines(facts, "outcome", "failure_reason")
    if not evidence and facts.failure_reason:
        evidence = (facts.failure_reason,)
    return Check("boot outcome", "ready", observed, "fail", evidence)


def check_kv_pool(facts: BootFacts, spec: GateSpec) -> Check | None:
    """vLLM's KV pool is at least the profile's minimum (shown even when none is set)."""
    if spec.engine != "vllm":
        return None
    minimum = spec.expected.min_kv_cache_tokens if spec.expected else None
    tokens = facts.kv_cache_tokens
    evidence = _lines(facts, "kv_cache_tokens")
    if minimum is None:
        return Check("KV cache tokens", "-", _shown(tokens), "info", evidence)
    if tokens is None:
        return Check("KV cache tokens", f">= {minimum:,}", "-", "fail",
                     ("the boot log states no KV cache size",))
    verdict: Verdict = "pass" if tokens >= minimum else "fail"
    return Check("KV cache tokens", f">= {minimum:,}", _shown(tokens), verdict, evidence)


def check_cudagraph_mode(facts: BootFacts, spec: GateSpec) -> Check | None:
    """vLLM's final CUDA-graph mode is the expected one."""
    if spec.engine != "vllm":
        return None
    want = spec.expected.cudagraph_mode if spec.expected else None
    have = facts.cudagraph_mode
    evidence = _lines(facts, "cudagraph_mode")
    if want is None:
        return Check("CUDA graph mode", "-", _shown(have), "info", evidence)
    verdict: Verdict = "pass" if have == want else "fail"
    return Check("CUDA graph mode", want, _shown(have), verdict, evidence)


def check_context(facts: BootFacts, spec: GateSpec) -> Check | None:
    """llama.cpp: the context the server allocated (shown; judged by the HTTP probes)."""
    if spec.engine != "llama.cpp":
        return None
    return Check("context (n_ctx)", "-", _shown(facts.n_ctx), "info", _lines(facts, "n_ctx"))


BootCheck = Callable[[BootFacts, GateSpec], Check | None]
BOOT_CHECKS: list[BootCheck] = [check_outcome, check_kv_pool, check_cudagraph_mode,
                                check_context]
"""Boot-log checks, run in order on a boot that reached ``ready`` (a boot that did not is
judged by :func:`check_outcome` alone)."""


# -- HTTP probes -----------------------------------------------------------------------------
HttpGet = Callable[[str, float], tuple[int, bytes]]
"""``get(url, timeout) -> (status, body)``; raises :class:`OSError` when nothing answers."""


def http_get(url: str, timeout: float = HTTP_TIMEOUT_SECONDS) -> tuple[int, bytes]:
    """A plain GET (no proxies: engines sit on the operator's own network)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@dataclass
class ProbeContext:
    """What an HTTP probe gets: where to ask, how, and until when."""

    base_url: str
    spec: GateSpec
    http: HttpGet
    deadline: float
    """``clock()`` value after which polling stops."""
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def probe_health(ctx: ProbeContext) -> list[Check]:
    """``GET /health`` answers 200, polled until the deadline."""
    url = f"{ctx.base_url}/health"
    last = "no answer"
    while True:
        try:
            status, body = ctx.http(url, HTTP_TIMEOUT_SECONDS)
            last = f"HTTP {status}"
            if status == 200:
                return [Check("GET /health", "200", "200", "pass")]
            detail = body[:200].decode("utf-8", "replace").strip()
            if detail:
                last += f" {detail}"
        except OSError as error:
            last = f"no answer ({getattr(error, 'reason', None) or error})"
        if ctx.clock() >= ctx.deadline:
            return [Check("GET /health", "200", last, "fail", (f"{url}: {last}",))]
        ctx.sleep(HEALTH_POLL_SECONDS)


def probe_models(ctx: ProbeContext) -> list[Check]:
    """``GET /v1/models`` lists the served name with the profile's ``max_model_len``."""
    url = f"{ctx.base_url}/v1/models"
    try:
        status, body = ctx.http(url, HTTP_TIMEOUT_SECONDS)
    except OSError as error:
        return [Check("GET /v1/models", "200", f"no answer ({error})", "fail", (url,))]
    if status != 200:
        return [Check("GET /v1/models", "200", f"HTTP {status}", "fail",
                      (body[:300].decode("utf-8", "replace"),))]
    try:
        cards = json.loads(body).get("data") or []
    except (ValueError, AttributeError):
        return [Check("GET /v1/models", "JSON model list", "not JSON", "fail",
                      (body[:300].decode("utf-8", "replace"),))]
    names = [str(card.get("id")) for card in cards if isinstance(card, dict)]
    shown = json.dumps(cards)[:300]
    checks: list[Check] = []
    want = ctx.spec.served_name
    card = next((c for c in cards if isinstance(c, dict) and c.get("id") == want), None)
    if want is not None:
        checks.append(Check("served model name", want, ", ".join(names) or "-",
                            "pass" if card is not None else "fail", (shown,)))
    length = ctx.spec.max_model_len
    if length is not None and card is not None:
        have = card.get("max_model_len")
        checks.append(Check("max_model_len", f"{length:,}", _shown(have),
                            "pass" if have == length else "fail", (shown,)))
    return checks


HttpProbe = Callable[[ProbeContext], list[Check]]
HTTP_PROBES: list[HttpProbe] = [probe_health, probe_models]
"""HTTP probes, run in order; the first failure stops the rest (``/health`` comes first)."""


def headline_facts(facts: BootFacts) -> dict[str, Any]:
    """The boot facts worth a column: what a per-node table and outputs show."""
    keys = ("engine_version", "kv_cache_tokens", "max_concurrency", "cudagraph_mode",
            "attention_backend", "spec_decode", "kv_cache_mib", "n_ctx")
    return {key: getattr(facts, key) for key in keys if getattr(facts, key) is not None}


def run_gate(facts: BootFacts, base_url: str, spec: GateSpec, *, deadline: float,
             http: HttpGet = http_get, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep,
             failure_class: str | None = None,
             log_tail: tuple[str, ...] = ()) -> HealthReport:
    """Every boot check, then (if the boot was ready) every HTTP probe.

    ``failure_class`` names why a log that proves no outcome stopped (``boot_deadline``,
    ``engine_exited``); ``log_tail`` is then shown as the evidence.
    """
    if facts.outcome != "ready":
        # Only the outcome counts: expectations of a boot that never finished say nothing.
        cls = failure_class or (facts.failure_class.value if facts.failure_class else None)
        first = check_outcome(facts, spec)
        if facts.outcome == "incomplete":
            first = Check(first.fact, first.expected,
                          f"incomplete ({cls})" if cls else first.observed, "fail",
                          first.evidence or log_tail[-EVIDENCE_LINES:])
        checks = [first]
        return HealthReport(url=base_url, checks=tuple(checks), failure_class=cls,
                            facts=headline_facts(facts))
    checks = []
    for boot_check in BOOT_CHECKS:
        row = boot_check(facts, spec)
        if row is not None:
            checks.append(row)
    ctx = ProbeContext(base_url=base_url, spec=spec, http=http, deadline=deadline, clock=clock,
                       sleep=sleep)
    for probe in HTTP_PROBES:
        rows = probe(ctx)
        checks.extend(rows)
        if any(r.verdict == "fail" for r in rows):
            break
    return HealthReport(url=base_url, checks=tuple(checks), facts=headline_facts(facts))

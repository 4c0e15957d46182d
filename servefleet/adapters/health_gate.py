"""The health gate a rollout must pass before ``current`` is switched.

Two kinds of checks, each a small function that returns :class:`Check` rows:

* **boot checks** read the facts the boot-log parser extracted while the log streamed: the
  outcome must be ``ready`` (a failure reports its class and the log lines that prove it),
  and the profile's expectations hold (smallest KV pool, CUDA-graph mode; see
  :func:`servefleet.core.expectations.derive_expectations`);
* **HTTP probes** run from the control machine against ``http://<node address>:<port>``:
  ``/health`` answers 200 (polled until the deadline, since the server may start listening a
  moment after the ready line), and ``/v1/models`` serves the profile's name and
  ``max_model_len``. Each request is the health checks' own probe
  (:mod:`servefleet.adapters.probes`); the gate adds the polling and the deadline.

To add a check, write a function of the same shape and append it to :data:`BOOT_CHECKS` or
:data:`HTTP_PROBES`; :func:`run_gate` runs them in order. A boot check of one engine's log
says so with :func:`for_engines` instead of testing ``spec.engine``. A rollout then adds the
rest of the health checks (:func:`servefleet.adapters.node_health.gate_checks`).
"""

from __future__ import annotations

import functools
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servefleet.adapters import probes
from servefleet.adapters.probes import EngineClient, HttpAnswer, Send
from servefleet.core.bootlog.model import BootFacts, Evidence, LlamaCppExtra
from servefleet.core.engines import engine_of
from servefleet.core.expectations import ExpectedHealth, derive_expectations
from servefleet.core.health_table import CheckRow, Verdict, failed_rows, rows_pass, shown
from servefleet.core.models import Node, Profile
from servefleet.core.plan import flags_from_argv
from servefleet.core.project import profile_identity

HTTP_TIMEOUT_SECONDS = 5.0
HEALTH_POLL_SECONDS = 0.5
EVIDENCE_LINES = 5

Check = CheckRow
"""One row of a health report: the same row the health checks build, so a gate's rows and
theirs go into one report."""


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
        return rows_pass(self.checks)

    @property
    def failures(self) -> list[Check]:
        """The failed checks."""
        return failed_rows(self.checks)

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
            max_model_len=engine_of(profile).max_model_len(profile),
            expected=derive_expectations(profile, node),
            boot_deadline_seconds=profile.health.boot_deadline_seconds,
        )

    @classmethod
    def for_manifest(cls, manifest: Mapping[str, Any], profiles: Mapping[str, Profile],
                     node: Node) -> GateSpec:
        """The gate of a release already on a node: its profile's when the project still
        has that profile unchanged, else what its engine command line says."""
        profile = unchanged_profile(manifest, profiles)
        if profile is not None:
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


def unchanged_profile(manifest: Mapping[str, Any],
                      profiles: Mapping[str, Profile]) -> Profile | None:
    """The profile a release's manifest names, when the project has it unchanged (same
    identity); ``None`` when it is gone or was edited since."""
    name = manifest.get("profile")
    profile = profiles.get(name) if isinstance(name, str) else None
    if profile is not None and profile_identity(profile) == manifest.get("profile_identity"):
        return profile
    return None


# -- boot checks -----------------------------------------------------------------------------
def _lines(facts: BootFacts, *keys: str) -> tuple[str, ...]:
    found: dict[int, Evidence] = {}
    for key in keys:
        for item in facts.evidence.get(key, ()):
            found.setdefault(item.line, item)
    return tuple(f"L{e.line}: {e.text}" for e in list(found.values())[:EVIDENCE_LINES])


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


BootCheck = Callable[[BootFacts, GateSpec], Check | None]


def for_engines(*engines: str) -> Callable[[BootCheck], BootCheck]:
    """A boot check that applies only to ``engines`` (names of
    :data:`servefleet.core.engines.ENGINES`): for any other it gives no row."""
    def wrap(check: BootCheck) -> BootCheck:
        @functools.wraps(check)
        def applicable(facts: BootFacts, spec: GateSpec) -> Check | None:
            return check(facts, spec) if spec.engine in engines else None
        return applicable
    return wrap


@for_engines("vllm")
def check_kv_pool(facts: BootFacts, spec: GateSpec) -> Check | None:
    """vLLM's KV pool is at least the profile's minimum (shown even when none is set)."""
    minimum = spec.expected.min_kv_cache_tokens if spec.expected else None
    tokens = facts.kv_cache_tokens
    evidence = _lines(facts, "kv_cache_tokens")
    if minimum is None:
        return Check("KV cache tokens", "-", shown(tokens), "info", evidence)
    if tokens is None:
        return Check("KV cache tokens", f">= {minimum:,}", "-", "fail",
                     ("the boot log states no KV cache size",))
    verdict: Verdict = "pass" if tokens >= minimum else "fail"
    return Check("KV cache tokens", f">= {minimum:,}", shown(tokens), verdict, evidence)


@for_engines("vllm")
def check_cudagraph_mode(facts: BootFacts, spec: GateSpec) -> Check | None:
    """vLLM's final CUDA-graph mode is the expected one."""
    want = spec.expected.cudagraph_mode if spec.expected else None
    have = facts.cudagraph_mode
    evidence = _lines(facts, "cudagraph_mode")
    if want is None:
        return Check("CUDA graph mode", "-", shown(have), "info", evidence)
    verdict: Verdict = "pass" if have == want else "fail"
    return Check("CUDA graph mode", want, shown(have), verdict, evidence)


@for_engines("llama.cpp")
def check_context(facts: BootFacts, spec: GateSpec) -> Check | None:
    """llama.cpp: the context the server allocated (shown; judged by the HTTP probes).

    Servers of 2026 (b11434) state only the per-slot context at the default verbosity
    (``initializing, n_slots = 4, n_ctx_slot = 256``); the total is shown when the log has it.
    """
    if facts.n_ctx is None and isinstance(facts.extra, LlamaCppExtra) \
            and facts.extra.n_ctx_seq is not None:
        return Check("context (n_ctx)", "-", f"{facts.extra.n_ctx_seq:,} per slot", "info",
                     _lines(facts, "n_ctx_seq"))
    return Check("context (n_ctx)", "-", shown(facts.n_ctx), "info", _lines(facts, "n_ctx"))


@for_engines("llama.cpp")
def check_kv_buffer(facts: BootFacts, spec: GateSpec) -> Check | None:
    """llama.cpp: the KV buffer in MiB (shown). At the default verbosity current servers do
    not log it, and neither /props, /slots nor /metrics states it; ``-lv 4`` logs it."""
    if facts.kv_cache_mib is None:
        return Check("KV cache (MiB)", "-", "- (not logged; llamacpp.log_verbosity 4 logs it)",
                     "info")
    return Check("KV cache (MiB)", "-", shown(facts.kv_cache_mib), "info",
                 _lines(facts, "kv_cache_mib"))


BOOT_CHECKS: list[BootCheck] = [check_outcome, check_kv_pool, check_cudagraph_mode,
                                check_context, check_kv_buffer]
"""Boot-log checks, run in order on a boot that reached ``ready`` (a boot that did not is
judged by :func:`check_outcome` alone)."""


# -- HTTP probes -----------------------------------------------------------------------------
HttpGet = Callable[[str, float], tuple[int, bytes]]
"""``get(url, timeout) -> (status, body)``; raises :class:`OSError` when nothing answers."""


def http_get(url: str, timeout: float = HTTP_TIMEOUT_SECONDS) -> tuple[int, bytes]:
    """A plain GET (the probes' own request: no proxies, engines sit on the operator's own
    network)."""
    answer = probes.urlopen(urllib.request.Request(url), timeout)
    if not answer.answered:
        raise OSError(answer.error)
    return answer.status, answer.body


def send_through(http: HttpGet) -> Send:
    """A probe :data:`~servefleet.adapters.probes.Send` whose GETs go through ``http`` (a
    caller's own transport, which carries no headers) and whose other requests (the chat
    probes' POSTs) go through urllib."""
    def send(request: urllib.request.Request, timeout: float) -> HttpAnswer:
        if request.data is not None:
            return probes.urlopen(request, timeout)
        try:
            status, body = http(request.full_url, timeout)
        except OSError as error:
            return HttpAnswer(0, error=str(getattr(error, "reason", None) or error))
        return HttpAnswer(status, body)
    return send


@dataclass
class ProbeContext:
    """What an HTTP probe gets: whom to ask, and until when."""

    client: EngineClient
    """The engine's HTTP API."""
    spec: GateSpec
    """What the gate holds the deployment to."""
    deadline: float
    """``clock()`` value after which polling stops."""
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def probe_health(ctx: ProbeContext) -> list[Check]:
    """``GET /health`` answers 200, polled until the deadline."""
    while True:
        row = probes.probe_health(ctx.client, ctx.spec.engine)
        if row.verdict == "pass" or ctx.clock() >= ctx.deadline:
            return [row]
        ctx.sleep(HEALTH_POLL_SECONDS)


def probe_models(ctx: ProbeContext) -> list[Check]:
    """``GET /v1/models`` lists the served name with the profile's ``max_model_len``."""
    return probes.probe_models(ctx.client, ctx.spec.served_name, ctx.spec.max_model_len)


HttpProbe = Callable[[ProbeContext], list[Check]]
HTTP_PROBES: list[HttpProbe] = [probe_health, probe_models]
"""HTTP probes, run in order; the first failure stops the rest (``/health`` comes first)."""


def headline_facts(facts: BootFacts) -> dict[str, Any]:
    """The boot facts worth a column: what a per-node table and outputs show."""
    keys = ("engine_version", "kv_cache_tokens", "max_concurrency", "cudagraph_mode",
            "attention_backend", "spec_decode", "kv_cache_mib", "n_ctx")
    return {key: getattr(facts, key) for key in keys if getattr(facts, key) is not None}


def run_gate(facts: BootFacts, base_url: str, spec: GateSpec, *, deadline: float,
             client: EngineClient | None = None,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep,
             failure_class: str | None = None,
             log_tail: tuple[str, ...] = ()) -> HealthReport:
    """Every boot check, then (if the boot was ready) every HTTP probe.

    ``client`` talks to the engine at ``base_url`` (default: urllib, no API key).
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
    ctx = ProbeContext(client=client or EngineClient(base_url), spec=spec, deadline=deadline,
                       clock=clock, sleep=sleep)
    for probe in HTTP_PROBES:
        rows = probe(ctx)
        checks.extend(rows)
        if not rows_pass(rows):
            break
    return HealthReport(url=base_url, checks=tuple(checks), facts=headline_facts(facts))

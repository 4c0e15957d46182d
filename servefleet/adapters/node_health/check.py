"""One deployment's health over an open transport (:class:`DeploymentCheck`): observe, read
the log, boot checks, HTTP probes, baselines (see :mod:`servefleet.adapters.node_health`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servefleet.adapters.boot_follow import (
    BOOT_DEADLINE,
    CONNECTION_LOST,
    ENGINE_EXITED,
    follow_boot,
)
from servefleet.adapters.health_gate import BOOT_CHECKS, GateSpec, check_outcome, headline_facts
from servefleet.adapters.lock import NodeLock
from servefleet.adapters.node_health.options import HealthOptions, api_key_for
from servefleet.adapters.node_health.read import (
    LOG_TIMEOUT_SECONDS,
    TAIL_EVIDENCE,
    NodeRead,
    _tail,
    epoch_of,
    parse_lines,
    parse_read,
    read_log_and_baselines,
    since_of_stamp,
    split_runs,
    write_baselines,
)
from servefleet.adapters.observe import observe_node
from servefleet.adapters.probes import EngineClient, run_probes
from servefleet.adapters.runtime import Transport
from servefleet.core.baselines import (
    check_against_baseline,
    check_smaller_than,
    record,
    record_image,
)
from servefleet.core.bootlog import BootFacts
from servefleet.core.bootlog.phase import boot_phase
from servefleet.core.errors import LockHeld
from servefleet.core.expectations import ExpectedHealth, derive_expectations
from servefleet.core.health_table import CheckRow, DeploymentHealth, HealthRow, rows_pass
from servefleet.core.kvplan.gate import check_against_prediction, expectations_with_prediction
from servefleet.core.models import Node, Profile
from servefleet.core.observed import ObservedContainer, ObservedNode
from servefleet.core.observed.serving import Serving, engine_container, serving
from servefleet.core.project import PROFILES_DIR, Project, profile_identity

RESTART_POLICY = "on-failure:3"
"""The rendered compose file's restart policy: Docker gives up after three restarts."""
RELOG_GRACE_SECONDS = 1.0
"""After the engine stopped answering, wait this long so its dying words reach the log."""


def _fail(node: str, deployment: str, fact: str, expected: str, observed: str,
          *evidence: str, **extra: Any) -> DeploymentHealth:
    return DeploymentHealth(node=node, deployment=deployment,
                            rows=(CheckRow(fact, expected, observed, "fail", evidence),),
                            **extra)


def _evidence_lines(facts: BootFacts, *keys: str) -> tuple[str, ...]:
    seen: dict[int, str] = {}
    for key in keys:
        for item in facts.evidence.get(key, ()):
            seen.setdefault(item.line, f"L{item.line}: {item.text}")
    return tuple(list(seen.values())[:TAIL_EVIDENCE])


class DeploymentCheck:
    """Checks one deployment of one node over an open transport."""

    def __init__(self, project: Project | None, node: Node, deployment: str,
                 transport: Transport, options: HealthOptions) -> None:
        self.project = project
        self.node = node
        self.deployment = deployment
        self.transport = transport
        self.options = options
        self.rows: list[HealthRow] = []
        self.failure_class: str | None = None
        self.boot_phase: str | None = None
        self.api_facts: dict[str, Any] = {}
        """What the engine's API states and its log may not (llama.cpp /props)."""
        self._expected: dict[str, ExpectedHealth] = {}

    def expectations(self, profile: Profile) -> ExpectedHealth:
        """The profile's expectations on this node, derived once per check (the boot
        checks, the probes and the baseline rows all read them)."""
        if profile.name not in self._expected:
            self._expected[profile.name] = derive_expectations(profile, self.node)
        return self._expected[profile.name]

    def remember_expectations(self, profile: Profile, expected: ExpectedHealth) -> None:
        """Use ``expected`` as ``profile``'s expectations (derived by the caller already)."""
        self._expected[profile.name] = expected

    def read(self) -> NodeRead:
        """Clock, baselines and log (one command)."""
        done = self.transport.run(read_log_and_baselines(self.node.base_dir, self.deployment),
                                  timeout=LOG_TIMEOUT_SECONDS, idempotent=True,
                                  what="read the engine log")
        return parse_read(done.stdout)

    def run(self, node_read: ObservedNode | None = None) -> DeploymentHealth:
        """Every check; see :mod:`servefleet.adapters.node_health`. ``node_read``: the
        command's read of the node (else it is read now, for this deployment)."""
        assert self.project is not None
        name, dep = self.node.name, self.deployment
        node_read = node_read or observe_node(self.transport, [dep])
        observed = node_read.deployments.get(dep)
        if observed is None or (observed.current_release is None and not observed.containers):
            return _fail(name, dep, "deployment", "deployed", "nothing deployed here")
        manifest = observed.manifest or {}
        release = observed.current_release
        profile_name = str(manifest.get("profile") or "")
        profile = self.project.profiles.get(profile_name)
        if profile is None:
            why = (f"profile {profile_name!r} of release {release} is not in the project"
                   if profile_name else f"release {release} has no readable manifest "
                   f"({observed.manifest_error or 'missing'})")
            return _fail(name, dep, "profile", "a profile of the project", why,
                         release_id=release, profile=profile_name or None)
        port = int(manifest.get("port") or self.node.ports[0])
        url = f"http://{self.node.address}:{port}"
        self.rows.extend(self.profile_rows(profile, manifest))
        # The shared serving verdict decides which container is the engine and what is
        # wrong with it; the rows below add what only health reads (log, probes, baselines).
        verdict = serving(observed)
        container = verdict.container or engine_container(observed)
        if container is None:
            self.rows.append(CheckRow("engine container", "running", observed.engine_state(),
                                      "fail"))
            return self.result(profile, release, url, {})
        read = self.read()
        earlier, current = split_runs(read.lines, container.started_at)
        self.rows.extend(self.container_rows(container, verdict, release, earlier,
                                             profile.engine))
        if verdict.state == "ungated":
            self.rows.append(CheckRow("health gate", "passed", verdict.reason, "warn",
                                      ("run servefleet deploy to put it through the gate",)))
        facts = parse_lines(current, profile.engine)
        facts, booted = self.boot_outcome(profile, container, facts, current, read)
        if booted:
            expected = self.expectations(profile)
            spec = GateSpec.for_profile(profile, self.node)
            for boot_check in BOOT_CHECKS:
                if boot_check is check_outcome:
                    continue  # already judged, with the deadline in view
                row = boot_check(facts, spec)
                if row is not None:
                    self.rows.append(row)
            probes_ok = self.probe(profile, url, container.started_at)
            self.baseline_rows(profile, facts, read, expected.kv_smaller_than)
            if probes_ok:
                self.record(profile, facts, read, release)
        return self.result(profile, release, url, {**self.api_facts, **headline_facts(facts)})

    def result(self, profile: Profile, release: str | None, url: str,
               facts: Mapping[str, Any]) -> DeploymentHealth:
        """The deployment's report, every text masked."""
        rows = tuple(self.masked_rows())
        return DeploymentHealth(node=self.node.name, deployment=self.deployment, rows=rows,
                                profile=profile.name, release_id=release, url=url,
                                failure_class=self.failure_class, facts=dict(facts),
                                boot_phase=self.boot_phase)

    def masked_rows(self) -> list[CheckRow]:
        """The rows so far, every text masked."""
        mask = self.transport.mask
        return [CheckRow(r.fact, mask(r.expected), mask(r.observed), r.verdict,
                         tuple(mask(e) for e in r.evidence)) for r in self.rows]

    # -- the parts ------------------------------------------------------------------------
    def profile_rows(self, profile: Profile, manifest: Mapping[str, Any]) -> list[CheckRow]:
        """The running release's profile against git and the stack."""
        rows = []
        identity = profile_identity(profile)
        running = str(manifest.get("profile_identity") or "")
        if running == identity:
            rows.append(CheckRow("profile", f"{profile.name} as in git",
                                 f"{profile.name} ({identity[:12]})", "pass"))
        else:
            rows.append(CheckRow("profile", f"{profile.name} as in git",
                                 f"{profile.name}, another version ({running[:12] or '-'})",
                                 "warn", ("the running release was rendered from a different "
                                          "version of the profile: `servefleet plan` shows "
                                          "the difference; checked against git's version",)))
        stack = self.project.stack if self.project else None
        wanted = [d.profile for d in (stack.deployments if stack else [])
                  if d.node == self.node.name and d.name == self.deployment]
        if stack is not None and wanted and wanted[0] != profile.name:
            rows.append(CheckRow("stack placement", wanted[0], profile.name, "warn",
                                 (f"stack {stack.stack!r} places {wanted[0]} "
                                  f"here; `servefleet deploy {self.node.name}` applies it",)))
        return rows

    def container_rows(self, container: ObservedContainer, verdict: Serving,
                       release: str | None, earlier: Sequence[bytes],
                       engine: str) -> list[CheckRow]:
        """The container runs the current release and has not been restarted."""
        rows = []
        state = container.status
        if container.running:
            docker_unhealthy = verdict.state == "unhealthy"
            rows.append(CheckRow("engine container", "running", "running"
                                 + (f" ({container.health})" if container.health else ""),
                                 "fail" if docker_unhealthy else "pass",
                                 (verdict.reason,) if docker_unhealthy else ()))
        else:
            detail = "OOM-killed, " if container.oom_killed else ""
            rows.append(CheckRow("engine container", "running",
                                 f"{state} ({detail}exit {container.exit_code})", "fail"))
        if verdict.state == "other-release":
            rows.append(CheckRow("running release", release or "?",
                                 container.release_id or "?", "fail",
                                 ("the container was started from another release than "
                                  "`current` names",)))
        if not container.restart_count:
            rows.append(CheckRow("engine restarts", "0", f"0 (policy {RESTART_POLICY})",
                                 "pass"))
        else:
            before = parse_lines(earlier, engine) if earlier else None
            observed = (f"restarted {container.restart_count} time(s) (policy "
                        f"{RESTART_POLICY})")
            evidence: tuple[str, ...] = ()
            if before is not None and before.outcome == "failed":
                cls = before.failure_class.value if before.failure_class else "failed"
                observed += f"; an earlier run failed: {cls}"
                evidence = _evidence_lines(before, "outcome", "failure_reason")
                self.failure_class = self.failure_class or cls
            elif earlier:
                evidence = _tail(earlier, self.transport.mask)
            rows.append(CheckRow("engine restarts", "0", observed, "fail", evidence))
        return rows

    def boot_outcome(self, profile: Profile, container: ObservedContainer, facts: BootFacts,
                     current: Sequence[bytes], read: NodeRead) -> tuple[BootFacts, bool]:
        """The outcome row of the current run; follows a boot in progress with ``wait``.
        Returns the facts and whether the engine is ready."""
        spec = GateSpec.for_profile(profile, self.node)
        deadline = profile.health.boot_deadline_seconds
        started = epoch_of(container.started_at)
        elapsed = (read.now - started) if read.now is not None and started is not None else None
        tail = _tail(current, self.transport.mask)
        exited = not container.running
        lost = False
        if facts.outcome == "incomplete" and container.running and self.options.wait and \
                (elapsed is None or elapsed < deadline):
            remaining = deadline - (elapsed or 0.0)
            limit = remaining if self.options.wait_seconds is None else \
                min(remaining, self.options.wait_seconds)
            begin = self.options.clock()
            booted = follow_boot(self.transport, self.deployment,
                                 since_of_stamp(container.started_at), engine=profile.engine,
                                 deadline=begin + limit, clock=self.options.clock,
                                 sleep=self.options.sleep)
            facts, tail = booted.facts, booted.tail
            if elapsed is not None:
                elapsed += self.options.clock() - begin
            if booted.failure_class == BOOT_DEADLINE and limit >= remaining:
                elapsed = float(deadline)
            exited = booted.failure_class == ENGINE_EXITED
            lost = booted.failure_class == CONNECTION_LOST
        row = check_outcome(facts, spec)
        if facts.outcome == "ready":
            self.rows.append(row)
            return facts, container.running
        if facts.outcome == "failed":
            self.failure_class = facts.failure_class.value if facts.failure_class else "failed"
            self.rows.append(row)
            return facts, False
        if exited:
            self.failure_class = self.failure_class or ENGINE_EXITED
            observed = f"incomplete: the engine exited ({ENGINE_EXITED})"
        elif lost:
            self.failure_class = self.failure_class or CONNECTION_LOST
            observed = f"unknown: the node stopped answering ({CONNECTION_LOST})"
        elif elapsed is not None and elapsed >= deadline:
            self.failure_class = BOOT_DEADLINE
            observed = (f"incomplete after {elapsed:.0f} s: past the {deadline} s deadline "
                        f"({BOOT_DEADLINE})")
        else:
            # Inside its deadline a boot in progress is not a failure: it is reported as
            # booting, with the phase its log reached (``--wait`` waits for it instead).
            self.boot_phase = boot_phase(facts)
            shown = f"{elapsed:.0f} s" if elapsed is not None else "a while"
            self.rows.append(CheckRow(row.fact, row.expected, f"booting: {self.boot_phase} "
                                      f"({shown} of the {deadline} s deadline)", "info", tail))
            return facts, False
        self.rows.append(CheckRow(row.fact, row.expected, observed, "fail", tail))
        return facts, False

    def probe(self, profile: Profile, url: str, started_at: str | float | None, *,
              basic: bool = True) -> bool:
        """The HTTP probes; when the engine stops answering, the log of the run that started
        at ``started_at`` is read again for why. Returns whether every probe passed."""
        client = EngineClient(url, api_key=api_key_for(profile, self.options.secrets))
        if self.options.http_send is not None:
            client.send = self.options.http_send
        results = run_probes(client, profile, chat=self.options.chat,
                             determinism=self.options.determinism, basic=basic,
                             expected=self.expectations(profile))
        self.rows.extend(results.rows)
        self.api_facts.update(results.facts)
        if results.engine_down:
            self.options.sleep(RELOG_GRACE_SECONDS)
            again = self.read()
            _, current = split_runs(again.lines, started_at)
            after = parse_lines(current, profile.engine)
            if after.outcome == "failed":
                cls = after.failure_class.value if after.failure_class else "failed"
                self.failure_class = cls
                self.rows.append(CheckRow(
                    "engine after probes", "alive", f"failed: {cls}", "fail",
                    _evidence_lines(after, "outcome", "failure_reason")))
        return rows_pass(results.rows)

    def baseline_rows(self, profile: Profile, facts: BootFacts, read: NodeRead,
                      kv_smaller_than: str | None) -> None:
        """The KV pool against the node's baselines."""
        if read.book_problem:
            self.rows.append(CheckRow("KV baselines file", "readable", read.book_problem,
                                      "warn"))
        identity = profile_identity(profile)
        for row in (check_against_baseline(profile, identity, facts, read.book),
                    check_smaller_than(kv_smaller_than, facts, read.book),
                    self.prediction_row(profile, facts, read)):
            if row is not None:
                self.rows.append(row)

    def prediction_row(self, profile: Profile, facts: BootFacts,
                       read: NodeRead) -> CheckRow | None:
        """The pool against the KV planner's prediction (core.kvplan.gate), calibrated on
        the node's baselines; needs the project's pinned model configs."""
        project = self.project
        expected = expectations_with_prediction(
            project.root / PROFILES_DIR if project is not None else None, profile, self.node,
            read.book, project.profiles if project is not None else None)
        return check_against_prediction(expected, facts)

    def record(self, profile: Profile, facts: BootFacts, read: NodeRead,
               release: str | None, *, image: bool = False) -> None:
        """Record the pool as the profile's baseline on the node when it should be: the
        deployment is healthy (or the operator asked to re-baseline). With ``image`` (a
        rollout's gate, which started the container itself) the image the release booted
        from is recorded too. One write for both."""
        opts = self.options
        healthy = rows_pass(self.rows)
        if not opts.record_baselines or not (healthy or opts.rebaseline):
            return
        now = opts.now()
        pool = record(read.book, profile, profile_identity(profile), facts, now=now,
                      release_id=release, deployment=self.deployment, force=opts.rebaseline)
        book = pool or read.book
        if image and healthy and release and read.image_id:
            book = record_image(book, self.deployment, release, read.image_id,
                                now=now) or book
        if book is read.book:
            return
        if image:
            # A rollout's gate: that rollout holds the node lock.
            self.transport.run(write_baselines(self.node.base_dir),
                               stdin=book.to_text().encode(), what="record the KV baseline")
        elif not self.write_locked(book.to_text().encode()):
            return
        if pool is not None:
            entry = book.baselines[profile.name]
            self.rows.append(CheckRow("KV baseline", "-", f"recorded {entry.kv_pool:,.0f} "
                                      f"{entry.unit} ({entry.recorded_at})", "info"))


    def write_locked(self, text: bytes) -> bool:
        """``servefleet health`` holds no lock: take the node lock for the write, or write
        nothing while a rollout holds it (its gate records the baseline itself)."""
        lock = NodeLock(self.transport, "health", self.options.now())
        try:
            lock.acquire()
        except LockHeld:
            self.rows.append(CheckRow("KV baseline", "-", "not recorded: a rollout holds "
                                      "the node lock", "info"))
            return False
        try:
            self.transport.run(write_baselines(self.node.base_dir), stdin=text,
                               what="record the KV baseline")
        finally:
            lock.release()
        return True

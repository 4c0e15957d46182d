"""Health of the deployments running on live nodes: what ``servefleet health`` checks.

Per deployment, over the node's one SSH connection:

1. **observe** (the rollout's read-only command): the current release, its manifest (which
   profile, which port) and the compose project's containers;
2. **read the engine's log** with timestamps, together with the node clock and the node's
   KV-pool baselines (one command); lines from before the container's last start belong
   to earlier runs (a restart means the engine died: the earlier run's failure is shown);
3. **boot checks**: the boot log of the current run parsed and held to the profile's
   expectations (the health gate's boot checks); a boot still in progress inside the
   profile's deadline is reported as *booting* with the phase its log reached (not a
   failure), or followed until ready with ``wait``;
4. **HTTP probes** (:mod:`servefleet.adapters.probes`); when the engine stops answering
   during them, the log is read again for the reason (e.g. the TurboQuant assertion);
5. **baselines** (:mod:`servefleet.core.baselines`): the KV pool against the node's baseline
   of the profile, and with speculative decoding against the profile without it; a healthy
   deployment without a baseline (or whose profile changed) records its pool as the new one.

Baselines are kept on the node, in ``<base_dir>/.servefleet-baselines.json``, written
atomically (a temporary file renamed over it). These checks are the file's only writer: the
drift check reads it. A rollout's gate (:func:`gate_checks`) also records there the image
its healthy boot ran, for the drift check's image comparison.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from servefleet.adapters import remote
from servefleet.adapters.boot_follow import (
    BOOT_DEADLINE,
    CONNECTION_LOST,
    ENGINE_EXITED,
    follow_boot,
)
from servefleet.adapters.health_gate import BOOT_CHECKS, GateSpec, check_outcome, headline_facts
from servefleet.adapters.lock import NodeLock
from servefleet.adapters.probes import API_KEY_SECRETS, EngineClient, Send, run_probes
from servefleet.adapters.ssh import SshTransport
from servefleet.core.baselines import (
    BASELINE_FILE,
    BaselineBook,
    check_against_baseline,
    check_smaller_than,
    parse_book,
    record,
    record_image,
)
from servefleet.core.bootlog import BootFacts, BootLogParser
from servefleet.core.bootlog.phase import boot_phase
from servefleet.core.errors import ConfigError, LockHeld, RemoteError, ServefleetError
from servefleet.core.expectations import derive_expectations
from servefleet.core.health_table import CheckRow, DeploymentHealth, HealthRow, rows_pass
from servefleet.core.kvplan.gate import check_against_prediction, expectations_with_prediction
from servefleet.core.models import Node, Profile
from servefleet.core.observed import ObservedContainer, ObservedDeployment, parse_observation
from servefleet.core.plan import ungated_reason
from servefleet.core.project import PROFILES_DIR, Project, profile_identity
from servefleet.core.secrets import SecretMask

LOG_TIMEOUT_SECONDS = 120
RESTART_POLICY = "on-failure:3"
"""The rendered compose file's restart policy: Docker gives up after three restarts."""
TAIL_EVIDENCE = 8
"""Last log lines shown when a log proves neither ready nor failed."""
RELOG_GRACE_SECONDS = 1.0
"""After the engine stopped answering, wait this long so its dying words reach the log."""

# -- remote commands (argv builders, as in servefleet.adapters.remote) ----------------------
READ_SCRIPT = (
    'base=$1; dep=$2; '
    "printf 'now=%s\\n' \"$(date -u +%s)\"; "
    'f=$base/' + BASELINE_FILE + '; '
    "printf 'baselines='; if [ -r \"$f\" ]; then base64 < \"$f\" | tr -d '\\n'; fi; echo; "
    'c=$(docker ps -aq --latest --filter "label=' + remote.COMPOSE_PROJECT_LABEL + '=$dep") '
    '|| exit 1; '
    "[ -n \"$c\" ] || { printf '@@no-container\\n'; exit 0; }; "
    "printf 'image=%s\\n' \"$(docker inspect --format '{{.Image}}' \"$c\" 2>/dev/null)\"; "
    "printf '@@log\\n'; exec docker logs --timestamps \"$c\" 2>&1"
)


def read_log_and_baselines(base_dir: str, deployment: str) -> list[str]:
    """Read-only: the node's clock (``now=<epoch>``), its baselines file (``baselines=`` +
    base64), the image ID of the deployment's newest container (``image=``), then ``@@log``
    and that container's log with docker's timestamps, stdout and stderr merged in order."""
    return ["sh", "-c", READ_SCRIPT, "sh", base_dir.rstrip("/"),
            remote.compose_project(deployment)]


WRITE_SCRIPT = (
    'f=$1/' + BASELINE_FILE + '; tmp=$f.tmp.$$; '
    'cat > "$tmp" && mv -f "$tmp" "$f"'
)


def write_baselines(base_dir: str) -> list[str]:
    """Replace the node's baselines file with stdin (written to a temporary file, then
    renamed, so a reader never sees half a file)."""
    return ["sh", "-c", WRITE_SCRIPT, "sh", base_dir.rstrip("/")]


# -- reading the answers ---------------------------------------------------------------------
@dataclass(frozen=True)
class NodeRead:
    """The answer of :func:`read_log_and_baselines`."""

    now: float | None
    """The node's clock (epoch seconds)."""
    book: BaselineBook
    """The node's baselines."""
    book_problem: str | None
    """Why the baselines file could not be read (then it is treated as empty)."""
    lines: tuple[bytes, ...]
    """Log lines, each starting with docker's RFC 3339 timestamp; empty: no container."""
    has_container: bool
    """The deployment has a container."""
    image_id: str | None = None
    """Image ID (``sha256:…``) of the deployment's newest container."""


def parse_read(text: bytes) -> NodeRead:
    """Split the answer of :func:`read_log_and_baselines`."""
    head, marker, log = text.partition(b"@@log\n")
    now: float | None = None
    image_id: str | None = None
    book, problem = BaselineBook(), None
    has_container = bool(marker)
    for raw in head.splitlines():
        line = raw.decode("utf-8", "replace")
        if line.startswith("now="):
            with contextlib.suppress(ValueError):
                now = float(line[4:])
        elif line.startswith("image=sha256:"):
            image_id = line[6:].strip()
        elif line.startswith("baselines=") and line[10:].strip():
            try:
                decoded = base64.b64decode(line[10:].strip(), validate=True)
            except (binascii.Error, ValueError):
                decoded = b"not base64"
            book, problem = parse_book(decoded.decode("utf-8", "replace"))
    return NodeRead(now, book, problem, tuple(log.splitlines(keepends=True)), has_container,
                    image_id)


STAMP_RE = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z\s")


def stamp_key(stamp: bytes | str) -> tuple[str, int] | None:
    """``2026-11-21T10:00:03.5Z`` → ``("2026-11-21T10:00:03", 500000000)``: comparable
    whatever the number of fraction digits (docker trims trailing zeros in ``inspect``,
    pads them in ``logs --timestamps``)."""
    raw = stamp.encode() if isinstance(stamp, str) else stamp
    match = STAMP_RE.match(raw.rstrip() + b" ")
    if match is None:
        return None
    fraction = (match.group(2) or b"").decode()
    return match.group(1).decode(), int(fraction.ljust(9, "0")) if fraction else 0


def epoch_of(stamp: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 UTC time from docker; ``None`` for docker's zero time."""
    key = stamp_key(stamp) if stamp else None
    if key is None or key[0].startswith("0001-"):
        return None
    seconds = datetime.strptime(key[0], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return seconds + key[1] / 1e9


def key_of_epoch(epoch: float) -> tuple[str, int]:
    """The :func:`stamp_key` of an epoch time."""
    moment = datetime.fromtimestamp(int(epoch), UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S"), round((epoch - int(epoch)) * 1e9)


def since_of_stamp(stamp: str | None) -> str:
    """``docker logs --since`` of a container's ``StartedAt``, to the nanosecond
    (``<seconds>.<nanoseconds>``): whole seconds would let in the last lines of the run
    before a restart, written in the same second; ``0`` (the whole log) when unknown."""
    key = stamp_key(stamp) if stamp else None
    if key is None or key[0].startswith("0001-"):
        return "0"
    seconds = datetime.strptime(key[0], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return f"{int(seconds)}.{key[1]:09d}"


def split_runs(lines: Iterable[bytes], started_at: str | float | None
               ) -> tuple[list[bytes], list[bytes]]:
    """Log lines before the container's last start (an RFC 3339 time from docker, or epoch
    seconds) — earlier runs — and since it."""
    if isinstance(started_at, int | float):
        start: tuple[str, int] | None = key_of_epoch(started_at)
    else:
        start = stamp_key(started_at) if started_at else None
    earlier: list[bytes] = []
    current: list[bytes] = []
    for line in lines:
        key = stamp_key(line)
        if start is not None and key is not None and key < start:
            earlier.append(line)
        else:
            current.append(line)
    return earlier, current


def parse_lines(lines: Iterable[bytes], engine: str) -> BootFacts:
    """Boot facts of log lines (docker timestamps are understood by the parser)."""
    parser = BootLogParser(engine if engine in ("vllm", "llama.cpp", "sglang") else "auto")
    for line in lines:
        parser.feed(line)
    return parser.close()


def _tail(lines: Sequence[bytes], mask: SecretMask, count: int = TAIL_EVIDENCE) -> tuple[str, ...]:
    shown = []
    for raw in lines[-count:]:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        key = stamp_key(raw)
        if key is not None:
            text = text.split(" ", 1)[1] if " " in text else ""
        shown.append(mask(text[-300:]))
    return tuple(shown)


# -- options ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class HealthOptions:
    """How ``servefleet health`` checks."""

    determinism: bool | None = None
    """Run the determinism probe: ``None`` = as the profile says (``health.determinism.probe``)."""
    chat: bool | None = None
    """Send the chat probe: ``None`` = as the profile says (``health.chat_probe``)."""
    wait: bool = False
    """Follow a boot in progress until it is ready (or the profile's deadline) instead of
    reporting it as booting."""
    wait_seconds: float | None = None
    """With ``wait``: follow at most this long (``None``: until the profile's deadline); a
    boot still in progress then, inside its deadline, is reported as booting."""
    record_baselines: bool = True
    """Record the KV pool of a healthy deployment that has no baseline (or a changed
    profile) on the node."""
    rebaseline: bool = False
    """Record the current pool as the baseline even when one exists (the operator accepts
    the new pool)."""
    secrets: Mapping[str, str] = field(default_factory=dict)
    """Secret values by name: API keys for the probes; all of them are masked."""
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    """Wall-clock time of recorded baselines."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic clock for deadlines."""
    sleep: Callable[[float], None] = time.sleep
    """Wait (before re-reading a log)."""
    http_send: Send | None = None
    """How probes send requests (default: urllib)."""


def api_key_for(profile: Profile, secrets: Mapping[str, str]) -> str | None:
    """The API key the engine of ``profile`` expects, when its secrets include one."""
    return next((secrets[name] for name in API_KEY_SECRETS
                 if name in profile.secret_env and secrets.get(name)), None)


# -- one deployment --------------------------------------------------------------------------
def _pick_container(observed: ObservedDeployment) -> ObservedContainer | None:
    running = [c for c in observed.containers if c.running]
    if running:
        return running[0]
    if not observed.containers:
        return None
    return max(observed.containers, key=lambda c: stamp_key(c.started_at or "") or ("", 0))


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
                 transport: SshTransport, options: HealthOptions) -> None:
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

    def read(self) -> NodeRead:
        """Clock, baselines and log (one command)."""
        done = self.transport.run(read_log_and_baselines(self.node.base_dir, self.deployment),
                                  timeout=LOG_TIMEOUT_SECONDS, idempotent=True,
                                  what="read the engine log")
        return parse_read(done.stdout)

    def run(self) -> DeploymentHealth:
        """Every check; see the module docstring."""
        assert self.project is not None
        name, dep = self.node.name, self.deployment
        text = self.transport.run(remote.observe(self.node.base_dir, [dep]), idempotent=True,
                                  what="observe the node").text()
        try:
            observed = parse_observation(text).deployments.get(dep)
        except ValueError as error:
            raise RemoteError(name, f"observe: {error}") from None
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
        container = _pick_container(observed)
        if container is None:
            self.rows.append(CheckRow("engine container", "running", observed.engine_state(),
                                      "fail"))
            return self.result(profile, release, url, {})
        read = self.read()
        earlier, current = split_runs(read.lines, container.started_at)
        self.rows.extend(self.container_rows(container, release, earlier, profile.engine))
        if container.running and observed.ungated:
            self.rows.append(CheckRow("health gate", "passed", ungated_reason(observed), "warn",
                                      ("run servefleet deploy to put it through the gate",)))
        facts = parse_lines(current, profile.engine)
        facts, booted = self.boot_outcome(profile, container, facts, current, read)
        if booted:
            expected = derive_expectations(profile, self.node)
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
        mask = self.transport.mask
        rows = tuple(CheckRow(r.fact, mask(r.expected), mask(r.observed), r.verdict,
                              tuple(mask(e) for e in r.evidence)) for r in self.rows)
        return DeploymentHealth(node=self.node.name, deployment=self.deployment, rows=rows,
                                profile=profile.name, release_id=release, url=url,
                                failure_class=self.failure_class, facts=dict(facts),
                                boot_phase=self.boot_phase)

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

    def container_rows(self, container: ObservedContainer, release: str | None,
                       earlier: Sequence[bytes], engine: str) -> list[CheckRow]:
        """The container runs the current release and has not been restarted."""
        rows = []
        state = container.status
        if container.running:
            rows.append(CheckRow("engine container", "running", "running"
                                 + (f" ({container.health})" if container.health else ""),
                                 "pass"))
        else:
            detail = "OOM-killed, " if container.oom_killed else ""
            rows.append(CheckRow("engine container", "running",
                                 f"{state} ({detail}exit {container.exit_code})", "fail"))
        if release and container.release_id and container.release_id != release:
            rows.append(CheckRow("running release", release, container.release_id, "fail",
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
                             expected=derive_expectations(profile, self.node))
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


def check_deployment(project: Project, node: Node, deployment: str, transport: SshTransport,
                     options: HealthOptions | None = None) -> DeploymentHealth:
    """The health of one deployment (see the module docstring)."""
    return DeploymentCheck(project, node, deployment, transport, options or HealthOptions()
                           ).run()


def gate_checks(transport: SshTransport, node: Node, profile: Profile, deployment: str, *,
                release_id: str | None, facts: BootFacts, base_url: str,
                since: float | None, options: HealthOptions | None = None,
                project: Project | None = None) -> tuple[list[CheckRow], str | None]:
    """What a rollout's health gate can add once its own checks passed (the boot is ready,
    ``/health`` and ``/v1/models`` answered): the rest of the HTTP probes (version, chat,
    metrics, the TurboQuant long prompt, determinism when the profile asks for it) and the
    KV pool against the node's baselines. A healthy boot's pool is recorded as the
    baseline, and the image it ran as the deployment's image (what the drift check compares
    with). ``since`` is the node time (epoch seconds) the engine was started at.

    With ``project`` (its pinned model configs), the pool is also checked against the KV
    planner's prediction, as ``servefleet health`` does.

    Returns the rows and the failure class when the engine died during the probes.
    """
    checker = DeploymentCheck(project, node, deployment, transport,
                              options or HealthOptions())
    read = checker.read()
    probes_ok = checker.probe(profile, base_url, since, basic=False)
    checker.baseline_rows(profile, facts, read,
                          derive_expectations(profile, node).kv_smaller_than)
    if probes_ok:
        checker.record(profile, facts, read, release_id, image=True)
    mask = transport.mask
    rows = [CheckRow(r.fact, mask(r.expected), mask(r.observed), r.verdict,
                     tuple(mask(e) for e in r.evidence)) for r in checker.rows]
    return rows, checker.failure_class


# -- the fleet -------------------------------------------------------------------------------
TransportFactory = Callable[[Node, SecretMask], SshTransport]


def _default_transport(node: Node, mask: SecretMask) -> SshTransport:
    return SshTransport(node, mask=mask)


def targets(project: Project, nodes: Sequence[str] | None = None,
            deployments: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Node → deployments to check: the stack's deployments on ``nodes`` (default: all),
    optionally only those named ``deployments``."""
    chosen: dict[str, list[str]] = {}
    for dep in project.deployments(list(nodes) if nodes else None):
        if deployments and dep.name not in deployments:
            continue
        chosen.setdefault(dep.node, []).append(dep.name)
    if not chosen:
        raise ConfigError(f"stack {project.stack.stack!r} places no deployment "
                          f"{'named ' + ', '.join(deployments) + ' ' if deployments else ''}"
                          f"on {', '.join(nodes or []) or 'any node'}")
    return chosen


def check_fleet(project: Project, nodes: Sequence[str] | None = None, *,
                deployments: Sequence[str] | None = None,
                options: HealthOptions | None = None,
                transport_factory: TransportFactory = _default_transport,
                ) -> list[DeploymentHealth]:
    """The health of every chosen deployment, nodes in parallel (one connection each)."""
    options = options or HealthOptions()
    chosen = targets(project, nodes, deployments)
    mask = SecretMask.from_mapping(options.secrets)

    def one(name: str) -> list[DeploymentHealth]:
        node = project.nodes[name]
        found: list[DeploymentHealth] = []
        try:
            with transport_factory(node, mask) as transport:
                for dep in chosen[name]:
                    try:
                        found.append(check_deployment(project, node, dep, transport, options))
                    except RemoteError as error:
                        # One deployment's command failed; the node may still answer.
                        found.append(DeploymentHealth(name, dep, (), error=mask(str(error))))
        except ServefleetError as error:
            done = {r.deployment for r in found}
            found += [DeploymentHealth(name, dep, (), error=mask(str(error)))
                      for dep in chosen[name] if dep not in done]
        return found

    with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
        return [r for batch in pool.map(one, list(chosen)) for r in batch]


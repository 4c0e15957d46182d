"""The plan: a pure comparison of a rendered release (desired) with a node's facts (observed).

``plan`` decides per deployment whether a deploy has anything to do, and says what changes:
the engine-flag diff (old command line from the running release's manifest against the new
one), the image, the files, and whether the engine restarts. A deploy executes a plan; a
dry run prints it.

Actions:

* ``create``: the node has no ``current`` release for the deployment.
* ``update``: ``current`` is another release, or it is the desired one but its engine is
  not running it (killed, crash-looping, unhealthy, started from another release), or its
  files were edited on the node (their sha256 differ from the rendered ones): a *repair*,
  which uploads the release again in place of the edited folder; or a secret's value on
  the node is not the one the stack gives (a rotated ``HF_TOKEN``: release ids never depend
  on secret values), found by comparing keyed digests (see :func:`rotated_secrets`) and
  repaired the same way, into a new release folder of the same configuration.
* ``unchanged``: the desired release is current and its engine runs, gated. A deploy then
  writes nothing at all on the node.
* ``adopt``: the deployment has no current release, and the container the stack names in
  ``adopt`` (started by hand) runs exactly the rendered engine command line: a deploy
  uploads the release, takes the container over as it (renamed, never restarted), gates it
  and switches ``current``. One that runs other flags is a ``create`` that stops it (kept,
  not removed) and starts the release in its place.

An engine that runs without a passed gate (no ``gated`` mark for its container: a rollout
was interrupted while it booted, or Docker restarted it since) is never ``unchanged``: the
plan says ``ungated`` and a deploy restarts it through the gate. :func:`recovery_notes`
turns a lock left by an interrupted rollout into ``repair: …`` lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from servefleet.core.envdigest import keyed_value_digests
from servefleet.core.lockinfo import LockInfo
from servefleet.core.observed import ObservedContainer, ObservedDeployment
from servefleet.core.observed.serving import serving, ungated_phrase
from servefleet.core.release_diff import (
    CurrentDiff,
    Difference,
    EngineDiff,
    FilesDiff,
    RunningDiff,
    Seen,
    Wanted,
    find,
    release_diff,
)
from servefleet.core.render import FlagDiff, RenderedRelease, diff_flags
from servefleet.core.render.engine_args import MODEL_FLAG
from servefleet.core.render.layout import ENV_FILE

Action = Literal["unchanged", "update", "create", "adopt"]


def _is_flag(token: str) -> bool:
    # "-1" (llama.cpp --reasoning-budget -1) is a value, not a flag.
    return token.startswith("-") and len(token) > 1 and not token[1].isdigit()


def flags_from_argv(argv: list[str] | tuple[str, ...]) -> dict[str, str | None]:
    """An engine command line as an ordered ``flag → value`` mapping (``None``: no value).

    The inverse of how :func:`servefleet.core.render.engine_command` flattens flags: a
    leading positional argument (vLLM's model) becomes ``--model``, ``--flag=value`` is
    split, and a flag given twice keeps its last value, as argparse does.
    """
    flags: dict[str, str | None] = {}
    tokens = list(argv)
    index = 0
    if tokens and not _is_flag(tokens[0]):
        flags[MODEL_FLAG] = tokens[0]
        index = 1
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not _is_flag(token):
            # A stray positional: keep it visible in diffs rather than drop it.
            flags[f"<arg {index}>"] = token
            continue
        name, sep, value = token.partition("=")
        if sep and name.startswith("--"):
            flags[name] = value
        elif index < len(tokens) and not _is_flag(tokens[index]):
            flags[token] = tokens[index]
            index += 1
        else:
            flags[token] = None
    return flags


@dataclass(frozen=True)
class PlanItem:
    """What a deploy would do to one deployment."""

    node: str
    """Node name."""
    deployment: str
    """Deployment name."""
    action: Action
    """``unchanged``, ``update`` or ``create``."""
    release_id: str
    """The desired release."""
    current_release: str | None
    """The release ``current`` points to on the node (``None``: none)."""
    profile: str
    """The desired profile."""
    previous_profile: str | None = None
    """The profile of the current release, from its manifest."""
    restart: bool = False
    """The engine (re)starts: the container is recreated or started again."""
    upload: bool = False
    """The desired release is sent to the node (every deploy that starts another release,
    or repairs the current one)."""
    repair: bool = False
    """A folder of the desired release is already on the node and may differ from the
    rendered files (edited there, or written with other secret values): it is moved aside
    and the rendered files take its place, unless the node finds them identical."""
    flag_diff: FlagDiff = field(default_factory=FlagDiff)
    """Engine flags added, removed and changed (empty when the old command line is unknown
    or identical)."""
    image_change: tuple[str | None, str] | None = None
    """``(old, new)`` image when it changes."""
    changed_files: tuple[str, ...] = ()
    """Release files whose content differs from the current release's."""
    reasons: tuple[str, ...] = ()
    """Why the deployment is not unchanged, one phrase each."""
    engine_state: str = "no container"
    """The engine as observed (``running``, ``exited (exit 137)``…)."""
    recovery: tuple[str, ...] = ()
    """``repair: …`` lines: what an interrupted rollout left on the node (its lock's
    recorded phase, an ungated engine), see :func:`recovery_notes`."""
    secrets_changed: tuple[str, ...] = ()
    """Secret variables whose value on the node differs from the one given (names only)."""
    adopt_container: str | None = None
    weights: str | None = None
    """What the deploy stages before the stop (``model.source``'s pin, and the pin the
    current release staged when it differs)."""
    weights_source: str | None = None
    """Where the weights come from: the hub, a neighbour, or already on the node (an
    adapter that asked the nodes says which; else the hub)."""
    """The container started by hand that the deploy adopts (``adopt``) or stops in
    favour of the release (``create``)."""
    node_baselines: Any = field(default=None, repr=False, compare=False)
    """The node's KV baselines file as observed, as JSON (for the planner's calibration)."""

    @property
    def changes(self) -> bool:
        """Anything to do."""
        return self.action != "unchanged"

    def summary_lines(self) -> list[str]:
        """Human lines: the action, why, and the flag diff."""
        head = f"{self.node}/{self.deployment}: {self.action}"
        if self.action == "unchanged":
            return [f"{head} (release {self.release_id}, {self.engine_state})",
                    *(f"  {line}" for line in self.recovery)]
        old = self.current_release or "none"
        lines = [f"{head}: release {old} -> {self.release_id}"]
        lines += [f"  {line}" for line in self.recovery]
        if self.previous_profile and self.previous_profile != self.profile:
            lines.append(f"  profile {self.previous_profile} -> {self.profile}")
        lines += [f"  {reason}" for reason in self.reasons]
        if self.image_change is not None:
            lines.append(f"  image {self.image_change[0] or '?'} -> {self.image_change[1]}")
        lines += [f"  {line}" for line in self.flag_diff.lines()]
        if self.changed_files:
            lines.append(f"  files changed: {', '.join(self.changed_files)}")
        if self.weights:
            lines.append(f"  weights: stage {self.weights}, {self.weights_source}, before "
                         "the stop")
        if self.restart:
            lines.append("  engine restarts")
        return lines

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form for ``servefleet plan --json``."""
        return {
            "node": self.node,
            "deployment": self.deployment,
            "action": self.action,
            "release_id": self.release_id,
            "current_release": self.current_release,
            "profile": self.profile,
            "previous_profile": self.previous_profile,
            "restart": self.restart,
            "upload": self.upload,
            "repair": self.repair,
            "flag_diff": self.flag_diff.to_json(),
            "image_change": list(self.image_change) if self.image_change else None,
            "changed_files": list(self.changed_files),
            "reasons": list(self.reasons),
            "engine_state": self.engine_state,
            "recovery": list(self.recovery),
            "secrets_changed": list(self.secrets_changed),
            "adopt_container": self.adopt_container,
            "weights": self.weights,
            "weights_source": self.weights_source,
        }


def _manifest_hashes(manifest: dict[str, Any]) -> dict[str, str]:
    files = manifest.get("files")
    if not isinstance(files, dict):
        return {}
    return {path: entry.get("sha256", "") if isinstance(entry, dict) else str(entry)
            for path, entry in files.items()}


def _serving_problem(observed: ObservedDeployment) -> str | None:
    """Why the deployment's engine does not serve, or None when it does (which release it
    runs is the comparer's :class:`RunningDiff`): the shared verdict
    (:func:`~servefleet.core.observed.serving.serving`) in the plan's words."""
    verdict = serving(observed)
    return None if verdict.state in ("healthy", "other-release") else verdict.reason


def _seen(observed: ObservedDeployment | None, serving_problem: str | None) -> Seen:
    if observed is None:
        return Seen(present=False)
    return Seen(current_release=observed.current_release,
                # Docker could not be asked: which release runs is not known, and the
                # engine's state is the problem to report.
                running_release=None if observed.docker_error else observed.running_release,
                file_hashes=observed.file_hashes, serving=serving_problem is None)


def _engine_problem(diffs: tuple[Difference, ...], serving_problem: str | None) -> str | None:
    """Why the current release's engine does not serve it, or None when it does."""
    running = find(diffs, RunningDiff)
    if running is not None:
        return f"engine runs release {running.have}, not the current {running.want}"
    return serving_problem if find(diffs, EngineDiff) else None


def ungated_reason(observed: ObservedDeployment) -> str:
    """Why the running engine counts as ungated, in one phrase."""
    return ungated_phrase(observed.gate_miss or "no-gate", observed.running_release,
                          observed.gated_release, observed.restart_count)


def recovery_notes(lock: LockInfo | None, observed: ObservedDeployment | None,
                   deployment: str) -> tuple[str, ...]:
    """``repair: …`` lines for a deployment a rollout may have left half-done: the lock's
    last recorded phase (``interrupted during the boot gate at <time>``) and the engine it
    left ungated. Empty when the node is not locked by a rollout of this deployment and its
    engine is gated."""
    notes: list[str] = []
    if lock is not None and lock.deployment in (None, deployment):
        holder = f"lock {lock.lock_id or '(no id)'} held by {lock.who or lock.owner}"
        if lock.abandoned:
            state = f"gave up {lock.where()}"
        elif lock.phase is None:
            state = "a rollout holds the lock " + lock.where()
        else:
            state = f"interrupted {lock.where()}, or still running"
        engine = ""
        if lock.engine_ungated and lock.release:
            engine = f"; engine {lock.release} ungated"
        notes.append(f"repair: {state} ({holder}){engine}")
    if observed is not None and observed.ungated and not any("ungated" in n for n in notes):
        notes.append(f"repair: {ungated_reason(observed)}")
    return tuple(notes)


def rotated_secrets(desired: RenderedRelease, observed: ObservedDeployment,
                    key: bytes | None) -> tuple[str, ...]:
    """Secret variables whose value in the node's current ``engine.env`` is not the one
    ``desired`` renders: the node's HMACs under ``key`` (sent with the observation) against
    the same HMACs of the rendered file. Only variables rendered with a value are compared
    (a preview render without a secret says nothing about it); empty without a key or
    without the node's answer."""
    have = observed.secret_digests
    content = desired.files.get(ENV_FILE)
    if key is None or have is None or content is None:
        return ()
    given = {line.partition("=")[0].strip() for line in
             content.decode("utf-8", "surrogateescape").splitlines()
             if "=" in line and not line.lstrip().startswith("#") and line.partition("=")[2]}
    return tuple(sorted(name for name, digest in keyed_value_digests(content, key)
                        if name in given and have.get(name) != digest))


def _weights_note(desired: RenderedRelease, observed: ObservedDeployment | None) -> str | None:
    """``<pin> (was <old pin>)``: what the deploy stages."""
    spec = desired.weights
    if spec is None:
        return None
    staged = ((observed.manifest or {}) if observed is not None else {}).get("weights")
    old = staged.get("pin") if isinstance(staged, dict) else None
    was = f" (was {old})" if isinstance(old, str) and old != spec.pin else ""
    return f"{spec.pin}{was}"


def plan(desired: RenderedRelease, observed: ObservedDeployment | None, *,
         secret_key: bytes | None = None) -> PlanItem:
    """Compare ``desired`` with what the node has for its deployment (``None``: nothing).
    ``secret_key`` is the key the observation was made with, for :func:`rotated_secrets`."""
    def item(action: Action, **details: Any) -> PlanItem:
        return PlanItem(node=desired.node, deployment=desired.deployment, action=action,
                        release_id=desired.release_id, profile=desired.profile,
                        weights=_weights_note(desired, observed),
                        weights_source=desired.weights.hub_source if desired.weights
                        else None, **details)

    serving = _serving_problem(observed) if observed is not None else None
    diffs = release_diff(Wanted(desired.release_id, desired.file_hashes),
                         _seen(observed, serving))
    current = find(diffs, CurrentDiff)
    if observed is None or (current is not None and current.have is None):
        if observed is not None and observed.adopt_candidate is not None \
                and observed.adopt_candidate.running:
            return _adopt_item(desired, observed, observed.adopt_candidate, item)
        present = observed is not None and desired.release_id in observed.releases
        state = observed.engine_state() if observed is not None else "no container"
        reason = "new deployment" if observed is None else "no current release on the node"
        return item("create", current_release=None, restart=True, upload=True,
                    repair=present,
                    reasons=(reason,), engine_state=state,
                    flag_diff=diff_flags({}, flags_from_argv(desired.engine_argv)))

    manifest = observed.manifest or {}
    previous_profile = manifest.get("profile") if isinstance(manifest.get("profile"),
                                                               str) else None
    state = observed.engine_state()
    problem = _engine_problem(diffs, serving)
    if current is None:
        files = find(diffs, FilesDiff)
        edited = files.paths if files is not None else ()
        if edited:
            # A deploy never rewrites a release folder in place: the edited one is moved
            # aside and the release uploaded again, so the node runs what git says.
            return item("update", current_release=observed.current_release,
                        previous_profile=previous_profile, restart=True, upload=True,
                        repair=True, changed_files=edited, engine_state=state,
                        reasons=(f"files edited on the node: {', '.join(edited)}",
                                 *([problem] if problem else [])))
        rotated = rotated_secrets(desired, observed, secret_key)
        if rotated:
            # Same release id, other secret values: the folder is moved aside (it holds the
            # old values) and the release uploaded again, so the engine restarts with them.
            return item("update", current_release=observed.current_release,
                        previous_profile=previous_profile, restart=True, upload=True,
                        repair=True, secrets_changed=rotated, engine_state=state,
                        reasons=(f"secret values differ (names: {', '.join(rotated)})",
                                 *([problem] if problem else [])))
        if problem is None:
            return item("unchanged", current_release=observed.current_release,
                        previous_profile=previous_profile, engine_state=state)
        return item("update", current_release=observed.current_release,
                    previous_profile=previous_profile, restart=True, upload=False,
                    reasons=(problem,), engine_state=state)

    reasons: list[str] = []
    old_argv = observed.engine_argv
    if old_argv is None:
        flag_diff = FlagDiff()
        reasons.append("current release has no readable manifest: flag diff unknown"
                       + (f" ({observed.manifest_error})" if observed.manifest_error else ""))
    else:
        flag_diff = diff_flags(flags_from_argv(old_argv), flags_from_argv(desired.engine_argv))
        if not flag_diff.empty:
            reasons.append("engine flags change")
    old_image = manifest.get("image") if isinstance(manifest.get("image"), str) else None
    image_change = (old_image, desired.image) if old_image != desired.image else None
    if image_change is not None:
        reasons.append("image changes")
    old_hashes = _manifest_hashes(manifest)
    changed = tuple(sorted(path for path in {*old_hashes, *desired.file_hashes}
                           if old_hashes.get(path) != desired.file_hashes.get(path)))
    if not reasons:
        reasons.append("release files change")
    if problem is not None:
        reasons.append(problem)
    return item(
        "update",
        current_release=observed.current_release,
        previous_profile=previous_profile,
        # Every release labels its container with its id, so a new release always
        # recreates the container: the engine restarts.
        restart=True,
        # A folder of this release already on the node (a rollback's target, or left by an
        # earlier deploy) may hold other secret values than the stack's, which only the
        # current release's digests would show: it is sent again and replaced when its
        # files differ (the node compares checksums; an identical folder is kept).
        upload=True,
        repair=desired.release_id in observed.releases,
        flag_diff=flag_diff,
        image_change=image_change,
        changed_files=changed,
        reasons=tuple(reasons),
        engine_state=state,
    )


ENTRYPOINT_WORDS_IN_COMMAND = 3
"""At most this many words of a multi-word entrypoint may lead a hand-started container's
command: ``docker run --entrypoint`` takes one word, the rest comes first in the command
(``--entrypoint python3 IMAGE /opt/wrapper.py vllm MODEL --flags…``)."""


def runs_engine_flags(command: tuple[str, ...] | list[str],
                      engine_argv: tuple[str, ...] | list[str]) -> bool:
    """Whether a container's command runs exactly the engine flags of ``engine_argv``, in
    any order and after at most :data:`ENTRYPOINT_WORDS_IN_COMMAND` leading entrypoint
    words (a hand-started engine's flags are rarely in servefleet's order)."""
    want = flags_from_argv(engine_argv)
    words = list(command)
    return any(flags_from_argv(words[skip:]) == want
               for skip in range(min(ENTRYPOINT_WORDS_IN_COMMAND, len(words)) + 1))


def _adopt_item(desired: RenderedRelease, observed: ObservedDeployment,
                container: ObservedContainer, item: Any) -> PlanItem:
    """``adopt`` when the hand-started ``container`` runs the rendered engine command line
    (the image is checked on the node, against ``docker compose config``, before it is
    taken over); else a ``create`` that stops it and starts the release instead."""
    present = desired.release_id in observed.releases
    if container.command is not None and runs_engine_flags(container.command,
                                                           desired.engine_argv):
        return item("adopt", current_release=None, restart=False, upload=True,
                    repair=present, adopt_container=container.name, engine_state="running",
                    reasons=(f"container {container.name} (started by hand) runs the "
                             "rendered engine: taken over without a restart",))
    have = flags_from_argv(container.command) if container.command is not None else None
    diff = diff_flags(have or {}, flags_from_argv(desired.engine_argv))
    why = ("its command line could not be read" if have is None
           else "it runs other engine flags")
    return item("create", current_release=None, restart=True, upload=True, repair=present,
                adopt_container=container.name, engine_state="running", flag_diff=diff,
                reasons=(f"container {container.name} (started by hand) is not adopted: {why}; "
                         "it is stopped (kept, not removed) and the release started in "
                         "its place",))

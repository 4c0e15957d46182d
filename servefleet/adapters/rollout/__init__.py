"""The rollout executor: carry out plans on nodes over SSH, safely.

Per node, over one connection:

1. **observe** (one read-only command) and **plan**; when every deployment is unchanged the
   node is left alone: no lock, no audit line, no write of any kind;
2. **lock** the node (and re-observe in the same round trip), then per changed deployment:
3. **preflight** (docker and compose present, disk space, port free), **upload** the
   release (tar on stdin into ``staging/``, checked, renamed into ``releases/``), **build**
   the overlay image if any; a current release whose files were edited on the node is
   uploaded again, its edited folder moved aside to ``releases/<id>.edited-<UTC time>``;
4. **stop** the old engine: one deployment is one compose project on one port, so the old
   and new engines can never run side by side (and a GPU rarely holds two);
5. check **GPU memory** through the NVML probe when the node has one, **up -d**, **follow
   the boot log** as it streams, run the **health gate** before the profile's deadline
   (boot-log checks, ``/health`` and ``/v1/models``), then the rest of the **health
   checks** (:func:`servefleet.adapters.node_health.gate_checks`: ``/version``, a chat
   completion, ``/metrics``, the TurboQuant long prompt, determinism when the profile asks
   for it, the KV pool against the node's baseline, which a healthy boot records);
6. **mark** the engine as gated (``gated``, ``last-good``), **switch** ``current`` (the
   commit point), then **prune** old releases and append the **audit** line; a failure
   after the switch is a warning and never undoes a healthy switch.

Images are **pulled** (and overlays built) before the old engine stops, outside the boot
deadline. Any failure once the old engine was stopped restores the release that served
before (else ``last-good``, else ``previous``: ``up -d`` of its folder, boot followed,
health gated again) and reports both the failure, with the log lines that prove it, and the
restore. ``current`` moves only after a passed gate, so it always names a release that
served.

**Interruptions.** SIGINT, SIGTERM and SIGHUP become a controlled abort (:class:`Abort`):
the phase in progress ends early, the restore runs, the audit log gets its line and the
lock is released. A second signal gives up: the audit line is written and the lock is left
in place marked ``abandoned`` with the phase, so the next ``plan`` shows what was left and
the next deploy takes the lock over and repairs it. A controller that dies without a word
leaves the lock with its last recorded phase (written before every phase that changes what
serves); the plan shows it and ``servefleet unlock NODE LOCK_ID`` removes it.

**Hooks.** Other features add steps without editing the machine: ``before_stop`` hooks run
while the old engine still serves (a failure there leaves it serving), ``after_gate`` hooks
once the new engine passed its gate, before the switch (a failure there restores).

**Layout.** :mod:`.node` is the state machine, :mod:`.steps` the frame every step runs in
(phases, interruptions, the gate), :mod:`.recovery` the failure paths, :mod:`.choose` which
release a restore or a rollback takes; the node is reached only through the runtime
protocol of :mod:`servefleet.adapters.runtime.node`, whose one implementation is Compose over
SSH (:mod:`servefleet.adapters.runtime.ssh.compose`; the remote layout is described in
:mod:`servefleet.adapters.remote`), picked by :func:`servefleet.adapters.runtime.runtime_for`.
:mod:`.fleet` holds the entry points: :func:`deploy` (the stack), :func:`deploy_node` (one
node, the deployments given), :func:`plan_fleet`, :func:`rollback` and the rest.
"""

from servefleet.adapters.rollout.choose import EDITED_MARK, choose_rollback, restore_candidate
from servefleet.adapters.rollout.control import SIGNALS, Abort, Clock
from servefleet.adapters.rollout.fleet import (
    TransportFactory,
    _node_error,
    check_rules,
    deploy,
    deploy_node,
    list_releases,
    observe_node,
    plan_fleet,
    render_for,
    rollback,
    stop_deployment,
    stream_logs,
    unlock,
)
from servefleet.adapters.rollout.node import NodeRollout, Observation
from servefleet.adapters.rollout.recovery import FAILED_STOP_GRACE_SECONDS
from servefleet.adapters.rollout.results import (
    DeploymentResult,
    DeploymentStatus,
    Failure,
    GaveUp,
    NodeResult,
    Progress,
    ProgressEvent,
    Restore,
    StepFailed,
    Strategy,
)
from servefleet.adapters.rollout.steps import RECORDED_PHASES, Hook, HookCall, RolloutHooks
from servefleet.adapters.rollout.target import Target, target_for, target_from_manifest

__all__ = [
    "EDITED_MARK", "FAILED_STOP_GRACE_SECONDS", "RECORDED_PHASES", "SIGNALS", "Abort", "Clock",
    "DeploymentResult", "DeploymentStatus", "Failure", "GaveUp", "Hook", "HookCall",
    "NodeResult", "NodeRollout", "Observation", "Progress", "ProgressEvent", "Restore",
    "RolloutHooks",
    "StepFailed", "Strategy", "Target", "TransportFactory", "_node_error", "check_rules",
    "choose_rollback", "deploy", "deploy_node", "list_releases", "observe_node", "plan_fleet",
    "render_for", "restore_candidate", "rollback", "stop_deployment", "stream_logs",
    "target_for", "target_from_manifest", "unlock",
]

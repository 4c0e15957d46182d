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

**Layout.** :mod:`.read` builds the node's commands and reads their answers (the log split
into runs, the baselines file), :mod:`.options` says how to check, :mod:`.check` checks one
deployment (:class:`DeploymentCheck`), and :mod:`.fleet` holds the entry points:
:func:`check_fleet`, :func:`check_deployment` and a rollout's :func:`gate_checks`.
"""

from servefleet.adapters.node_health.check import (
    RELOG_GRACE_SECONDS,
    RESTART_POLICY,
    DeploymentCheck,
)
from servefleet.adapters.node_health.fleet import (
    TransportFactory,
    _default_transport,
    check_deployment,
    check_fleet,
    gate_checks,
    targets,
)
from servefleet.adapters.node_health.options import HealthOptions, api_key_for
from servefleet.adapters.node_health.read import (
    LOG_TIMEOUT_SECONDS,
    READ_SCRIPT,
    STAMP_RE,
    TAIL_EVIDENCE,
    WRITE_SCRIPT,
    NodeRead,
    epoch_of,
    key_of_epoch,
    parse_lines,
    parse_read,
    read_log_and_baselines,
    since_of_stamp,
    split_runs,
    stamp_key,
    write_baselines,
)

__all__ = [
    "LOG_TIMEOUT_SECONDS", "READ_SCRIPT", "RELOG_GRACE_SECONDS", "RESTART_POLICY", "STAMP_RE",
    "TAIL_EVIDENCE", "WRITE_SCRIPT", "DeploymentCheck", "HealthOptions", "NodeRead",
    "TransportFactory", "_default_transport", "api_key_for",
    "check_deployment", "check_fleet", "epoch_of", "gate_checks", "key_of_epoch",
    "parse_lines", "parse_read", "read_log_and_baselines", "since_of_stamp", "split_runs",
    "stamp_key", "targets", "write_baselines",
]

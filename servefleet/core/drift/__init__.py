"""Drift: how a node differs from what git says it should run. Pure: data in, items out.

:class:`DesiredNode` is what the inventory, the profiles and the rendered releases promise;
:class:`NodeObservation` is what one read of the node found (gathered by
:mod:`servefleet.adapters.drift_collect`). :func:`compare` lists every difference as a
:class:`DriftItem` with a :class:`DriftKind`, the expected and the observed value and one
line for the operator. Secret values never appear: secrets are compared by sha256 and shown
as ``(secret)``.

:func:`desired_deployment` derives the desired state of one deployment from its rendered
release and, for the engine container's command, environment and labels, the engine service
as ``docker compose config`` merges the release on the node (Compose's own answer, read by
the node reader: no copy of Compose's merge rules here).

* :mod:`~servefleet.core.drift.items`: the kinds of difference and one item.
* :mod:`~servefleet.core.drift.desired`: the desired side, from a rendered release.
* :mod:`~servefleet.core.drift.observation`: the observed side (its deployments are
  :class:`~servefleet.core.observed.ObservedDeployment`, the rollout's model).
* :mod:`~servefleet.core.drift.compare`: node-wide and deployment checks.
* :mod:`~servefleet.core.drift.container`: the engine container's checks.
* :mod:`~servefleet.core.drift.report`: node status and the fleet report.
"""

from servefleet.core.drift.compare import compare, engine_version_matches
from servefleet.core.drift.container import (
    COMPOSE_LABEL_PREFIX,
    HIDDEN_SHOWN,
    SECRET_SHOWN,
    ungated_why,
)
from servefleet.core.drift.desired import (
    DesiredDeployment,
    DesiredNode,
    ImageExpectation,
    desired_deployment,
)
from servefleet.core.drift.items import ERROR_KINDS, DriftItem, DriftKind, NodeStatus
from servefleet.core.drift.observation import NodeObservation
from servefleet.core.drift.report import DriftReport, NodeReport, build_report, node_status
from servefleet.core.observed import MANIFEST_FILE
from servefleet.core.render.layout import ENV_FILE

__all__ = [
    "COMPOSE_LABEL_PREFIX",
    "ENV_FILE",
    "ERROR_KINDS",
    "HIDDEN_SHOWN",
    "MANIFEST_FILE",
    "SECRET_SHOWN",
    "DesiredDeployment",
    "DesiredNode",
    "DriftItem",
    "DriftKind",
    "DriftReport",
    "ImageExpectation",
    "NodeObservation",
    "NodeReport",
    "NodeStatus",
    "build_report",
    "compare",
    "desired_deployment",
    "engine_version_matches",
    "node_status",
    "ungated_why",
]

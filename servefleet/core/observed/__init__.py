"""Facts read from a node, and the pure parsers of the commands that read them.

Each fact comes from one remote command (built in :mod:`servefleet.adapters`) whose
output is parsed here, so a parser is tested with plain data: output in, fact out.

* :mod:`~servefleet.core.observed.container`: one container (``docker inspect``).
* :mod:`~servefleet.core.observed.gate`: the health gate's mark and the ungated-engine rule.
* :mod:`~servefleet.core.observed.deployment`: a deployment (with its latest boot's facts),
  the node, a release folder.
* :mod:`~servefleet.core.observed.answer`: the node reader's answer (the one read of a node).
* :mod:`~servefleet.core.observed.output`: the releases command's output.
* :mod:`~servefleet.core.observed.preflight`: the deploy preflight command's output.
"""

from servefleet.core.observed.answer import observed_deployment, observed_node, parse_answer
from servefleet.core.observed.container import (
    COMPOSE_SERVICE_LABEL,
    COMPOSE_WORKING_DIR_LABEL,
    RELEASE_LABEL,
    RELEASES_DIR,
    ObservedContainer,
    ObservedEnvValue,
    as_adopted,
    container_from_facts,
)
from servefleet.core.observed.deployment import (
    BootSummary,
    ComposeService,
    ObservedDeployment,
    ObservedNode,
    ReleaseInfo,
)
from servefleet.core.observed.gate import GateMiss, gate_miss, parse_gate_mark
from servefleet.core.observed.output import (
    END,
    MANIFEST_FILE,
    RELEASES_HEADER,
    parse_releases,
)
from servefleet.core.observed.preflight import PreflightFacts, parse_preflight

__all__ = [
    "COMPOSE_SERVICE_LABEL",
    "COMPOSE_WORKING_DIR_LABEL",
    "END",
    "MANIFEST_FILE",
    "RELEASES_DIR",
    "RELEASES_HEADER",
    "RELEASE_LABEL",
    "BootSummary",
    "ComposeService",
    "GateMiss",
    "ObservedContainer",
    "ObservedDeployment",
    "ObservedEnvValue",
    "ObservedNode",
    "PreflightFacts",
    "ReleaseInfo",
    "as_adopted",
    "container_from_facts",
    "gate_miss",
    "observed_deployment",
    "observed_node",
    "parse_answer",
    "parse_gate_mark",
    "parse_preflight",
    "parse_releases",
]

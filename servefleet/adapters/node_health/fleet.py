"""The entry points: the health of the fleet's deployments (:func:`check_fleet`), of one
(:func:`check_deployment`), and what a rollout's gate adds (:func:`gate_checks`)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from servefleet.adapters.node_health.check import DeploymentCheck
from servefleet.adapters.node_health.options import HealthOptions
from servefleet.adapters.observe import observe_node
from servefleet.adapters.runtime import Transport, TransportFactory, open_transport
from servefleet.core.bootlog import BootFacts
from servefleet.core.errors import ConfigError, RemoteError, ServefleetError
from servefleet.core.expectations import ExpectedHealth
from servefleet.core.health_table import CheckRow, DeploymentHealth
from servefleet.core.models import Node, Profile
from servefleet.core.observed import ObservedNode
from servefleet.core.project import Project
from servefleet.core.secrets import SecretMask


def check_deployment(project: Project, node: Node, deployment: str, transport: Transport,
                     options: HealthOptions | None = None,
                     observed: ObservedNode | None = None) -> DeploymentHealth:
    """The health of one deployment (see :mod:`servefleet.adapters.node_health`).
    ``observed``: the command's read of the node (else it is read now)."""
    return DeploymentCheck(project, node, deployment, transport, options or HealthOptions()
                           ).run(observed)


def gate_checks(transport: Transport, node: Node, profile: Profile, deployment: str, *,
                release_id: str | None, facts: BootFacts, base_url: str,
                since: float | None, options: HealthOptions | None = None,
                project: Project | None = None,
                expected: ExpectedHealth | None = None) -> tuple[list[CheckRow], str | None]:
    """What a rollout's health gate can add once its own checks passed (the boot is ready,
    ``/health`` and ``/v1/models`` answered): the rest of the HTTP probes (version, chat,
    metrics, the TurboQuant long prompt, determinism when the profile asks for it) and the
    KV pool against the node's baselines. A healthy boot's pool is recorded as the
    baseline, and the image it ran as the deployment's image (what the drift check compares
    with). ``since`` is the node time (epoch seconds) the engine was started at.

    With ``project`` (its pinned model configs), the pool is also checked against the KV
    planner's prediction, as ``servefleet health`` does. ``expected``: the profile's
    expectations as the gate derived them (then they are not derived again).

    Returns the rows and the failure class when the engine died during the probes.
    """
    checker = DeploymentCheck(project, node, deployment, transport,
                              options or HealthOptions())
    if expected is not None:
        checker.remember_expectations(profile, expected)
    read = checker.read()
    probes_ok = checker.probe(profile, base_url, since, basic=False)
    checker.baseline_rows(profile, facts, read, checker.expectations(profile).kv_smaller_than)
    if probes_ok:
        checker.record(profile, facts, read, release_id, image=True)
    return checker.masked_rows(), checker.failure_class



def _default_transport(node: Node, mask: SecretMask) -> Transport:
    return open_transport(node, mask)


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
                # One read of the node for all its deployments.
                observed = observe_node(transport, chosen[name])
                for dep in chosen[name]:
                    try:
                        found.append(check_deployment(project, node, dep, transport, options,
                                                      observed))
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

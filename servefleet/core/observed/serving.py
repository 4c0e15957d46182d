"""The one serving verdict of a deployment: does its engine serve the current release, gated?

``plan``, ``health``, drift and the Pulumi providers used to judge this each in their own way
(one saw a Docker ``unhealthy`` container as a problem, another as serving; one picked the
first running container, another the one the node reader named). :func:`serving` is the rule
they share; each puts its :class:`Serving` into its own words and adds only what it alone
reads (``health``'s probes and baselines, drift's command line and image).

The rule, first match wins:

1. nothing deployed → ``absent``;
2. Docker could not be asked → ``unknown``;
3. no container runs → ``down`` (the container's own state: exited, OOM-killed);
4. the running container is from another release than the current one → ``other-release``;
5. Docker's healthcheck says ``unhealthy`` → ``unhealthy``;
6. where the boot log was read: its boot did not reach ``ready`` → ``unhealthy``;
7. where the API was asked: it did not answer → ``unhealthy``;
8. the running container misses its gate mark (:func:`~servefleet.core.observed.gate.
   gate_miss`) → ``ungated`` (judged only where the deployment's folder, which holds the
   mark, was there to read);
9. otherwise ``healthy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servefleet.core.observed.container import ObservedContainer
from servefleet.core.observed.deployment import ObservedDeployment
from servefleet.core.observed.gate import GateMiss, gate_miss

ServingState = Literal["absent", "unknown", "down", "other-release", "unhealthy", "ungated",
                       "healthy"]


@dataclass(frozen=True)
class Evidence:
    """What the read behind an observation asked the node, beyond the containers and the
    release links every read has: a rule about a fact that was not read does not apply."""

    boot_log: bool = False
    """The latest boot's log was read (:attr:`ObservedDeployment.boot`)."""
    api: bool = False
    """The engine's API was asked for its version (:attr:`ObservedDeployment.engine_version`)."""


LINKS_ONLY = Evidence()
"""The rollout's and ``plan``'s read: containers, release links and the gate mark."""
FULL = Evidence(boot_log=True, api=True)
"""Drift's and the Pulumi providers' read: the boot log and the API as well."""


@dataclass(frozen=True)
class Serving:
    """A deployment's serving verdict: its state and the reason in one phrase."""

    state: ServingState
    reason: str
    """Why the state is what it is (``""`` when healthy)."""
    container: ObservedContainer | None = None
    """The container the verdict is about (:func:`engine_container`)."""
    miss: GateMiss | None = None
    """How the running engine misses its gate mark (``ungated`` only)."""

    @property
    def healthy(self) -> bool:
        """The engine serves the current release and passed its gate."""
        return self.state == "healthy"

    def words(self) -> str:
        """``state: reason`` (``healthy`` alone): the Pulumi providers' ``health`` output."""
        return self.state if self.healthy else f"{self.state}: {self.reason}"


def engine_container(have: ObservedDeployment) -> ObservedContainer | None:
    """The container that serves the deployment: the one the node reader named, else the
    first running one, else the first seen (a stopped engine). One pick for every reader."""
    named = have.engine_container
    if named is not None:
        return named
    return have.running_container or (have.containers[0] if have.containers else None)


def ungated_phrase(miss: GateMiss, release: str | None, gated_release: str | None,
                   restarts: int) -> str:
    """How a running engine of ``release`` misses its gate mark, in one phrase."""
    label = release or "?"
    if miss == "no-gate":
        return f"engine {label} ungated (no passed health gate recorded)"
    if miss == "other-release":
        return f"engine {label} ungated (the last gate passed for {gated_release})"
    return (f"engine {label} ungated (started again since its gate passed, {restarts} "
            "Docker restarts)")


def serving(have: ObservedDeployment | None, evidence: Evidence = LINKS_ONLY) -> Serving:
    """The verdict of the module docstring's rule for one observed deployment."""
    if have is None or (not have.present and not have.containers) or (
            have.current_release is None and not have.containers):
        return Serving("absent", "nothing deployed")
    if have.docker_error:
        return Serving("unknown", f"engine state unknown (docker: {have.docker_error})")
    container = engine_container(have)
    if container is None:
        return Serving("down", "engine not running (no container)")
    if not container.running:
        return Serving("down", f"engine not running ({have.engine_state()})", container)
    if have.current_release is not None and container.release_id != have.current_release:
        return Serving("other-release", f"engine runs release {container.release_id or '?'}, "
                       f"not the current {have.current_release}", container)
    if container.health == "unhealthy":
        return Serving("unhealthy", "engine is unhealthy (Docker healthcheck)", container)
    if evidence.boot_log:
        if have.boot is None:
            return Serving("unhealthy", "no boot log", container)
        if have.boot.outcome not in (None, "ready"):
            return Serving("unhealthy", f"boot {have.boot.outcome}", container)
    if evidence.api and have.engine_version is None:
        return Serving("unhealthy", "HTTP API not answering "
                       f"({have.engine_version_error or '?'})", container)
    miss = gate_miss(container.release_id, container.started_at, have.gated_release,
                     have.gated_started_at) if have.present else None
    if miss is not None:
        return Serving("ungated", ungated_phrase(miss, container.release_id,
                                                 have.gated_release, have.restart_count),
                       container, miss)
    return Serving("healthy", "", container)

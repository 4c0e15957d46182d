"""How hard a command tries to open a node's SSH connection.

A rollout (``deploy``, ``rollback``…) retries a transient network error with backoff: a
node that blinks must not fail a release. A read-only look (``plan``, ``health``,
``probe``, ``logs``, ``drift``, ``history``, ``releases``, ``doctor``, ``watch --once``)
makes one short attempt per node instead, so that a node that is down costs a few
seconds, not a retry ladder, and is reported in one line.

The CLI picks the policy for the command it runs (:data:`READ_ONLY_COMMANDS`) and puts
the default back when the command ends; the node's transport (SSH today,
:mod:`servefleet.adapters.runtime.ssh`) reads :func:`current`. Pure data: nothing here
touches the network.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectPolicy:
    """Connect attempts and the longest wait per attempt."""

    attempts: int | None
    """Attempts per connect; ``None``: the caller's own (a rollout's: 4)."""
    timeout_seconds: float | None
    """The most an attempt waits (TCP connect, SSH banner, authentication), whatever the
    node's ``ssh.connect_timeout_seconds`` says; ``None``: the node's own."""

    def attempts_for(self, requested: int) -> int:
        """The attempts a connect makes when its caller asks for ``requested``."""
        return requested if self.attempts is None else min(self.attempts, requested)

    def timeout_for(self, node_seconds: float) -> float:
        """The per-attempt wait for a node whose inventory says ``node_seconds``."""
        return node_seconds if self.timeout_seconds is None else \
            min(node_seconds, self.timeout_seconds)


ROLLOUT = ConnectPolicy(attempts=None, timeout_seconds=None)
"""The default: the caller's attempts (retried with backoff), the node's timeout."""
READ_ONLY_CONNECT_SECONDS = 3.0
"""The longest one read-only connect attempt waits."""
READ_ONLY = ConnectPolicy(attempts=1, timeout_seconds=READ_ONLY_CONNECT_SECONDS)
"""Read-only commands: one attempt of at most :data:`READ_ONLY_CONNECT_SECONDS`."""
READ_ONLY_COMMANDS = frozenset({"plan", "health", "probe", "logs", "drift", "history",
                                "releases", "doctor"})
"""Commands that only read the nodes (``watch --once`` chooses it itself)."""

_current = ROLLOUT


def current() -> ConnectPolicy:
    """The policy of the command running now."""
    return _current


def use(policy: ConnectPolicy) -> None:
    """Make ``policy`` the one :func:`current` returns (the CLI, per command)."""
    global _current
    _current = policy

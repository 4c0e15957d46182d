"""One exception tree for everything servefleet reports to an operator.

The CLI prints ``str(error)`` as one line for every :class:`ServefleetError`; the full
traceback only with ``--verbose``. Messages never contain secret values.
"""

from __future__ import annotations


class ServefleetError(Exception):
    """Base of every error servefleet knows how to explain in one line."""

    exit_code: int = 1


class ConfigError(ServefleetError):
    """An inventory, profile or stack file is wrong.

    ``problems`` holds one line per problem, each naming the file and the field.
    """

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class ValidationFailed(ConfigError):
    """One or more validation rules reported errors."""


class RenderError(ServefleetError):
    """A template could not be rendered from the given inputs."""


class RemoteError(ServefleetError):
    """A command on a node failed; carries the exit status and the tail of stderr."""

    def __init__(self, node: str, what: str, exit_status: int | None = None,
                 stderr_tail: str = "") -> None:
        self.node = node
        self.what = what
        self.exit_status = exit_status
        self.stderr_tail = stderr_tail
        detail = f" (exit {exit_status})" if exit_status is not None else ""
        tail = f": {stderr_tail.strip()}" if stderr_tail.strip() else ""
        super().__init__(f"{node}: {what}{detail}{tail}")


class CommandTimedOut(RemoteError):
    """A command on a node ran past its timeout and was stopped there (not a dropped
    connection: it is never retried)."""


class ConnectionLost(RemoteError):
    """The SSH connection dropped while a command ran or a log streamed."""


class HostKeyMismatch(ServefleetError):
    """The node presented a host key other than the one pinned in the inventory."""


class HostKeyTypeNotPinned(HostKeyMismatch):
    """The node offers only host-key types of which the inventory pins none."""


class UnreachableNode(ServefleetError):
    """The node could not be reached over SSH."""


class LockHeld(ServefleetError):
    """Another deploy holds the node's lock."""


class HealthGateFailed(ServefleetError):
    """A deployment booted but did not pass its health gate."""


class SimError(ServefleetError):
    """The simulated fleet could not be started, stopped or inspected."""


class BootLogError(ServefleetError):
    """An engine boot log could not be read."""

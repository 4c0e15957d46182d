"""What the Pulumi providers share: their create and update, Pulumi's values read back,
engine flags as a property, quiet libraries and the progress lines ``pulumi up`` shows."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import pulumi.dynamic

from servefleet.core.errors import ServefleetError
from servefleet.core.secrets import SecretMask


class ServefleetProvider(pulumi.dynamic.ResourceProvider):
    """A servefleet resource's provider: ``create`` and ``update`` roll the resource out
    through :meth:`apply` and report servefleet's own error as it is. Stateless: it holds
    no attribute, and every value it needs comes from the resource's properties."""

    # The pickled provider holds nothing secret: keep it readable in the state, and let
    # Pulumi mark it secret only if a secret was ever captured by mistake.
    serialize_as_secret_always = False

    def apply(self, props: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
        """Roll the resource out to ``props`` (``previous``: its inputs before an update)
        and return its outputs."""
        raise NotImplementedError

    def resource_id(self, props: dict[str, Any]) -> str:
        """The id Pulumi keeps for a resource created from ``props``."""
        raise NotImplementedError

    def _applied(self, props: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
        try:
            return self.apply(props, previous)
        except ServefleetError as error:
            # Pulumi shows the traceback: keep it to this frame and the message.
            raise error.with_traceback(None) from None

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        """Roll the new resource out."""
        return pulumi.dynamic.CreateResult(id_=self.resource_id(props),
                                           outs=self._applied(props, None))

    def update(self, _id: str, _olds: dict[str, Any],
               _news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        """Roll the resource to its new inputs (gated; what ran before restored on failure)."""
        return pulumi.dynamic.UpdateResult(outs=self._applied(_news, _olds))


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _int(value: Any) -> int | None:
    """Pulumi hands numbers over as floats: ``8000.0`` is the port 8000."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    return None


def flags_property(flags: Mapping[str, str | None]) -> dict[str, str | bool]:
    """Engine flags as a Pulumi property: a flag without a value is ``true`` (Pulumi drops
    ``null`` map entries, which would hide ``--enable-prefix-caching`` from state and diff)."""
    return {flag: True if value is None else value for flag, value in flags.items()}


def with_outputs(props: dict[str, Any], unlock_id: str | None, secrets: Any,
                 output_keys: tuple[str, ...]) -> dict[str, Any]:
    """A resource's input properties completed: the unlock id and the secrets when given,
    plus the declared outputs (``None``)."""
    if unlock_id:
        props["unlockId"] = unlock_id
    if secrets is not None:
        props["secrets"] = secrets
    for key in output_keys:
        props[key] = None
    return props


def plain_inputs(props: Mapping[str, Any], output_keys: tuple[str, ...]) -> dict[str, Any]:
    """The inputs echoed into the outputs: all but the secrets and the provider blob."""
    return {k: v for k, v in props.items()
            if k not in ("secrets", "__provider", "unlockId", *output_keys)}


SHOWN_PHASES = frozenset({"build", "stop", "up", "restore", "done", "failed"})
"""Rollout phases reported while ``pulumi up`` runs (the boot log's own lines are not)."""


def _quiet_libraries() -> None:
    """paramiko logs every retried connection attempt with a traceback; the provider host
    has no logging set up, so Python would print them and Pulumi would show them. The
    transport's own error, after its retries, is what the operator needs."""
    quiet = logging.getLogger("paramiko")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False


def progress_printer(mask: SecretMask) -> Callable[[Any], None]:
    """A rollout progress callback printing one line per phase to stderr, which Pulumi
    shows while the update runs."""

    def show(event: Any) -> None:
        if event.phase not in SHOWN_PHASES:
            return
        where = f"{event.node}/{event.deployment}" if event.deployment else event.node
        detail = f": {event.message}" if event.message else ""
        line = mask(f"servefleet: {where}: {event.phase}{detail} ({event.elapsed:.1f} s)\n")
        # One write per line: nodes roll out in parallel threads of the provider host.
        try:
            sys.stderr.flush()
            os.write(sys.stderr.fileno(), line.encode("utf-8", "replace"))
        except (OSError, ValueError):  # a stderr without a file descriptor (captured)
            sys.stderr.write(line)

    return show

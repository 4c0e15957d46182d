"""Secret values: kept out of every log line, rendered file, state and exception.

A :class:`SecretMask` knows the secret values in play and replaces them with ``***`` in
any text before it is printed or raised. Secrets are compared by sha256, never shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servefleet.core.models import Profile

MASK = "***"


def secret_digest(value: str) -> str:
    """sha256 of a secret value, for comparisons on the control machine only (drift compares
    a container's environment with it); never written to a manifest, plan or output."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


class SecretMask:
    """Replaces known secret values in text."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is masked whole.
        self._values = sorted({v for v in values if v and len(v) >= 4}, key=len, reverse=True)

    @classmethod
    def from_mapping(cls, secrets: Mapping[str, str] | None) -> SecretMask:
        """A mask for every value of ``secrets``."""
        return cls((secrets or {}).values())

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        return text

    def bytes(self, data: bytes) -> bytes:
        """Mask secret values inside raw bytes."""
        for value in self._values:
            data = data.replace(value.encode(), MASK.encode())
        return data


def optional_blanks(profiles: Iterable[Profile], values: Mapping[str, str]) -> dict[str, str]:
    """``values`` plus an empty value for each secret the ``profiles`` list that is not
    given and that none of them needs (a public model's ``HF_TOKEN``:
    :meth:`~servefleet.core.models.Profile.needs_secret`): the env file then carries it
    empty, which the engine's hub client reads as no token. A secret some profile needs
    stays missing, for the caller to name."""
    chosen = list(profiles)
    needed = {name for profile in chosen for name in profile.secret_env
              if profile.needs_secret(name)}
    blanks = {name: "" for profile in chosen for name in profile.secret_env
              if name not in needed and not values.get(name)}
    return {**values, **blanks}

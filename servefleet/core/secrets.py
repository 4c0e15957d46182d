"""Secret values: kept out of every log line, rendered file, state and exception.

A :class:`SecretMask` knows the secret values in play and replaces them with ``***`` in
any text before it is printed or raised. Secrets are compared by sha256, never shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

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

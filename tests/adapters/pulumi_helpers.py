"""What the Pulumi tests share: properties as Pulumi hands them over, a current event loop
for Pulumi's runtime, and its mock monitor keeping secrets wrapped."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, TypeVar

import pulumi.runtime
import pytest
from pulumi.runtime import rpc

M = TypeVar("M", bound=pulumi.runtime.Mocks)


def as_pulumi_sends(props: dict[str, Any]) -> dict[str, Any]:
    """``props`` after Pulumi's RPC encoding and decoding (what a provider method gets:
    numbers arrive as floats)."""
    # A loop of its own: asyncio.run() would leave the thread without a current loop, which
    # Pulumi's mocks in later tests of the same session expect to find.
    loop = asyncio.new_event_loop()
    try:
        struct = loop.run_until_complete(rpc.serialize_properties(props, {}))
    finally:
        loop.close()
    return dict(rpc.deserialize_properties(struct))


def ensure_event_loop() -> None:
    """Pulumi's runtime wants a current event loop; an earlier ``asyncio.run()`` anywhere in
    the session leaves none."""
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
        if loop.is_closed():
            raise RuntimeError("closed")
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


def keep_secret_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the mock monitor keep secrets wrapped, so a test can see which inputs are
    secret (it unwraps them otherwise)."""
    original = rpc.deserialize_properties

    def deserialize(props: Any, keep_unknowns: bool | None = None,
                    keep_internal: bool | None = True) -> Any:
        return original(props, keep_unknowns, keep_internal)

    monkeypatch.setattr(rpc, "deserialize_properties", deserialize)


def mocked_runtime(monkeypatch: pytest.MonkeyPatch, recording: M, stack: str,
                   hf_token: str) -> Iterator[M]:
    """Pulumi's runtime on the mock monitor ``recording`` (secrets kept wrapped), with
    ``hf_token`` as the secret ``servefleet:hfToken``; a fixture's body: ``yield from``."""
    keep_secret_markers(monkeypatch)
    pulumi.runtime.set_mocks(recording, project="servefleet", stack=stack, preview=False)
    pulumi.runtime.set_all_config({"servefleet:hfToken": hf_token},
                                  secret_keys=["servefleet:hfToken"])
    yield recording
    pulumi.runtime.set_all_config({})

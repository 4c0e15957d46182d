"""Weights copied from a neighbour (:mod:`servefleet.adapters.weights.peers`), against a
real OpenSSH server on a loopback port as the neighbour and the fake node as the node that
copies: the real ``ssh-keygen``, ``rsync`` and ``ssh``, the neighbour's real
``authorized_keys`` (the one its sshd reads).

The one-copy key is written restricted (``restrict,from="<the node's addresses>"``) and
sshd enforces it; it is removed from the neighbour after a copy that succeeded, failed or
was cut (an interrupt, a dropped link, a timeout); a failed copy leaves the fetch to the
hub.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from fake_node import FakeNodeTransport, Fault, FaultKind
from loopback_sshd import LoopbackSshd

from servefleet.adapters.health_gate import GateSpec
from servefleet.adapters.rollout import Target
from servefleet.adapters.runtime import CommandResult
from servefleet.adapters.runtime.ssh.compose import ComposeSshRuntime
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.adapters.weights.peers import Holder, PeerCopy
from servefleet.core.errors import CommandTimedOut, ConnectionLost, RemoteError
from servefleet.core.models import Node, Profile
from servefleet.core.project import load_project
from servefleet.core.render.weights import WeightsSpec, weights_for
from tests.reference_project import REPO_ROOT

FILE = "Qwen3.6-35B-A3B-Q4_K_M.gguf"
NONCE_PREFIX = "servefleet-weights-"
COPY = "copy the weights from holder"


@dataclasses.dataclass
class Bed:
    """The neighbour that holds the weights (the loopback sshd), the node that copies
    them (the fake node: the local ``sh``), and the profile that pins them."""

    sshd: LoopbackSshd
    holder: Node
    receiver: Node
    profile: Profile
    weights: bytes
    tmp: Path

    @property
    def keys_file(self) -> Path:
        """The neighbour's authorized keys: the file its sshd reads."""
        return self.sshd.folder / "authorized_keys"

    def copy_keys(self) -> list[str]:
        """The one-copy keys in the neighbour's authorized keys now."""
        return [line for line in self.keys_file.read_text().splitlines()
                if NONCE_PREFIX in line]

    def spec(self, node: Node) -> WeightsSpec:
        spec = weights_for(self.profile, node)
        assert spec is not None
        return spec

    def holding(self) -> Holder:
        return Holder(self.holder, self.spec(self.holder), (FILE,), len(self.weights))

    def received(self) -> Path:
        assert self.receiver.models_dir is not None
        return Path(self.receiver.models_dir) / FILE



@dataclasses.dataclass
class CopyingNode(FakeNodeTransport):
    """The fake node; keeps the folder of the one-copy key it made (its private half)."""

    key_folder: str | None = None

    def run(self, argv: Any, **kwargs: Any) -> CommandResult:
        done = super().run(argv, **kwargs)
        if kwargs.get("what") == "make a one-copy key":
            self.key_folder = done.text().strip().splitlines()[-1]
        return done

    def key_left(self) -> bool:
        """Whether the key's folder is still on the node."""
        assert self.key_folder is not None and self.key_folder.startswith("/tmp/")
        return Path(self.key_folder).exists()


class Neighbour:
    """The neighbour's real SSH transport; after the command that allows the key, the
    authorized keys line it wrote is kept (to read the restriction as written)."""

    def __init__(self, bed: Bed) -> None:
        self.bed = bed
        self.inner = SshTransport(bed.holder)
        self.node = bed.holder
        self.allowed: list[str] = []
        self.commands: list[str] = []

    def run(self, argv: Any, **kwargs: Any) -> CommandResult:
        done = self.inner.run(argv, **kwargs)
        self.commands.append(str(kwargs.get("what")))
        if kwargs.get("what") == "allow the one-copy key":
            self.allowed += self.bed.copy_keys()
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def bed(sshd: LoopbackSshd, tmp_path: Path) -> Bed:
    """A neighbour holding the GGUF verified (as the file fetcher leaves it), and a node
    with an empty models folder."""
    weights = os.urandom(3 * 1024 * 1024 + 17)
    sha = hashlib.sha256(weights).hexdigest()
    held = tmp_path / "holder-models"
    (held / ".servefleet").mkdir(parents=True)
    (held / FILE).write_bytes(weights)
    (held / ".servefleet" / f"{FILE}.verified").write_text(f"{sha} {FILE}\n")
    (tmp_path / "receiver-models").mkdir()
    base = sshd.node(name="holder")
    holder = base.model_copy(update={
        "models_dir": str(held),
        "ssh": base.ssh.model_copy(update={"authorized_keys": str(tmp_path / "sshd" /
                                                                  "authorized_keys")})})
    receiver = sshd.node(name="receiver").model_copy(update={
        "models_dir": str(tmp_path / "receiver-models"),
        "base_dir": str(tmp_path / "receiver-base")})
    data = load_project(REPO_ROOT, "reference").profiles["qwen36-q4-llamacpp"].model_dump()
    data["name"] = "q4-staged"
    data["model"]["source"] = {"repo": "unsloth/Qwen3.6-35B-A3B-GGUF", "file": FILE,
                               "sha256": sha}
    data["llamacpp"]["gguf"] = f"/models/{FILE}"
    return Bed(sshd, holder, receiver, Profile.model_validate(data), weights, tmp_path)


@contextmanager
def copying(bed: Bed, receiver: Node | None = None, fault: Fault | None = None
            ) -> Iterator[tuple[PeerCopy, CopyingNode, list[Neighbour]]]:
    """The copy's parts: the fleet's peers (the neighbour opened through
    :class:`Neighbour`), the copying node's transport (with ``fault``)."""
    node = receiver or bed.receiver
    opened: list[Neighbour] = []

    @contextmanager
    def open_peer(peer: Node) -> Iterator[SshTransport]:
        assert peer.name == bed.holder.name
        neighbour = Neighbour(bed)
        opened.append(neighbour)
        try:
            yield cast(SshTransport, neighbour)
        finally:
            neighbour.inner.close()

    transport = CopyingNode(node, bed.tmp / "fake-node", fault=fault)
    yield PeerCopy([node, bed.holder], open_peer), transport, opened


def test_a_copy_uses_a_key_restricted_to_the_node_and_removes_it(bed: Bed) -> None:
    said: list[str] = []
    with copying(bed) as (peers, transport, opened):
        holder = peers.find(bed.receiver, bed.profile)
        assert holder == bed.holding()
        peers.copy(cast(SshTransport, transport), bed.spec(bed.receiver), holder, said.append)
    assert bed.received().read_bytes() == bed.weights
    # The line written on the neighbour: restricted (no pty, no forwarding, no agent, no
    # command of the client's choosing) and only from the copying node's address.
    [neighbour] = [n for n in opened if n.allowed]
    [line] = neighbour.allowed
    options, keytype, _public, comment = line.split()
    assert options == 'restrict,from="127.0.0.1"'
    assert keytype == "ssh-ed25519" and comment.startswith(NONCE_PREFIX)
    assert neighbour.commands == ["allow the one-copy key", "remove the one-copy key"]
    assert bed.copy_keys() == []
    assert bed.keys_file.read_text().count("\n") == 1  # the controller's own key stays
    assert said[0] == (f"copying {len(bed.weights)} bytes from holder over the network "
                       "(127.0.0.1)")
    assert said[1].startswith("copied from holder in ")
    assert not transport.key_left()


def test_sshd_refuses_the_key_from_another_address_and_the_key_is_removed(bed: Bed) -> None:
    # The copying node names another address than the one it connects from: the key's
    # from= does not match, so sshd refuses it. The restriction is enforced, not decoration.
    elsewhere = bed.receiver.model_copy(update={"address": "127.0.0.2"})
    with copying(bed, elsewhere) as (peers, transport, opened), \
            pytest.raises(RemoteError) as failed:
        peers.copy(cast(SshTransport, transport), bed.spec(elsewhere), bed.holding(),
                   lambda _line: None)
    assert COPY in str(failed.value)
    assert "Permission denied" in str(failed.value)
    [neighbour] = [n for n in opened if n.allowed]
    assert neighbour.allowed[0].startswith('restrict,from="127.0.0.2" ssh-ed25519 ')
    assert bed.copy_keys() == []
    assert not bed.received().exists()
    assert not transport.key_left()


@pytest.mark.parametrize(("kind", "raised"), [
    ("error", RemoteError), ("interrupt", KeyboardInterrupt), ("lost", ConnectionLost),
    ("timeout", CommandTimedOut)])
def test_the_key_is_removed_after_a_failed_or_cut_copy(bed: Bed, kind: FaultKind,
                                                      raised: type[BaseException]) -> None:
    # The copying node's commands: 0 makes the key, 1 runs rsync, 2 removes the key folder.
    with copying(bed, fault=Fault(1, kind)) as (peers, transport, opened), \
            pytest.raises(raised):
        peers.copy(cast(SshTransport, transport), bed.spec(bed.receiver), bed.holding(),
                   lambda _line: None)
    assert transport.labels[:2] == ["make a one-copy key", COPY]
    [neighbour] = opened
    assert neighbour.allowed and neighbour.allowed[0].startswith('restrict,from="127.0.0.1" ')
    assert neighbour.commands == ["allow the one-copy key", "remove the one-copy key"]
    assert bed.copy_keys() == []
    if kind != "lost":  # with the link gone, the node's key folder cannot be removed
        assert transport.labels[2:] == ["remove the one-copy key"]
        assert not transport.key_left()


def test_a_failed_copy_falls_back_to_the_hub(bed: Bed) -> None:
    """The staging step: a neighbour holds the weights, the copy fails (sshd refuses the
    key), the step says so and runs the fetcher (from the hub) as if no neighbour held
    them."""
    elsewhere = bed.receiver.model_copy(update={"address": "127.0.0.2"})
    spec = bed.spec(elsewhere)
    target = Target(deployment="main", release_id="f" * 12, port=8000, engine="llama.cpp",
                    compose_files=("compose.yaml",), builds_image=False,
                    gate=GateSpec.for_profile(bed.profile, elsewhere), profile=bed.profile,
                    weights=spec)
    said: list[str] = []
    with copying(bed, elsewhere) as (peers, transport, _opened):
        runtime = ComposeSshRuntime(cast(SshTransport, transport), peers=peers)
        # The fake node's Docker runs no staging container: the fetch itself fails here,
        # after the copy's failure was said and the fetcher was started.
        with pytest.raises(RemoteError):
            runtime.stage_weights(target, said.append)
    copying_from = f"copying {len(bed.weights)} bytes from holder over the network (127.0.0.1)"
    assert said[0] == copying_from
    assert said[1].startswith("copy from a neighbour failed (receiver: ")
    assert said[1].endswith("; fetching from the hub instead")
    assert said[1:] and not any(line.startswith("copied from") for line in said)
    stages = [label for label in transport.labels if label.startswith("stream ")]
    assert len(stages) == 1, transport.labels
    assert transport.labels.index(stages[0]) > transport.labels.index(COPY)
    assert bed.copy_keys() == []
    assert not bed.received().exists()

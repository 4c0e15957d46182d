"""One host-key procedure: a line as ``ssh-keyscan`` prints it (host first) is pinned as it
is, the bare ``type base64`` form too; anything else is refused with the advice ``validate``
and ``keyscan`` give; a node file that does not load is said to have failed to load."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.errors import ConfigError
from servefleet.core.hostkeys import normalize_host_key, pin_advice
from servefleet.core.project import load_project
from tests.reference_project import copy_reference

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHWrinkP5271G+hYsu19FVutAVLAaXGxtzVCSx8KdwfB"
ADVICE = ("run `servefleet keyscan NODE` (or `ssh-keyscan -t ed25519 -- HOST`), check the "
          "fingerprint on the node's console, and paste the line under ssh.host_keys in its "
          "inventory file, as printed")


@pytest.mark.parametrize("line", [
    KEY,
    f"  {KEY}  ",
    f"rtx5090.lan {KEY}",
    f"[rtx5090.lan]:2222 {KEY}",
    f"rtx5090.lan,10.0.0.5 {KEY}",
    f"|1|F1E1KeoE/eEWhi10WpGv4OdiO6Y=|3988QV0VE8wmZL7suNrYQLITLCg= {KEY}",
])
def test_a_keyscan_line_or_a_bare_key_is_pinned_as_the_key(line: str) -> None:
    assert normalize_host_key(line) == KEY


def test_a_comment_keeps_its_place_after_the_key() -> None:
    assert normalize_host_key(f"host {KEY} root@spark") == f"{KEY} root@spark"


@pytest.mark.parametrize(("line", "why"), [
    ("# rtx5090.lan:22 SSH-2.0-OpenSSH_9.6", "is a comment ssh-keyscan prints, not a key"),
    (f"@cert-authority *.lan {KEY}",
     "is a known_hosts marker line (@cert-authority, @revoked), not a host key"),
    ("ssh-dss AAAAB3NzaC1kc3M=",
     "is not an OpenSSH host key line (`ssh-ed25519 AAAA…`, with or without the host name "
     "before it)"),
])
def test_anything_else_is_refused_with_the_one_advice(line: str, why: str) -> None:
    with pytest.raises(ValueError) as caught:
        normalize_host_key(line)
    shown = f"{line[:40]!r}…" if len(line) > 40 else repr(line)
    assert str(caught.value) == f"{shown} {why}; {ADVICE}"


def test_the_advice_names_the_node_and_quotes_its_address() -> None:
    assert pin_advice("spark-a", "spark a.lan") == (
        "run `servefleet keyscan spark-a` (or `ssh-keyscan -t ed25519 -- 'spark a.lan'`), check "
        "the fingerprint on the node's console, and paste the line under ssh.host_keys in its "
        "inventory file, as printed")


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return copy_reference(tmp_path)


def _pin(root: Path, line: str) -> None:
    path = root / "nodes/rtx5090.yaml"
    text = path.read_text()
    path.write_text(text.replace("host_keys: []", f'host_keys: ["{line}"]', 1))


def test_a_pasted_keyscan_line_loads(root: Path) -> None:
    _pin(root, f"rtx5090.lan {KEY}")
    assert load_project(root, "reference").nodes["rtx5090"].ssh.host_keys == [KEY]


def test_a_node_file_that_fails_to_load_is_not_called_missing(root: Path) -> None:
    _pin(root, "# rtx5090.lan:22 SSH-2.0-OpenSSH_9.6")
    with pytest.raises(ConfigError) as caught:
        load_project(root, "reference")
    assert caught.value.problems == [
        "nodes/rtx5090.yaml: ssh.host_keys: '# rtx5090.lan:22 SSH-2.0-OpenSSH_9.6' is a "
        f"comment ssh-keyscan prints, not a key; {ADVICE}",
        "Pulumi.reference.yaml: servefleet:profiles.rtx5090: node 'rtx5090' failed to load "
        "from nodes/rtx5090.yaml (ssh.host_keys: '# rtx5090.lan:22 SSH-2.0-OpenSSH_9.6' is a "
        "comment ssh-keyscan prints, not a key): fix nodes/rtx5090.yaml as its own error says"]

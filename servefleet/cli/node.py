"""``servefleet node add NAME ADDRESS``: write a node's inventory file from the node itself.

One SSH connection: the host key's fingerprint is shown and pinned only when the operator
confirms it (y/N on a terminal), when ``--host-key`` gives it out of band (and it matches),
or with ``--yes``; then the GPU probe ``servefleet probe`` runs reads the GPUs, driver,
CUDA and architecture over that connection, and ``nodes/NAME.yaml`` is written with each
value's source as a comment, after the loader ``validate`` uses has accepted it. Any
failure writes nothing.
"""

from __future__ import annotations

import datetime
import getpass
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from servefleet.adapters.first_contact import PresentedKey, Target
    from servefleet.core.gpu import GpuProbeResult

KEY_CHECK = "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"
"""What the operator runs on the node's console to compare the fingerprint."""


def stdin_is_terminal() -> bool:
    """Whether the operator can answer a prompt (tests replace it)."""
    return sys.stdin.isatty()


@click.group("node")
def node_group() -> None:
    """Add machines to the inventory (nodes/*.yaml) from what they report."""


def _check_input(name: str, address: str, user: str, port: int,
                 identity_file: str | None, host_key: str | None) -> str | None:
    """Refuse a bad name, address, user, port or key before connecting, in the inventory's
    own words; the normalized ``--host-key`` line."""
    from pydantic import ValidationError

    from servefleet.core.errors import ConfigError
    from servefleet.core.hostkeys import normalize_host_key
    from servefleet.core.models import Node
    from servefleet.core.pydantic_errors import describe

    ssh: dict[str, object] = {"user": user, "port": port}
    ssh.update({"identity_file": identity_file} if identity_file else {"agent": True})
    try:
        Node.model_validate({"name": name, "address": address, "ssh": ssh, "arch": "x86_64",
                             "gpus": [{"name": "placeholder", "memory_gib": 1,
                                       "compute_capability": "1.0"}]})
    except ValidationError as error:
        raise ConfigError([*describe(error, f"node add {name}", model=Node),
                           "nothing was written; fix the argument and run again"]) from None
    if host_key is None:
        return None
    try:
        return normalize_host_key(host_key)
    except ValueError as error:
        raise ConfigError(f"node add {name}: --host-key: {error}") from None


def _decider(target: Target, yes: bool) -> object:
    """The host-key decision: ``--yes`` accepts (and says so), a terminal asks y/N,
    anything else is refused naming the flags."""
    from servefleet.core.errors import ConfigError

    def decide(key: PresentedKey) -> bool:
        click.echo(f"{target.name}: {target.address}:{target.port} presents host key "
                   f"{key.fingerprint} ({key.line.split()[0]})")
        if yes:
            click.echo(f"{target.name}: host key {key.fingerprint} accepted without "
                       "confirmation (--yes)")
            return True
        if not stdin_is_terminal():
            raise ConfigError(
                f"node add {target.name}: {target.address}: no terminal to confirm host key "
                f"{key.fingerprint} on; compare it with `{KEY_CHECK}` on the node's console, "
                f"then run again with --host-key '{key.line}' (or --yes to accept it "
                "unchecked); nothing written")
        click.echo(f"Compare it with `{KEY_CHECK}` on the node's console.")
        return click.confirm("Pin this key and read the node?", default=False)

    return decide


def _read_node(target: Target, *, yes: bool, host_key: str | None,
               ) -> tuple[GpuProbeResult, PresentedKey]:
    """Connect once, decide the key, run the GPU probe over that connection."""
    from servefleet.adapters.first_contact import first_contact
    from servefleet.adapters.gpu_probe import run_probe

    with first_contact(target, decide=_decider(target, yes),  # type: ignore[arg-type]
                       expected_key=host_key) as contact:
        if host_key is not None:
            click.echo(f"{target.name}: host key {contact.key.fingerprint} matches --host-key")
        result = run_probe(contact.run, node=f"node add {target.name}: {target.address}",
                           cuda=True)
    return result, contact.key


def _summary(result: GpuProbeResult) -> str:
    from collections import Counter

    gpus = Counter(g.name for g in result.gpus)
    listed = ", ".join(f"{n}× {name}" for name, n in gpus.items())
    return (f"{listed}; driver {result.driver_version or '?'}, CUDA "
            f"{result.cuda_driver_version or '?'}, {result.host.arch or '?'}")


@node_group.command("add")
@click.argument("name")
@click.argument("address")
@click.option("--user", default=None, help="SSH user on the node.  [default: your user name]")
@click.option("--port", default=22, show_default=True, type=int, help="The node's sshd port.")
@click.option("--identity-file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Private key to log in with.  [default: the SSH agent]")
@click.option("--host-key", default=None, metavar="KEY",
              help="The host key, known out of band (`ssh-ed25519 AAAA…`, or a line of "
                   "ssh-keyscan): pinned when the node presents it, refused otherwise.")
@click.option("--yes", "-y", is_flag=True,
              help="Accept the key the node presents without asking (said so in the output).")
@click.option("--force", is_flag=True, help="Replace an existing nodes/NAME.yaml.")
@click.pass_obj
def add_command(obj: CliContext, name: str, address: str, user: str | None, port: int,
                identity_file: Path | None, host_key: str | None, yes: bool,
                force: bool) -> None:
    """Connect once to ADDRESS, pin its host key (shown, then confirmed), read its GPUs,
    driver, CUDA and architecture, and write nodes/NAME.yaml with each value's source.

    Nothing is written when the key is not accepted, the node cannot be read, or
    nodes/NAME.yaml exists (--force replaces it).
    """
    from servefleet.adapters.first_contact import Target
    from servefleet.adapters.node_files import refuse_existing, write_node_files
    from servefleet.core.node_file import NodeFileInput, PinnedKey, render_node_file
    from servefleet.sim.node_add import simulated_parts

    user = user or getpass.getuser()
    identity = str(identity_file.expanduser().absolute()) if identity_file else None
    pinned_line = _check_input(name, address, user, port, identity, host_key)
    project_dir = obj.project_dir
    refuse_existing(project_dir, name, force)  # before connecting: nothing to lose
    target = Target(name=name, address=address, port=port, user=user, identity_file=identity)
    result, key = _read_node(target, yes=yes, host_key=pinned_line)
    how = ("given with --host-key" if pinned_line else
           "accepted with --yes without confirmation" if yes else "confirmed by the operator")
    sim = simulated_parts(address, name)
    text = render_node_file(NodeFileInput(
        name=name, address=address, user=user, port=port, identity_file=identity,
        key=PinnedKey(key.line, key.fingerprint, how), probe=result,
        day=datetime.date.today().isoformat(),
        extra=sim.settings if sim else {}, extra_ssh=sim.ssh if sim else {},
        extra_note=sim.note if sim else ""))
    path = write_node_files(project_dir, name, text, sim.files if sim else {}, force=force)
    click.echo(f"{name}: {_summary(result)}")
    click.echo(f"wrote {path.relative_to(project_dir)} (host key {key.fingerprint} pinned); "
               f"next: place a profile on {name} in Pulumi.{obj.stack}.yaml, then "
               "`servefleet validate`")

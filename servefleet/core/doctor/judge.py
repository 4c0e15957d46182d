"""The doctor's verdicts: one :class:`Check` per thing a node needs, each with its fix.

:func:`judge` holds what :func:`~servefleet.core.doctor.facts.parse_doctor` read against the
inventory and the stack; :func:`ssh_failed` is the one line of a node that could not be
reached. Both are pure: the clock readings around the call come in as a :class:`RoundTrip`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from servefleet.core.doctor.facts import DiskFact, DoctorFacts
from servefleet.core.gpu import gpu_name_matches
from servefleet.core.models import Node, Profile
from servefleet.core.models.common import StrictModel
from servefleet.core.models.stack import StackConfig
from servefleet.core.render.weights import weights_for

StagedHere = tuple[float, tuple[str, ...]]
"""GiB of staged weights on one disk, and ``deployment: pin`` of each."""

Verdict = Literal["pass", "warn", "fail"]
GIB = 1 << 30
NVIDIA_SMI_QUERY = ("--query-gpu=name,driver_version", "--format=csv,noheader")
"""What the one-shot container asks ``nvidia-smi``: one ``name, driver`` line per GPU."""
DEFAULT_GPU_IMAGE = "ubuntu:24.04"
"""Image of the one-shot GPU container: the NVIDIA Container Toolkit mounts ``nvidia-smi``
and the driver's libraries into any glibc image (its documented ``docker run --rm
--runtime=nvidia --gpus all ubuntu nvidia-smi``)."""


class Check(StrictModel):
    """One line of the doctor's report."""

    check: str
    """What was checked (``docker``, ``port 8000`` …)."""
    verdict: Verdict
    """``pass``; ``warn`` (works, but look); ``fail`` (a deploy would fail or misbehave)."""
    detail: str
    """What was found."""
    fix: str | None = None
    """What to do about it; ``None`` on a pass."""


class GpuContainer(StrictModel):
    """The one-shot container that proves the NVIDIA runtime: ``docker run --rm OPTIONS
    IMAGE COMMAND``."""

    options: tuple[str, ...] = ("--gpus", "all")
    """``docker run`` options."""
    image: str = DEFAULT_GPU_IMAGE
    """Image it runs (pulled when missing, as ``docker run`` does)."""
    command: tuple[str, ...] = ("nvidia-smi", *NVIDIA_SMI_QUERY)
    """Command in the container: prints :data:`NVIDIA_SMI_QUERY`'s lines."""
    what: str = "a one-shot container"
    """How the report names it (a simulated node says how its check differs, see
    :mod:`servefleet.sim.doctor`)."""

    def argv(self) -> list[str]:
        """``docker run --rm …``."""
        return ["docker", "run", "--rm", *self.options, self.image, *self.command]


class DoctorSettings(StrictModel):
    """Thresholds of the checks."""

    min_free_images_gib: float = 20.0
    """Free space under Docker's root dir below which the images check fails (a vLLM image
    is 10-20 GiB, and a patch overlay builds another layer on it)."""
    min_free_weights_gib: float = 50.0
    """Free space for the HF cache and the models folder below which their checks fail (a
    35B FP8 checkpoint is about 35 GiB)."""
    skew_warn_seconds: float = 1.0
    """Clock skew beyond this warns: boot logs and audit lines are read against the
    controller's time."""
    skew_fail_seconds: float = 30.0
    """Clock skew beyond this fails."""
    gpu_timeout_seconds: float = 120.0
    """How long the one-shot GPU container may take (a first pull included)."""


class RoundTrip(StrictModel):
    """The controller's clock around the doctor command (seconds since the epoch)."""

    sent_at: float
    """Just before the command was sent."""
    received_at: float
    """Just after its output arrived."""


def line(check: Check) -> str:
    """``fail  docker: daemon not reachable …; fix: …`` (the report's line for a check)."""
    text = f"{check.verdict}  {check.check}: {check.detail}"
    return f"{text}; fix: {check.fix}" if check.fix else text


def failed(checks: Sequence[Check]) -> bool:
    """Whether any check failed (exit status 1)."""
    return any(c.verdict == "fail" for c in checks)


def ssh_failed(node: Node, kind: Literal["unreachable", "auth", "host_key"], message: str,
               inventory_file: str) -> Check:
    """The line of a node that could not be reached or was refused (its only line)."""
    where = f"{node.ssh.user}@{node.address}:{node.ssh.port}"
    detail = message.removeprefix(f"{node.name}: ")
    if kind == "host_key":
        fix = (f"compare `servefleet keyscan {node.name}` with `ssh-keygen -lf "
               "/etc/ssh/ssh_host_ed25519_key.pub` on the node's console; only if they agree "
               f"(a reinstalled node), pin the new key under ssh.host_keys in {inventory_file}")
    elif kind == "auth":
        fix = (f"check ssh.user, ssh.identity_file / ssh.agent in {inventory_file}; the key's "
               f"public half must be in ~{node.ssh.user}/.ssh/authorized_keys on the node")
    else:
        fix = (f"check that the node is up and sshd listens on {where} (`ssh -p "
               f"{node.ssh.port} {node.ssh.user}@{node.address} true`), and address / ssh.port "
               f"in {inventory_file}")
    return Check(check="ssh", verdict="fail", detail=detail, fix=fix)


def _ssh(node: Node) -> Check:
    return Check(check="ssh", verdict="pass",
                 detail=f"{node.ssh.user}@{node.address}:{node.ssh.port}, host key matches "
                        "the pinned key")


def _docker(facts: DoctorFacts) -> Check:
    pre = facts.preflight
    if pre.docker_version is not None:
        return Check(check="docker", verdict="pass", detail=f"daemon {pre.docker_version}")
    if facts.docker_missing:
        return Check(check="docker", verdict="fail", detail="no docker command on the PATH",
                     fix="install Docker Engine (https://docs.docker.com/engine/install/), "
                         "then: sudo systemctl enable --now docker")
    error = pre.docker_error or "no answer"
    if "permission denied" in error.lower():
        user = facts.user or "the SSH user"
        return Check(check="docker", verdict="fail", detail=f"daemon refused {user}: {error}",
                     fix=f"sudo usermod -aG docker {user} on the node, then reconnect (or "
                         "set ssh.user: root)")
    return Check(check="docker", verdict="fail", detail=f"daemon not reachable: {error}",
                 fix="start it: sudo systemctl enable --now docker (its log: journalctl -u "
                     "docker)")


def _compose(facts: DoctorFacts) -> Check:
    pre = facts.preflight
    if pre.compose is None:
        return Check(check="compose", verdict="fail",
                     detail="neither `docker compose` nor `docker-compose` works",
                     fix="install the Compose plugin: sudo apt-get install "
                         "docker-compose-plugin (Docker's apt repository)")
    command = " ".join(pre.compose)
    version = pre.compose_version or "?"
    if version.lstrip("v").split(".")[0] == "1":
        return Check(check="compose", verdict="warn", detail=f"{command} {version} (v1)",
                     fix="install Compose v2 (docker-compose-plugin): v1 is end of life and "
                         "does not know `!reset` in compose overrides")
    return Check(check="compose", verdict="pass", detail=f"{command} {version}")


def _gpu(node: Node, facts: DoctorFacts, gpu: GpuContainer) -> Check:
    name = "nvidia runtime"
    if facts.preflight.docker_version is None:
        return Check(check=name, verdict="fail",
                     detail="no container can run: the Docker daemon is not usable",
                     fix="fix the docker line first")
    said = [row.strip() for row in facts.gpu_output if row.strip()]
    # docker ends with a usage hint; the line that says what went wrong names an error.
    tail = next((row for row in said if "error" in row.lower()), said[-1] if said else "")
    lowered = " ".join(said).lower()
    if facts.gpu_exit is None:
        return Check(check=name, verdict="fail", detail=f"{gpu.what} did not run",
                     fix=f"run `{' '.join(gpu.argv())}` on the node")
    if facts.gpu_exit != 0:
        detail = f"{gpu.what} failed (exit {facts.gpu_exit}): {tail}"
        if facts.gpu_exit in (124, 137):
            detail = f"{gpu.what} did not finish in time"
            fix = (f"pull {gpu.image} on the node first (`docker pull {gpu.image}`), or "
                   "pass --gpu-image with an image it has")
        elif "could not select device driver" in lowered or "unknown runtime" in lowered \
                or "nvidia-container-cli" in lowered:
            fix = ("install the NVIDIA Container Toolkit and register it with Docker: sudo "
                   "nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart "
                   "docker")
        elif any(word in lowered for word in ("unable to find image", "no such image",
                                                "pull", "registry", "manifest")):
            fix = (f"the node could not get {gpu.image}: `docker pull {gpu.image}` there, or "
                   "pass --gpu-image with an image it has")
        else:
            fix = (f"run `{' '.join(gpu.argv())}` on the node; `nvidia-smi` on the host tells "
                   "a driver problem from a runtime one")
        return Check(check=name, verdict="fail", detail=detail, fix=fix)
    seen = [row.split(",")[0].strip() for row in said]
    if not seen:
        return Check(check=name, verdict="fail",
                     detail=f"{gpu.what} saw no GPU",
                     fix="check `nvidia-smi` on the host, then the toolkit's "
                         "`nvidia-ctk runtime configure --runtime=docker`")
    driver = said[0].split(",")[1].strip() if "," in said[0] else "?"
    found = ", ".join(f"{seen.count(n)} × {n}" for n in dict.fromkeys(seen))
    detail = f"{gpu.what} sees {found} (driver {driver})"
    expected = [g.name for g in node.gpus for _ in range(g.count)]
    if len(seen) != len(expected) or not all(
            any(gpu_name_matches(want, have) for have in seen) for want in expected):
        want = ", ".join(f"{g.count} × {g.name}" for g in node.gpus)
        return Check(check=name, verdict="warn", detail=f"{detail}; the inventory says {want}",
                     fix=f"`servefleet probe {node.name}` compares in detail; correct gpus in "
                         "the inventory, or the container's device visibility")
    return Check(check=name, verdict="pass", detail=detail)


def _access(node: Node, facts: DoctorFacts) -> Check:
    user = facts.user or node.ssh.user
    name = "docker access"
    denied = "permission denied" in (facts.preflight.docker_error or "").lower()
    if facts.uid == 0:
        return Check(check=name, verdict="pass", detail=f"{user} (uid 0)")
    if denied:
        return Check(check=name, verdict="fail",
                     detail=f"{user} may not use the Docker socket (groups: "
                            f"{' '.join(facts.groups) or 'none'})",
                     fix=f"sudo usermod -aG docker {user} on the node, then reconnect (or set "
                         "ssh.user: root)")
    if "docker" in facts.groups:
        return Check(check=name, verdict="pass", detail=f"{user} is in the docker group")
    if facts.preflight.docker_version is not None:
        return Check(check=name, verdict="pass",
                     detail=f"{user} reaches the daemon without root or the docker group "
                            "(rootless Docker or a socket ACL)")
    return Check(check=name, verdict="fail",
                 detail=f"{user} is neither root nor in the docker group",
                 fix=f"sudo usermod -aG docker {user} on the node, then reconnect (or set "
                     "ssh.user: root)")


_DISK_NAMES = {"images": "disk for images", "hf_cache": "disk for weights (HF cache)",
               "models": "disk for weights (models dir)"}


PYTHON_MINIMUM = (3, 7)
"""The oldest python3 the node's reader and GPU probe are written for."""


def _python(facts: DoctorFacts) -> Check:
    fix = ("install it: sudo apt-get install -y python3 (DGX OS and Ubuntu ship it; "
           "servefleet sends its node reader and GPU probe to it on stdin, nothing else)")
    version = facts.python3
    if version is None:
        return Check(check="python3", verdict="fail",
                     detail="no python3 on the PATH (servefleet reads the node with it)",
                     fix=fix)
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < PYTHON_MINIMUM:
        return Check(check="python3", verdict="fail",
                     detail=f"python3 {version} is older than "
                            f"{'.'.join(map(str, PYTHON_MINIMUM))}", fix=fix)
    return Check(check="python3", verdict="pass", detail=version)


def _size(free_bytes: int) -> str:
    return f"{free_bytes / GIB:.1f} GiB" if free_bytes >= GIB else f"{free_bytes >> 20} MiB"


def staged_weights(stack: StackConfig, node: Node, profiles: Mapping[str, Profile],
                   ) -> dict[str, StagedHere]:
    """Disk kind → the weights the stack's deployments on ``node`` stage there (their
    ``model.source``), sized by each profile's ``weights_gib``."""
    found: dict[str, StagedHere] = {}
    for deployment in stack.for_node(node.name):
        profile = profiles.get(deployment.profile)
        spec = weights_for(profile, node) if profile is not None else None
        if profile is None or spec is None:
            continue
        kind = "hf_cache" if spec.kind == "snapshot" else "models"
        gib, names = found.get(kind, (0.0, ()))
        found[kind] = (gib + (profile.model.weights_gib or 0.0),
                       (*names, f"{deployment.name}: {spec.pin}"))
    return found


def _disk(disk: DiskFact, settings: DoctorSettings, staged: StagedHere | None = None,
          ) -> Check:
    name = _DISK_NAMES[disk.kind]
    if disk.free_bytes is None or disk.checked is None:
        return Check(check=name, verdict="warn", detail=f"df could not read {disk.path}",
                     fix=f"run `df -h {disk.path}` on the node")
    images = disk.kind == "images"
    need = settings.min_free_images_gib if images else settings.min_free_weights_gib
    why = ""
    if staged is not None and staged[0] > need:
        # Staged before the stop (docs/weights.md): counted whole, as on a first deploy.
        need = staged[0]
        why = (f": the stack stages {staged[0]:.1f} GiB of weights here "
               f"({'; '.join(staged[1])}), counted as if none were there yet")
    where = disk.path if disk.checked == disk.path else \
        f"{disk.path} (not there yet; {disk.checked})"
    detail = f"{_size(disk.free_bytes)} free under {where}"
    if disk.free_bytes >= need * GIB:
        return Check(check=name, verdict="pass", detail=f"{detail} (need {need:g} GiB{why})")
    option = "--min-free-images-gib" if images else "--min-free-weights-gib"
    how = ("free space: docker image prune -a; docker builder prune" if images else
           "free space: remove models no deployment uses (`hf cache delete` for the HF "
           "cache)")
    if why:
        return Check(check=name, verdict="fail", detail=f"{detail}, below {need:g} GiB{why}",
                     fix="free space: `servefleet models NODE --prune` removes what "
                         "servefleet staged and no release uses, `hf cache delete` the rest; "
                         "a deploy's staging refuses weights that do not fit, before the "
                         "old engine stops")
    return Check(check=name, verdict="fail", detail=f"{detail}, below {need:g} GiB",
                 fix=f"{how}; or lower {option} if this node's engines need less")


def _base_dir(node: Node, facts: DoctorFacts) -> Check:
    base = node.base_dir
    user = facts.user or node.ssh.user
    if facts.base_writable == "yes":
        return Check(check="base_dir", verdict="pass", detail=f"{base} is writable")
    if facts.base_writable == "creatable":
        return Check(check="base_dir", verdict="pass",
                     detail=f"{base} does not exist yet; {facts.base_parent} is writable, "
                            "the first deploy creates it")
    error = facts.base_error or "not writable"
    if "no space" in error.lower():
        return Check(check="base_dir", verdict="fail",
                     detail=f"{base}: no space for a new file ({error})",
                     fix=f"free space on the file system of {base}")
    target = base if facts.base_parent is None else facts.base_parent
    return Check(check="base_dir", verdict="fail", detail=f"{base} is not writable by {user}: "
                 f"{error}", fix=f"sudo install -d -o {user} {base}" if target != base else
                 f"sudo chown -R {user} {base}")


def _ports(node: Node, facts: DoctorFacts, placements: Mapping[int, Sequence[str]],
           stack_file: str) -> list[Check]:
    checks = []
    move = (f"give {{ours}} another port (servefleet:profiles.{node.name}.<deployment>.port "
            f"in {stack_file})")
    for port, deployments in sorted(placements.items()):
        name = f"port {port}"
        ours = ", ".join(deployments)
        listening = facts.ports.get(port)
        # A port the stack places a running deployment on is that engine's.
        held = [d for d in deployments if d in facts.running]
        others = [d for d, p in facts.running.items() if p == port and d not in deployments]
        if listening is None:
            checks.append(Check(check=name, verdict="warn",
                                detail=f"could not tell whether it is free (for {ours})",
                                fix="check that /proc/net/tcp is readable on the node"))
        elif not listening:
            checks.append(Check(check=name, verdict="pass", detail=f"free (for {ours})"))
        elif held:
            checks.append(Check(check=name, verdict="pass",
                                detail=f"held by our own deployment {', '.join(held)}"))
        elif others:
            checks.append(Check(
                check=name, verdict="fail",
                detail=f"held by servefleet deployment {', '.join(others)}, not by {ours}",
                fix=f"remove {', '.join(others)} from the node, or "
                    + move.format(ours=ours)))
        else:
            checks.append(Check(
                check=name, verdict="fail",
                detail=f"in use by another process (the stack places {ours} here)",
                fix=f"see what listens: sudo ss -ltnp 'sport = :{port}' on the node; stop it, "
                    "or " + move.format(ours=ours)))
    return checks


def placed_ports(stack: StackConfig, node: Node) -> dict[int, tuple[str, ...]]:
    """Port → deployments the stack places on ``node`` there: each deployment's port (the
    node's first port by default), and a multi-node engine's API and rendezvous ports on
    its head."""
    placed: dict[int, list[str]] = {}
    for deployment in stack.for_node(node.name):
        placed.setdefault(deployment.port or node.ports[0], []).append(deployment.name)
    for multi in stack.multi_node:
        if multi.head == node.name:
            placed.setdefault(multi.port or node.ports[0], []).append(multi.name)
            placed.setdefault(multi.master_port, []).append(multi.name)
    return {port: tuple(dict.fromkeys(names)) for port, names in placed.items()}


def _fast_link(node: Node, facts: DoctorFacts, inventory_file: str) -> Check | None:
    link = node.fast_link
    if link is None:
        return None
    name = "fast link"
    state = facts.fast_link_state
    if state is None or state == "missing":
        return Check(check=name, verdict="fail", detail=f"no interface {link.interface}",
                     fix=f"list the node's interfaces (ip -br link) and correct "
                         f"fast_link.interface in {inventory_file}")
    ours = [a for a in facts.fast_link_addresses if a.split("/")[0] == link.address]
    if state.lower() not in ("up", "unknown"):
        return Check(check=name, verdict="fail", detail=f"{link.interface} is {state}",
                     fix=f"bring it up: sudo ip link set {link.interface} up; check the cable "
                         "or transceiver (ethtool " + link.interface + ")")
    if not ours:
        have = ", ".join(facts.fast_link_addresses) or "no address"
        return Check(check=name, verdict="fail",
                     detail=f"{link.interface} is {state} with {have}, not {link.address}",
                     fix=f"assign it (sudo ip addr add {link.address}/PREFIX dev "
                         f"{link.interface}, made permanent in netplan or NetworkManager), "
                         f"or correct fast_link.address in {inventory_file}")
    detail = f"{link.interface} {state}, {ours[0]}"
    if state.lower() == "unknown":
        return Check(check=name, verdict="warn", detail=f"{detail} (no carrier state)",
                     fix=f"check the link: ethtool {link.interface}")
    return Check(check=name, verdict="pass", detail=detail)


def clock_skew(facts: DoctorFacts, trip: RoundTrip) -> tuple[float, float] | None:
    """The node's clock minus this machine's, and the uncertainty (half the round trip
    outside the script), both in seconds; ``None`` without the node's readings.

    The node read its clock when the script started and when it ended; the time outside
    the script (sending, starting, returning) is split evenly between the two ways."""
    start, end = facts.node_time_start, facts.node_time_end
    if start is None:
        return None
    inside = max(0.0, end - start) if end is not None else 0.0
    outside = max(0.0, (trip.received_at - trip.sent_at) - inside)
    return start - (trip.sent_at + outside / 2), outside / 2


def _clock(facts: DoctorFacts, trip: RoundTrip, settings: DoctorSettings) -> Check:
    skew = clock_skew(facts, trip)
    if skew is None:
        return Check(check="clock", verdict="warn", detail="the node did not print its time",
                     fix="check `date +%s.%N` on the node")
    offset, error = skew
    detail = f"node is {offset:+.3f} s from this machine (±{error:.3f} s)"
    fix = ("enable time sync on the node (sudo timedatectl set-ntp true; chrony or "
           "systemd-timesyncd), and check this machine's clock")
    if abs(offset) - error > settings.skew_fail_seconds:
        return Check(check="clock", verdict="fail",
                     detail=f"{detail}, over {settings.skew_fail_seconds:g} s", fix=fix)
    if abs(offset) - error > settings.skew_warn_seconds:
        return Check(check="clock", verdict="warn",
                     detail=f"{detail}, over {settings.skew_warn_seconds:g} s", fix=fix)
    return Check(check="clock", verdict="pass", detail=detail)


def judge(node: Node, facts: DoctorFacts, *, trip: RoundTrip, gpu: GpuContainer,
          placements: Mapping[int, Sequence[str]], settings: DoctorSettings,
          inventory_file: str, stack_file: str,
          staged: Mapping[str, StagedHere] | None = None) -> list[Check]:
    """Every check of a node reached over SSH, in report order. ``placements``: port →
    deployments the stack places there; ``staged``: disk kind → the weights the stack
    stages there (:func:`staged_weights`)."""
    checks = [_ssh(node), _docker(facts), _compose(facts), _gpu(node, facts, gpu),
              _access(node, facts), _python(facts)]
    if not any(d.kind == "images" for d in facts.disks):
        checks.append(Check(check=_DISK_NAMES["images"], verdict="warn",
                            detail="not checked: the Docker daemon did not name its root dir",
                            fix="fix the docker line first"))
    checks += [_disk(disk, settings, (staged or {}).get(disk.kind)) for disk in facts.disks]
    checks.append(_base_dir(node, facts))
    checks += _ports(node, facts, placements, stack_file)
    link = _fast_link(node, facts, inventory_file)
    if link is not None:
        checks.append(link)
    checks.append(_clock(facts, trip, settings))
    if not facts.complete:
        checks.append(Check(check="doctor", verdict="fail",
                            detail="the node's answer was cut short",
                            fix=f"run again with --verbose; check the node's shell as "
                                f"{node.ssh.user}"))
    return checks

"""``servefleet doctor``'s one round trip per node: the script, and running it over SSH.

:data:`DOCTOR_SCRIPT` gathers every fact in one ``sh`` command; values reach it only as
positional parameters (see :mod:`servefleet.adapters.remote`). It first runs the deploy
preflight (:data:`servefleet.adapters.remote.PREFLIGHT_SCRIPT`, passed in as ``$6``) for
Docker and Compose, so both commands read them alike. The output is parsed by
:func:`servefleet.core.doctor.parse_doctor` and judged by :func:`servefleet.core.doctor.judge`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from servefleet.adapters.remote import COMPOSE_PROJECT_LABEL, PREFLIGHT_SCRIPT, PROJECT_PREFIX
from servefleet.adapters.runtime import connect
from servefleet.core.doctor import DOCTOR_END, DOCTOR_HEADER, GpuContainer, RoundTrip
from servefleet.core.errors import HostKeyMismatch, RemoteError, UnreachableNode
from servefleet.core.models import Node

DOCKER_TIMEOUT_SECONDS = 30
"""Each ``docker`` query (a hung daemon must not hang the doctor)."""
SCRIPT_GRACE_SECONDS = 120
"""What the script may take beyond the GPU container's own limit."""

DOCTOR_SCRIPT = r"""
base=$1 hf=$2 models=$3 fast_if=$4 gpu_timeout=$5 pre=$6 nports=$7 dt=$8
shift 8
ports=
while [ "$nports" -gt 0 ]; do ports="$ports $1"; shift; nports=$((nports - 1)); done
home_path() { case $1 in "~/"*) printf '%s/%s' "$HOME" "${1#"~/"}" ;; *) printf '%s' "$1" ;; esac; }
echo %HEADER%
echo "date_start=$(date +%s.%N)"
echo "user=$(id -un)"
echo "uid=$(id -u)"
echo "groups=$(id -nG)"
echo "python3=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"
command -v docker >/dev/null 2>&1 || echo docker_missing=yes
pre_out=$(timeout -k 5 "$dt" sh -c "$pre" sh "$base" 0 2>/dev/null)
printf '%s\n' "$pre_out"
case $pre_out in *docker_version=*) docker_ok=1 ;; *) docker_ok= ;; esac
root=
if [ -n "$docker_ok" ]; then
  root=$(timeout -k 5 "$dt" docker info --format '{{.DockerRootDir}}' 2>/dev/null)
  echo "docker_root=$root"
  echo "runtimes=$(timeout -k 5 "$dt" docker info \
    --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null)"
  out=$(timeout -k 5 "$gpu_timeout" docker run --rm "$@" 2>&1)
  echo "gpu_exit=$?"
  [ -z "$out" ] || printf '%s\n' "$out" | tail -n 80 | sed 's/^/gpu_out=/'
fi
free_at() {
  p=$(home_path "$1")
  while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname "$p"); done
  df -Pk "$p" 2>/dev/null | awk -v k="$2" -v d="$1" -v p="$p" '
    NR == 2 { printf "disk=%s\t%s\t%s\t%s\n", k, d, $4, p; ok = 1 }
    END { if (!ok) printf "disk=%s\t%s\t\t\n", k, d }'
}
[ -z "$root" ] || free_at "$root" images
free_at "$hf" hf_cache
[ -z "$models" ] || free_at "$models" models
b=$(home_path "$base")
if [ -d "$b" ]; then
  if t=$(mktemp "$b/.servefleet-doctor.XXXXXX" 2>&1); then
    if err=$(head -c 1 /dev/zero 2>&1 > "$t"); then echo base_writable=yes
    else echo base_writable=no; echo "base_error=$(printf '%s' "$err" | tail -n 1)"; fi
    rm -f "$t"
  else echo base_writable=no; echo "base_error=$(printf '%s' "$t" | tail -n 1)"; fi
else
  p=$(dirname "$b")
  while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname "$p"); done
  echo "base_parent=$p"
  if [ -w "$p" ]; then echo base_writable=creatable
  else echo base_writable=no; echo "base_error=$p is not writable"; fi
fi
# /proc/net/tcp{,6}: the local address is hex ADDR:PORT, state 0A is LISTEN; they show the
# network namespace of the session.
tables=
for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] && tables="$tables $f"; done
for port in $ports; do
  hex=$(printf '%04X' "$port")
  if [ -z "$tables" ]; then echo "port=$port unknown"
  elif awk -v p="$hex" '$4 == "0A" && substr($2, index($2, ":") + 1) == p { found = 1 }
                        END { exit !found }' $tables; then echo "port=$port yes"
  else echo "port=$port no"; fi
done
if [ -n "$docker_ok" ]; then
  for project in $(timeout -k 5 "$dt" docker ps --filter label=%LABEL% \
      --format '{{.Label "%LABEL%"}}' 2>/dev/null | sort -u); do
    case $project in %PREFIX%*) d=${project#%PREFIX%} ;; *) continue ;; esac
    port=$(sed -n 's/^  "port": *\([0-9][0-9]*\).*/\1/p' "$b/$d/current/manifest.json" \
      2>/dev/null | head -n 1)
    echo "running=$d $port"
  done
fi
if [ -n "$fast_if" ]; then
  # ip reads the session's network namespace; /sys/class/net may show another one.
  if link=$(ip -o link show dev "$fast_if" 2>/dev/null) && [ -n "$link" ]; then
    echo "fast_link_state=$(printf '%s\n' "$link" \
      | awk '{ for (i = 1; i < NF; i++) if ($i == "state") print $(i + 1) }')"
    ip -o addr show dev "$fast_if" 2>/dev/null | awk '{ print "fast_link_addr=" $4 }'
  else echo fast_link_state=missing; fi
fi
echo "date_end=$(date +%s.%N)"
echo %END%
""".replace("%HEADER%", DOCTOR_HEADER).replace("%END%", DOCTOR_END) \
    .replace("%LABEL%", COMPOSE_PROJECT_LABEL).replace("%PREFIX%", PROJECT_PREFIX)


def doctor(node: Node, gpu: GpuContainer, ports: Sequence[int],
           gpu_timeout_seconds: float) -> list[str]:
    """The doctor command for ``node``: checks ``ports`` and runs ``gpu``'s container."""
    return ["sh", "-c", DOCTOR_SCRIPT, "sh", node.base_dir, node.hf_cache,
            node.models_dir or "", node.fast_link.interface if node.fast_link else "",
            f"{gpu_timeout_seconds:g}", PREFLIGHT_SCRIPT, str(len(ports)),
            str(DOCKER_TIMEOUT_SECONDS), *(str(p) for p in ports),
            *gpu.options, gpu.image, *gpu.command]


@dataclass(frozen=True)
class DoctorReading:
    """What one round trip to a node brought back: the output and the clock around it, or
    why the node could not be asked."""

    text: str = ""
    """The script's output (stdout)."""
    trip: RoundTrip | None = None
    """The controller's clock around the call."""
    failure: Literal["unreachable", "auth", "host_key"] | None = None
    """Why there is no output."""
    message: str = ""
    """The error, in one line."""


def read_node(node: Node, gpu: GpuContainer, ports: Sequence[int], *,
              gpu_timeout_seconds: float, clock: Callable[[], float] = time.time,
              connect_attempts: int = 2) -> DoctorReading:
    """Connect (the transport checks the pinned host key), run the doctor command once,
    and read the clock around it. Never raises for a node that cannot be reached, refuses
    the key or drops the connection: that is the reading's ``failure``."""
    argv = doctor(node, gpu, ports, gpu_timeout_seconds)
    try:
        with connect(node, connect_attempts=connect_attempts) as transport:
            sent = clock()
            done = transport.run(argv, check=False, what="doctor",
                                 timeout=gpu_timeout_seconds + SCRIPT_GRACE_SECONDS)
            received = clock()
    except HostKeyMismatch as error:
        return DoctorReading(failure="host_key", message=str(error))
    except UnreachableNode as error:
        text = str(error)
        auth = "authentication" in text or "identity file" in text
        return DoctorReading(failure="auth" if auth else "unreachable", message=text)
    except RemoteError as error:  # the connection dropped, or the script timed out
        return DoctorReading(failure="unreachable", message=str(error))
    return DoctorReading(text=done.stdout.decode("utf-8", "replace"),
                         trip=RoundTrip(sent_at=sent, received_at=received))

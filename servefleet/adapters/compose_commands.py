"""The engine's commands on a node: Docker Compose of a release folder (build, pull, up),
the deployment's containers found by their compose project label or, adopted, by name
(stop, clear, logs, state), and taking a hand-started container over (adopt). Like
:mod:`servefleet.adapters.remote`, each function returns an argv list and runs nothing;
values reach scripts only as positional parameters."""

from __future__ import annotations

import re
from collections.abc import Sequence

from servefleet.adapters.remote import (
    ADOPTED,
    ADOPTED_SUFFIX,
    COMPOSE_PROJECT_LABEL,
    _sh,
    adopted_name,
    compose_project,
    deployment_dir,
    deployment_ids,
    release_dir,
)


def compose(compose_cmd: Sequence[str], base_dir: str, deployment: str, release_id: str,
            compose_files: Sequence[str], *args: str, project: str | None = None) -> list[str]:
    """``docker compose -p <deployment> --project-directory <release> -f … ARGS``
    (``project``: another compose project name than the deployment's)."""
    folder = release_dir(base_dir, deployment, release_id)
    files: list[str] = []
    for name in compose_files:
        files += ["-f", name if name.startswith("/") else f"{folder}/{name}"]
    return [*compose_cmd, "-p", project or compose_project(deployment), "--project-directory",
            folder, *files, *args]


def build(compose_cmd: Sequence[str], base_dir: str, deployment: str, release_id: str,
          compose_files: Sequence[str]) -> list[str]:
    """Build the release's image overlay (Dockerfile with patches, pip packages)."""
    return compose(compose_cmd, base_dir, deployment, release_id, compose_files, "build")


# Nanoseconds, not whole seconds: `up -d` of an unchanged compose project starts the same
# container again (a re-gate), whose log still holds the previous run; its last lines,
# written by the `stop` just before, fall in the same second as `date +%s`, and a boot log
# read from there begins with that run's shutdown (the parser then calls it ready before
# the new run's first line). `docker logs --since` takes ``<seconds>.<nanoseconds>``.
UP_SCRIPT = "printf 'since=%s\\n' \"$(date +%s.%N)\"; exec \"$@\""
SINCE_RE = re.compile(r"(\d+)(?:\.(\d{1,9}))?")


def up(compose_cmd: Sequence[str], base_dir: str, deployment: str, release_id: str,
       compose_files: Sequence[str]) -> list[str]:
    """``up -d --remove-orphans`` of a release folder; first prints ``since=<node epoch>``
    (with nanoseconds), the point from which its boot log is read (see
    :func:`parse_since`)."""
    return _sh(UP_SCRIPT, *compose(compose_cmd, base_dir, deployment, release_id,
                                   compose_files, "up", "-d", "--remove-orphans"))


def parse_since(output: str) -> str:
    """The ``since=`` value of :func:`up`'s first line, as ``docker logs --since`` takes it:
    ``<seconds>.<nanoseconds>``, or whole seconds where the node's ``date`` has no ``%N``
    (busybox prints it as it is); ``0`` (the whole log) when there is none."""
    first = output.splitlines()[0] if output else ""
    match = SINCE_RE.match(first.partition("=")[2].strip())
    if match is None:
        return "0"
    return f"{match[1]}.{match[2].ljust(9, '0')}" if match[2] else match[1]


PULL_SCRIPT = (
    # The images the release's compose files name, after every override (the simulated
    # fleet's stand-in included); docker-compose v1 cannot list them: then `up` pulls.
    'if ! images=$("$@" config --images 2>/dev/null); then echo "images unknown"; exit 0; fi; '
    'for i in $images; do '
    'if docker image inspect "$i" >/dev/null 2>&1; then echo "present $i"; '
    'else echo "pull $i"; docker pull -q "$i" >/dev/null || exit 1; echo "pulled $i"; fi; '
    'done'
)


def pull(compose_cmd: Sequence[str], base_dir: str, deployment: str, release_id: str,
         compose_files: Sequence[str]) -> list[str]:
    """Pull the release's images that the node does not have yet (prints ``present IMG``,
    ``pull IMG``, ``pulled IMG`` lines). Run while the old engine still serves, so that
    the downtime between stop and a healthy boot never includes a download; images are
    never removed by servefleet, so a restore of the previous release never pulls."""
    return _sh(PULL_SCRIPT, *compose(compose_cmd, base_dir, deployment, release_id,
                                     compose_files))


STOP_SCRIPT = (
    'ids=$(' + deployment_ids('$1', running=True) + ') || exit 1; '
    'shift; [ -z "$ids" ] || docker stop "$@" $ids >/dev/null'
)


def stop(deployment: str, *, grace_seconds: int | None = None) -> list[str]:
    """Stop the deployment's running containers, found by compose label so that it works
    even when the release folder they came from is gone. Docker waits for each container's
    own stop grace period (the compose file's ``stop_grace_period``) unless
    ``grace_seconds`` is given (a failed engine has nothing to finish)."""
    args = [] if grace_seconds is None else ["-t", str(grace_seconds)]
    return _sh(STOP_SCRIPT, compose_project(deployment), *args)


CLEAR_SCRIPT = (
    'ids=$(docker ps -aq --filter "label=' + COMPOSE_PROJECT_LABEL + '=$1") || exit 1; '
    '[ -z "$ids" ] || { docker stop -t "$2" $ids >/dev/null; docker rm -f $ids >/dev/null; }; '
    # An adopted container is only stopped: it is the release a rollback may return to.
    'a=$(docker ps -q --filter "name=^$1' + ADOPTED_SUFFIX + '\\$") || exit 1; '
    '[ -z "$a" ] || docker stop -t "$2" $a >/dev/null'
)


def clear(deployment: str, *, grace_seconds: int) -> list[str]:
    """Stop and remove every container of the deployment (running, half-stopped, or left
    renamed by a cut ``compose up``), so that the next ``up`` creates the engine afresh and
    the boot log read after it is that engine's alone."""
    return _sh(CLEAR_SCRIPT, compose_project(deployment), str(grace_seconds))


LOGS_SCRIPT = (
    # The running engine (compose's or an adopted one), else the newest container.
    'c=$(' + deployment_ids('$1', running=True) + ') || exit 1; c=$(echo "$c" | head -n 1); '
    '[ -n "$c" ] || c=$(' + deployment_ids('$1') + ' | head -n 1) || exit 1; '
    '[ -n "$c" ] || { echo "no container for deployment $1" >&2; exit 1; }; '
    'shift; exec docker logs "$@" "$c"'
)


def logs(deployment: str, *, follow: bool = False, since: str | None = None,
         tail: int | None = None) -> list[str]:
    """``docker logs [--follow] [--since T] [--tail N]`` of the deployment's newest container
    (stdout and stderr; the caller merges them)."""
    args: list[str] = []
    if follow:
        args.append("--follow")
    if since is not None:
        args += ["--since", since]
    if tail is not None:
        args += ["--tail", str(tail)]
    return _sh(LOGS_SCRIPT, compose_project(deployment), *args)


ADOPT_CHECK_SCRIPT = (
    'cand=$1; new=$2; shift 2; '
    # The image the release's compose files name, after every override: Compose's own
    # answer, compared by image id with what the container runs.
    'want=$("$@" | head -n 1) || exit 1; '
    "c=$(docker inspect --format '{{.Id}}' \"$new\" 2>/dev/null) || "
    "c=$(docker inspect --format '{{.Id}}' \"$cand\") || exit 1; "
    "have=$(docker inspect --format '{{.Image}}' \"$c\") || exit 1; "
    "wid=$(docker image inspect --format '{{.Id}}' \"$want\" 2>/dev/null) || wid=none; "
    '[ "$wid" = "$have" ] || { echo "container $cand runs image $have, not the image '
    'the release names ($want, $wid): not adopted" >&2; exit 1; }'
)


def adopt_check(compose_cmd: Sequence[str], base_dir: str, deployment: str, release_id: str,
                compose_files: Sequence[str], container: str) -> list[str]:
    """Fail unless ``container`` (or the deployment's adopted container, on a retry) runs
    the image the release's compose files name, by image id."""
    return _sh(ADOPT_CHECK_SCRIPT, container, compose_project(deployment) + ADOPTED_SUFFIX,
               *compose(compose_cmd, base_dir, deployment, release_id, compose_files,
                        "config", "--images"))


START_ADOPTED_SCRIPT = "printf 'since=%s\\n' \"$(date +%s.%N)\"; exec docker start \"$1\""


def start_adopted(deployment: str) -> list[str]:
    """``docker start`` of the deployment's adopted container (a rollback to it), after
    printing ``since=<node epoch>`` as :func:`up` does."""
    return _sh(START_ADOPTED_SCRIPT, compose_project(deployment) + ADOPTED_SUFFIX)


def stop_container(container: str) -> list[str]:
    """Stop a hand-started container a release replaces, and keep it from starting again
    with Docker (its restart policy set to ``no``); it is kept, not removed."""
    return _sh('docker update --restart=no "$1" >/dev/null && docker stop "$1" >/dev/null',
               container)


ADOPT_SCRIPT = (
    'dir=$1; id=$2; cand=$3; new=$4; tmp=$1/.' + ADOPTED + '.$$; '
    # Found under its new name first: a retry after the rename on a cut connection.
    "c=$(docker inspect --format '{{.Id}}' \"$new\" 2>/dev/null) || "
    "c=$(docker inspect --format '{{.Id}}' \"$cand\") || exit 1; "
    "[ \"$(docker inspect --format '{{.State.Running}}' \"$c\")\" = true ] || "
    '{ echo "container $cand is not running: nothing to adopt" >&2; exit 1; }; '
    '[ "$(docker inspect --format \'{{.Name}}\' "$c")" = "/$new" ] || '
    'docker rename "$c" "$new" || exit 1; '
    # `always` would start it again after a reboot even once a later release stopped it,
    # beside that release's engine on the same port; `unless-stopped` serves the same.
    "[ \"$(docker inspect --format '{{.HostConfig.RestartPolicy.Name}}' \"$c\")\" != always ] "
    '|| docker update --restart=unless-stopped "$c" >/dev/null || exit 1; '
    "printf 'release=%s container=%s name=%s\\n' \"$id\" \"$c\" \"$cand\" > \"$tmp\" && "
    'mv -f "$tmp" "$dir/' + ADOPTED + '"'
)


def adopt_container(base_dir: str, deployment: str, release_id: str,
                    container: str) -> list[str]:
    """Take over the running ``container`` (started by hand) as ``release_id`` without
    restarting it: rename it ``servefleet-<deployment>-adopted`` (see :data:`ADOPTED_SUFFIX`),
    make a restart policy of ``always`` ``unless-stopped``, and record it in
    ``<deployment>/adopted``. Safe to repeat."""
    return _sh(ADOPT_SCRIPT, deployment_dir(base_dir, deployment), release_id, container,
               adopted_name(deployment))


UNADOPT_SCRIPT = (
    'dir=$1; name=$2; new=$3; '
    "c=$(docker inspect --format '{{.Id}}' \"$new\" 2>/dev/null) && "
    '{ docker rename "$c" "$name" || exit 1; }; rm -f "$dir/' + ADOPTED + '"'
)


def unadopt_container(base_dir: str, deployment: str, name: str) -> list[str]:
    """Undo :func:`adopt_container` after a failed gate: the container (never stopped)
    gets its own name back and the record goes. Safe to repeat."""
    return _sh(UNADOPT_SCRIPT, deployment_dir(base_dir, deployment), name,
               adopted_name(deployment))


WEIGHTS_PROJECT_PREFIX = "servefleetweights-"
"""Compose project of a deployment's staging container. Not ``servefleet-…``: no
deployment's project can have this name, so its containers are never taken for the
engine's (stopped, followed, observed)."""
STAGE_WEIGHTS_SCRIPT = (
    # A staging container left by a controller that died is removed first: its download
    # resumes in this one (the fetchers keep partial files).
    'name=$1; program=$2; shift 2; docker rm -f "$name" >/dev/null 2>&1; '
    'printf "%s" "$program" | "$@" 2>&1; echo "@@weights-exit $?"'
)


def remove_container(name: str) -> list[str]:
    """``docker rm -f NAME``, quiet and successful when there is none."""
    return _sh('docker rm -f "$1" >/dev/null 2>&1; true', name)


def weights_container(deployment: str) -> str:
    """The staging container's name (one per deployment at a time)."""
    return WEIGHTS_PROJECT_PREFIX + deployment


def stage_weights(compose_cmd: Sequence[str], base_dir: str, deployment: str,
                  release_id: str, compose_files: Sequence[str], service: str,
                  program: str) -> list[str]:
    """Run the release's one-shot ``service`` with ``program`` on standard input; prints
    its output, then ``@@weights-exit <status>``."""
    name = weights_container(deployment)
    return _sh(STAGE_WEIGHTS_SCRIPT, name, program, *compose(
        compose_cmd, base_dir, deployment, release_id, compose_files, "--profile", service,
        "run", "--rm", "-T", "--no-deps", "--name", name, service, project=name))

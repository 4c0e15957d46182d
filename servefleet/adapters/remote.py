"""Remote command builders: every command servefleet runs on a node, as data.

Each function returns an argv list and runs nothing; :mod:`servefleet.adapters.rollout`
executes them over the node's :class:`~servefleet.adapters.runtime.base.Transport` (over SSH,
the argv is quoted with :func:`shlex.join`). Commands that need a shell are small POSIX
``sh`` scripts passed as ``["sh", "-c", SCRIPT, "sh", arg1, …]``: the script text is
constant and every value arrives as a positional parameter, so no value is ever spliced into
script text (only :func:`sequence` joins whole commands, each word quoted by
:func:`shlex.join`).

Layout on a node (``base`` is the inventory's ``base_dir``)::

    <base>/
      .servefleet-lock/owner        the node lock: owner, pid, time, operation, lock id
      .servefleet-lock/state        the holder's phase (rewritten before each phase that
                                    changes what serves), ``abandoned=…`` when it gave up
      <deployment>/
        releases/<release-id>/      compose file(s), Dockerfile, patches, env (0600),
                                    manifest.json
        current -> releases/<id>    switched atomically (symlink to a temp name, mv -T)
        previous -> releases/<id>   what current pointed to before (the rollback target)
        last-good -> releases/<id>  the last release whose engine passed its health gate
        gated                       ``release=<id> started=<StartedAt> at=<time>``: the
                                    engine that passed; a container started since is ungated
        adopted                     ``release=<id> container=<id> name=<name>``: a container
                                    started by hand, taken over without a restart as that
                                    release (renamed ``servefleet-<deployment>-adopted``)
        staging/<id>.<pid>/         uploads land here, then are renamed into releases/
        audit.log                   one tab-separated line per action
        bench.jsonl                 one JSON line per ``servefleet bench`` run of a scenario

A cut connection during an upload leaves at most a folder under ``staging/`` (removed by
the next prune), never a half release under ``releases/`` and never a ``current`` that
points at one: the rename into ``releases/`` happens only after every file's sha256 has
been checked.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from servefleet.core.observed import END, MANIFEST_FILE, RELEASES_HEADER

LOCK_DIR = ".servefleet-lock"
"""The node lock: a folder under the base directory (``mkdir`` is atomic)."""
LOCK_HELD_EXIT = 3
"""Exit status of the lock command when another owner holds the lock."""
AUDIT_FILE = "audit.log"
CURRENT = "current"
PREVIOUS = "previous"
STAGING = "staging"
RELEASES = "releases"

LAST_GOOD = "last-good"
GATED = "gated"
ADOPTED = "adopted"
LOCK_STATE_FILE = "state"
LOCK_TAKEN_OVER = "took-over-abandoned-lock"
"""First line of the lock command's output when it replaced a lock its holder abandoned."""
LOCK_TAKEN_OVER_END = "@@took-over-end"
"""Ends the abandoned lock's lines in that output."""

COMPOSE_PROJECT_LABEL = "com.docker.compose.project"
PROJECT_PREFIX = "servefleet-"
"""Compose projects servefleet starts are named ``servefleet-<deployment>``: an operator's
own compose project called ``main`` is never stopped, and ``--remove-orphans`` never
removes its containers."""

ADOPTED_SUFFIX = "-adopted"
"""An adopted container is renamed ``servefleet-<deployment>-adopted``: its labels cannot
change while it runs, its name can, so every command finds it by name beside the compose
project's containers found by label."""

def deployment_dir(base_dir: str, deployment: str) -> str:
    """``<base>/<deployment>``."""
    return f"{base_dir.rstrip('/')}/{deployment}"


def release_dir(base_dir: str, deployment: str, release_id: str) -> str:
    """``<base>/<deployment>/releases/<id>``."""
    return f"{deployment_dir(base_dir, deployment)}/{RELEASES}/{release_id}"


def compose_project(deployment: str) -> str:
    """The compose project name of a deployment: ``servefleet-<deployment>``."""
    return PROJECT_PREFIX + deployment


def adopted_name(deployment: str) -> str:
    """The name an adopted container gets: ``servefleet-<deployment>-adopted``."""
    return compose_project(deployment) + ADOPTED_SUFFIX


def deployment_ids(project: str, *, running: bool = False) -> str:
    """Shell: the ids of a deployment's containers, given its compose project (a shell
    word such as ``"$1"``): the project's, by label, then an adopted one, by name. Running
    ones only with ``running``."""
    ps = "docker ps -q" if running else "docker ps -aq"
    return ("{ " + ps + ' --filter "label=' + COMPOSE_PROJECT_LABEL + '=' + project + '" && '
            + ps + ' --filter "name=^' + project + ADOPTED_SUFFIX + '\\$"; }')


def _sh(script: str, *args: str) -> list[str]:
    """``sh -c SCRIPT sh ARGS…``: values reach the script only as ``$1``, ``$2``…"""
    return ["sh", "-c", script, "sh", *args]


def sequence(*commands: Sequence[str]) -> list[str]:
    """Several commands in one round trip, each starting only if the previous succeeded."""
    return _sh(" && ".join(shlex.join(c) for c in commands))


# -- reading facts (the node itself is read by servefleet.adapters.observe) ---------------
RELEASES_SCRIPT = (
    'dir=$1; '
    "printf '" + RELEASES_HEADER + "\\n@@current\\n'; readlink \"$dir/current\" 2>/dev/null; "
    "printf '@@previous\\n'; readlink \"$dir/previous\" 2>/dev/null; "
    'for r in "$dir"/releases/*/; do '
    '[ -d "$r" ] || continue; '
    "id=${r%/}; id=${id##*/}; printf '@@release %s\\n' \"$id\"; "
    'cat "${r}' + MANIFEST_FILE + '" 2>/dev/null; echo; '
    'done; '
    "printf '" + END + "\\n'"
)


def list_releases(base_dir: str, deployment: str) -> list[str]:
    """Every release folder of a deployment with its manifest, ``current`` and
    ``previous``. Parsed by
    :func:`servefleet.core.observed.parse_releases`."""
    return _sh(RELEASES_SCRIPT, deployment_dir(base_dir, deployment))


PREFLIGHT_SCRIPT = (
    'base=$1; port=$2; '
    "if v=$(docker version --format '{{.Server.Version}}' 2>&1); "
    'then echo "docker_version=$v"; '
    'else echo "docker_error=$(printf %s "$v" | tail -n 1)"; fi; '
    'if cv=$(docker compose version --short 2>/dev/null); then '
    'echo "compose=docker compose"; echo "compose_version=$cv"; '
    'elif cv=$(docker-compose version --short 2>/dev/null); then '
    'echo "compose=docker-compose"; echo "compose_version=$cv"; fi; '
    "echo \"disk_free_kib=$(df -Pk \"$base\" | awk 'NR==2 {print $4}')\"; "
    # /proc/net/tcp{,6}: local address is hex "ADDR:PORT", state 0A is LISTEN. Always
    # present on Linux, and it reads the network namespace of the session.
    "hex=$(printf '%04X' \"$port\"); "
    "if awk -v p=\"$hex\" '$4 == \"0A\" && substr($2, index($2, \":\") + 1) == p "
    "{ found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null; "
    'then echo port_in_use=yes; else echo port_in_use=no; fi'
)


def preflight(base_dir: str, port: int) -> list[str]:
    """Docker and compose present (and which compose), free disk under the base directory,
    whether the port has a listener. Parsed by
    :func:`servefleet.core.observed.parse_preflight`."""
    return _sh(PREFLIGHT_SCRIPT, base_dir, str(port))


# -- the node lock ---------------------------------------------------------------------------
LOCK_SCRIPT = (
    'base=$1; owner=$2; unlock_id=$3; lock=$base/' + LOCK_DIR + '; '
    'mkdir -p "$base" || exit 1; '
    # --force-unlock LOCK_ID removes that lock and no other: a lock taken since by another
    # rollout has another id and stays.
    'if [ -n "$unlock_id" ] && [ -d "$lock" ]; then '
    'case "$(head -n 1 "$lock/owner" 2>/dev/null)" in '
    '*" id=$unlock_id") rm -rf "$lock";; esac; fi; '
    # A holder that gave up said so in its state line: nobody runs there any more, and the
    # next rollout takes the lock over to repair what it left (the audit log has its line).
    'if [ -d "$lock" ] && grep -q "abandoned=" "$lock/' + LOCK_STATE_FILE + '" 2>/dev/null; '
    'then printf \'' + LOCK_TAKEN_OVER + '\\n\'; cat "$lock/owner" "$lock/' + LOCK_STATE_FILE
    + '" 2>/dev/null; printf \'\\n' + LOCK_TAKEN_OVER_END + '\\n\'; rm -rf "$lock"; fi; '
    'if ! mkdir "$lock" 2>/dev/null; then '
    '{ cat "$lock/owner" || echo "(owner not recorded yet)"; '
    'cat "$lock/' + LOCK_STATE_FILE + '"; } 2>/dev/null; '
    'exit ' + str(LOCK_HELD_EXIT) + '; fi; '
    "printf '%s\\n' \"$owner\" > \"$lock/owner\""
)


def acquire_lock(base_dir: str, owner: str, *, unlock_id: str | None = None) -> list[str]:
    """Take the node lock, failing with exit status :data:`LOCK_HELD_EXIT` and the holder's
    owner and state lines on stdout when someone holds it. ``unlock_id`` first removes the
    lock with that id (and only that one); a lock whose holder abandoned it is taken over,
    the first output line then being :data:`LOCK_TAKEN_OVER` and the next ones its lines."""
    return _sh(LOCK_SCRIPT, base_dir, owner, unlock_id or "")


UNLOCK_SCRIPT = (
    'lock=$1/' + LOCK_DIR + '; '
    # Only the holder removes the lock: after a force-unlock it belongs to someone else.
    'if [ "$(head -n 1 "$lock/owner" 2>/dev/null)" = "$2" ]; then rm -rf "$lock"; '
    'else echo "lock is no longer ours; left in place" >&2; fi'
)


def release_lock(base_dir: str, owner: str) -> list[str]:
    """Remove the node lock if ``owner`` still holds it."""
    return _sh(UNLOCK_SCRIPT, base_dir, owner)


FORCE_UNLOCK_SCRIPT = (
    'lock=$1/' + LOCK_DIR + '; '
    '[ -d "$lock" ] || { echo "not locked"; exit 0; }; '
    'case "$(head -n 1 "$lock/owner" 2>/dev/null)" in '
    '*" id=$2") rm -rf "$lock" && echo removed;; '
    '*) cat "$lock/owner" "$lock/' + LOCK_STATE_FILE + '" 2>/dev/null; '
    'exit ' + str(LOCK_HELD_EXIT) + ';; esac'
)


def force_unlock(base_dir: str, lock_id: str) -> list[str]:
    """Remove the node lock whose id is ``lock_id``: prints ``removed`` or ``not locked``;
    exit :data:`LOCK_HELD_EXIT` with the holder's lines when the lock has another id."""
    return _sh(FORCE_UNLOCK_SCRIPT, base_dir, lock_id)


LOCK_STATE_SCRIPT = (
    'lock=$1/' + LOCK_DIR + '; '
    '[ "$(head -n 1 "$lock/owner" 2>/dev/null)" = "$2" ] || '
    '{ echo "the node lock is no longer ours" >&2; exit ' + str(LOCK_HELD_EXIT) + '; }; '
    "printf '%s\\n' \"$3\" > \"$lock/.state.$$\" && "
    'mv -f "$lock/.state.$$" "$lock/' + LOCK_STATE_FILE + '"'
)


def set_lock_state(base_dir: str, owner: str, line: str) -> list[str]:
    """Record the holder's phase in the lock (only while ``owner`` holds it), atomically."""
    return _sh(LOCK_STATE_SCRIPT, base_dir, owner, line)


# -- releases --------------------------------------------------------------------------------
UPLOAD_SCRIPT = (
    'dir=$1; id=$2; sums=$3; aside=$4; same=${5:-$3}; rel=$1/' + RELEASES + '/$2; '
    # Already there (an earlier upload finished): a release folder is complete by design.
    # A replacing upload (aside set) keeps it only when its rendered files are exactly these
    # (``same``: the sums without the manifest, whose time stamp differs per upload): then it
    # is this upload's own folder found again by a retry, or an older upload of the same
    # files and secrets. Otherwise (edited on the node, or written with other secret values)
    # it is moved aside and replaced.
    'if [ -d "$rel" ] && { [ -z "$aside" ] || ( cd "$rel" && printf \'%s\\n\' "$same" '
    '| sha256sum -c --quiet --strict - ) >/dev/null 2>&1; }; '
    'then cat >/dev/null; echo present; exit 0; fi; '
    # A folder per attempt (the shell's pid): a retried upload never meets a cut one's
    # leftovers, and a stale folder of a reused pid can only hold files of this release.
    'tmp=$1/' + STAGING + '/$2.$$; '
    'mkdir -p -m 755 "$dir/' + RELEASES + '" "$tmp" && cd "$tmp" || exit 1; '
    'tar -x -p --no-same-owner -f - || { rm -rf "$tmp"; exit 1; }; '
    # A cut stream can end at a member boundary, which tar accepts: the checksums prove
    # that every file arrived whole before anything is renamed into releases/.
    "printf '%s\\n' \"$sums\" | sha256sum -c --quiet --strict - "
    '|| { echo "upload incomplete: checksums differ" >&2; rm -rf "$tmp"; exit 1; }; '
    # The replaced folder is kept for forensics (pruned like any old release).
    'if [ -n "$aside" ] && [ -d "$rel" ]; then '
    'mv -T "$rel" "$rel.$aside" || { rm -rf "$tmp"; exit 1; }; fi; '
    'mv -T "$tmp" "$rel" && echo uploaded'
)


def upload_release(base_dir: str, deployment: str, release_id: str,
                   checksums: str, aside: str | None = None,
                   content_checksums: str | None = None) -> list[str]:
    """Unpack a tar arriving on stdin into a new ``staging/<id>.<pid>``, check every file
    against ``checksums`` (``sha256sum`` lines), then rename it to ``releases/<id>``.

    ``aside`` (a replacing upload: the folder was edited on the node, or may hold other
    secret values): an existing ``releases/<id>`` that does not hold exactly the files of
    ``content_checksums`` (default ``checksums``) is renamed to ``releases/<id>.<aside>``
    once the upload is checked, and the upload takes its place.
    """
    extra = [aside, content_checksums] if aside and content_checksums else \
        [aside] if aside else []
    return _sh(UPLOAD_SCRIPT, deployment_dir(base_dir, deployment), release_id, checksums,
               *extra)


SWITCH_SCRIPT = (
    'dir=$1; new=' + RELEASES + '/$2; tmp=$1/.' + CURRENT + '.$$; '
    'old=$(readlink "$dir/' + CURRENT + '" 2>/dev/null) || old=; '
    'ln -sfn "$new" "$tmp" && mv -T "$tmp" "$dir/' + CURRENT + '" || exit 1; '
    'if [ -n "$old" ] && [ "$old" != "$new" ]; then '
    'ln -sfn "$old" "$tmp" && mv -T "$tmp" "$dir/' + PREVIOUS + '"; fi'
)


def switch_current(base_dir: str, deployment: str, release_id: str) -> list[str]:
    """Point ``current`` at ``releases/<id>`` atomically (a new symlink renamed over it), and
    ``previous`` at the release it pointed to before: the default target of a rollback."""
    return _sh(SWITCH_SCRIPT, deployment_dir(base_dir, deployment), release_id)


PRUNE_SCRIPT = (
    'dir=$1; keep=$2; shift 2; '
    'rm -rf "$dir/' + STAGING + '"/*; '
    'cd "$dir/' + RELEASES + '" 2>/dev/null || exit 0; '
    'n=0; '
    'for r in $(ls -1t); do '
    'n=$((n + 1)); [ "$n" -le "$keep" ] && continue; '
    'for p in "$@"; do [ "$r" = "$p" ] && continue 2; done; '
    'rm -rf -- "$r"; '
    'done'
)


def prune_releases(base_dir: str, deployment: str, keep: int,
                   protect: Sequence[str] = ()) -> list[str]:
    """Keep the ``keep`` newest release folders (by time of upload) and every one in
    ``protect`` (current and the previous); empty ``staging/`` of cut uploads."""
    return _sh(PRUNE_SCRIPT, deployment_dir(base_dir, deployment), str(keep), *protect)


GATE_MARK_SCRIPT = (
    'dir=$1; id=$2; at=$3; tmp=$1/.gated.$$; '
    'c=$(' + deployment_ids('$4', running=True) + ') || exit 1; c=$(echo "$c" | head -n 1); '
    '[ -n "$c" ] || { echo "no running engine to mark as gated" >&2; exit 1; }; '
    "started=$(docker inspect --format '{{.State.StartedAt}}' \"$c\") || exit 1; "
    "line=$(printf 'release=%s started=%s at=%s' \"$id\" \"$started\" \"$at\"); "
    # Atomically through a new file; on a full disk (no block or inode for a new file)
    # overwrite the old record in place: truncating it frees the space the line needs, and
    # a torn record reads as "ungated", the safe side.
    '{ printf \'%s\\n\' "$line" > "$tmp" && mv -f "$tmp" "$dir/' + GATED + '"; } 2>/dev/null || '
    '{ rm -f "$tmp"; printf \'%s\\n\' "$line" > "$dir/' + GATED + '"; } || exit 1; '
    # last-good needs a new inode: on a full disk it keeps naming an earlier gated release.
    '{ ln -sfn "' + RELEASES + '/$id" "$tmp" && mv -T "$tmp" "$dir/' + LAST_GOOD + '"; } '
    '2>/dev/null || { rm -f "$tmp"; echo "last-good not moved to $id (no space)" >&2; }'
)


def mark_gated(base_dir: str, deployment: str, release_id: str, at: str) -> list[str]:
    """After a passed gate: record the running engine (release and Docker's ``StartedAt``)
    in ``gated`` and point ``last-good`` at the release. Written only after a passed gate,
    so an engine without a matching mark is one nobody checked."""
    return _sh(GATE_MARK_SCRIPT, deployment_dir(base_dir, deployment), release_id, at,
               compose_project(deployment))


AUDIT_SCRIPT = "printf '%s\\n' \"$2\" >> \"$1/" + AUDIT_FILE + "\""


def append_audit(base_dir: str, deployment: str, line: str) -> list[str]:
    """Append one line to the deployment's ``audit.log``."""
    return _sh(AUDIT_SCRIPT, deployment_dir(base_dir, deployment), line)

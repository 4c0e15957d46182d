"""Remote command builders: one exact argv per builder (commands are data), then the scripts
run for real by the local POSIX ``sh`` against a throw-away base directory."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest

from servefleet.adapters import compose_commands, remote
from servefleet.adapters.releases import checksum_lines, tar_bytes
from servefleet.core.observed import parse_preflight, parse_releases


# -- exact commands ---------------------------------------------------------------------------
def test_list_releases() -> None:
    assert remote.list_releases("/srv/sf", "main") == [
        "sh", "-c",
        "dir=$1; printf '@@servefleet-releases 1\\n@@current\\n'; "
        'readlink "$dir/current" 2>/dev/null; '
        "printf '@@previous\\n'; readlink \"$dir/previous\" 2>/dev/null; "
        'for r in "$dir"/releases/*/; do [ -d "$r" ] || continue; '
        "id=${r%/}; id=${id##*/}; printf '@@release %s\\n' \"$id\"; "
        'cat "${r}manifest.json" 2>/dev/null; echo; done; printf \'@@end\\n\'',
        "sh", "/srv/sf/main",
    ]


def test_preflight() -> None:
    assert remote.preflight("/srv/sf", 8000) == [
        "sh", "-c",
        "base=$1; port=$2; "
        "if v=$(docker version --format '{{.Server.Version}}' 2>&1); "
        'then echo "docker_version=$v"; '
        'else echo "docker_error=$(printf %s "$v" | tail -n 1)"; fi; '
        "if cv=$(docker compose version --short 2>/dev/null); then "
        'echo "compose=docker compose"; echo "compose_version=$cv"; '
        "elif cv=$(docker-compose version --short 2>/dev/null); then "
        'echo "compose=docker-compose"; echo "compose_version=$cv"; fi; '
        "echo \"disk_free_kib=$(df -Pk \"$base\" | awk 'NR==2 {print $4}')\"; "
        "hex=$(printf '%04X' \"$port\"); "
        "if awk -v p=\"$hex\" '$4 == \"0A\" && substr($2, index($2, \":\") + 1) == p "
        "{ found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null; "
        "then echo port_in_use=yes; else echo port_in_use=no; fi",
        "sh", "/srv/sf", "8000",
    ]


def test_acquire_lock() -> None:
    assert remote.acquire_lock("/srv/sf", "me@ctl pid=1 id=ab12") == [
        "sh", "-c", remote.LOCK_SCRIPT, "sh", "/srv/sf", "me@ctl pid=1 id=ab12", ""]
    assert remote.acquire_lock("/srv/sf", "me@ctl pid=1 id=ab12", unlock_id="cd34") == [
        "sh", "-c", remote.LOCK_SCRIPT, "sh", "/srv/sf", "me@ctl pid=1 id=ab12", "cd34"]


def test_release_lock() -> None:
    assert remote.release_lock("/srv/sf", "me@ctl pid=1") == [
        "sh", "-c",
        'lock=$1/.servefleet-lock; if [ "$(head -n 1 "$lock/owner" 2>/dev/null)" = "$2" ]; '
        'then rm -rf "$lock"; else echo "lock is no longer ours; left in place" >&2; fi',
        "sh", "/srv/sf", "me@ctl pid=1",
    ]


def test_upload_release() -> None:
    assert remote.upload_release("/srv/sf", "main", "abc123", "00  a") == [
        "sh", "-c",
        'dir=$1; id=$2; sums=$3; aside=$4; same=${5:-$3}; rel=$1/releases/$2; '
        'if [ -d "$rel" ] && { [ -z "$aside" ] || ( cd "$rel" && printf \'%s\\n\' "$same" '
        '| sha256sum -c --quiet --strict - ) >/dev/null 2>&1; }; '
        'then cat >/dev/null; echo present; exit 0; fi; '
        'tmp=$1/staging/$2.$$; '
        'mkdir -p -m 755 "$dir/releases" "$tmp" && cd "$tmp" || exit 1; '
        'tar -x -p --no-same-owner -f - || { rm -rf "$tmp"; exit 1; }; '
        "printf '%s\\n' \"$sums\" | sha256sum -c --quiet --strict - "
        '|| { echo "upload incomplete: checksums differ" >&2; rm -rf "$tmp"; exit 1; }; '
        'if [ -n "$aside" ] && [ -d "$rel" ]; then '
        'mv -T "$rel" "$rel.$aside" || { rm -rf "$tmp"; exit 1; }; fi; '
        'mv -T "$tmp" "$rel" && echo uploaded',
        "sh", "/srv/sf/main", "abc123", "00  a",
    ]
    assert remote.upload_release("/srv/sf", "main", "abc123", "00  a", "edited-T")[-1] == \
        "edited-T"
    assert remote.upload_release("/srv/sf", "main", "abc123", "00  a", "edited-T",
                                 "11  b")[-2:] == ["edited-T", "11  b"]


def test_switch_current() -> None:
    assert remote.switch_current("/srv/sf/", "main", "abc123") == [
        "sh", "-c",
        'dir=$1; new=releases/$2; tmp=$1/.current.$$; '
        'old=$(readlink "$dir/current" 2>/dev/null) || old=; '
        'ln -sfn "$new" "$tmp" && mv -T "$tmp" "$dir/current" || exit 1; '
        'if [ -n "$old" ] && [ "$old" != "$new" ]; then '
        'ln -sfn "$old" "$tmp" && mv -T "$tmp" "$dir/previous"; fi',
        "sh", "/srv/sf/main", "abc123",
    ]


def test_prune_releases() -> None:
    assert remote.prune_releases("/srv/sf", "main", 5, ["abc", "def"]) == [
        "sh", "-c",
        'dir=$1; keep=$2; shift 2; rm -rf "$dir/staging"/*; '
        'cd "$dir/releases" 2>/dev/null || exit 0; n=0; for r in $(ls -1t); do '
        'n=$((n + 1)); [ "$n" -le "$keep" ] && continue; '
        'for p in "$@"; do [ "$r" = "$p" ] && continue 2; done; rm -rf -- "$r"; done',
        "sh", "/srv/sf/main", "5", "abc", "def",
    ]


def test_append_audit() -> None:
    assert remote.append_audit("/srv/sf", "main", "a\tb") == [
        "sh", "-c", "printf '%s\\n' \"$2\" >> \"$1/audit.log\"", "sh", "/srv/sf/main", "a\tb"]


def test_build() -> None:
    assert compose_commands.build(["docker", "compose"], "/srv/sf", "main", "abc",
                        ["compose.yaml"]) == [
        "docker", "compose", "-p", "servefleet-main", "--project-directory",
        "/srv/sf/main/releases/abc", "-f", "/srv/sf/main/releases/abc/compose.yaml", "build"]


def test_up() -> None:
    assert compose_commands.up(["docker-compose"], "/srv/sf", "main", "abc",
                     ["compose.yaml", "compose.override.1.yaml", "/etc/site.yaml"]) == [
        "sh", "-c", "printf 'since=%s\\n' \"$(date +%s.%N)\"; exec \"$@\"", "sh",
        "docker-compose", "-p", "servefleet-main", "--project-directory",
        "/srv/sf/main/releases/abc",
        "-f", "/srv/sf/main/releases/abc/compose.yaml",
        "-f", "/srv/sf/main/releases/abc/compose.override.1.yaml",
        "-f", "/etc/site.yaml", "up", "-d", "--remove-orphans"]


def test_stop() -> None:
    # The compose project's running containers by label, and an adopted one by name.
    ids = ('{ docker ps -q --filter "label=com.docker.compose.project=$1" && '
           'docker ps -q --filter "name=^$1-adopted\\$"; }')
    assert remote.deployment_ids("$1", running=True) == ids
    script = ('ids=$(' + ids + ') || exit 1; '
              'shift; [ -z "$ids" ] || docker stop "$@" $ids >/dev/null')
    assert compose_commands.stop("main") == ["sh", "-c", script, "sh", "servefleet-main"]
    assert compose_commands.stop("main", grace_seconds=5) == [
        "sh", "-c", script, "sh", "servefleet-main", "-t", "5"]


def test_logs() -> None:
    # The running engine first (compose's or an adopted one), else the newest container.
    script = (
        'c=$(' + remote.deployment_ids("$1", running=True) + ') || exit 1; '
        'c=$(echo "$c" | head -n 1); '
        '[ -n "$c" ] || c=$(' + remote.deployment_ids("$1") + ' | head -n 1) || exit 1; '
        '[ -n "$c" ] || { echo "no container for deployment $1" >&2; exit 1; }; '
        'shift; exec docker logs "$@" "$c"'
    )
    assert compose_commands.logs("main", follow=True, since="1700000000") == [
        "sh", "-c", script, "sh", "servefleet-main", "--follow", "--since", "1700000000"]
    assert compose_commands.logs("main", tail=200) == [
        "sh", "-c", script, "sh", "servefleet-main", "--tail", "200"]


def test_sequence_quotes_each_word() -> None:
    assert remote.sequence(["printf", "%s", "a b"], ["true"]) == [
        "sh", "-c", "printf %s 'a b' && true", "sh"]


# -- the scripts, run by the local sh ---------------------------------------------------------
def run(argv: list[str], stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess[bytes]:
    """Run a built command the way sshd does: the quoted line through a shell."""
    return subprocess.run(["sh", "-c", shlex.join(argv)], input=stdin, capture_output=True,
                          timeout=60, check=False, env={**os.environ, **env})


FILES = {
    "compose.yaml": (b"services: {}\n", 0o644),
    "engine.env": (b"HF_TOKEN='hf_secret_value'\n", 0o600),
    "patches/01-x.diff": (b"--- a\n+++ b\n", 0o644),
    "manifest.json": (b'{"release_id": "r1"}\n', 0o644),
}


def test_upload_unpacks_checks_and_renames(tmp_path: Path) -> None:
    base = str(tmp_path)
    done = run(remote.upload_release(base, "main", "r1", checksum_lines(FILES)),
               tar_bytes(FILES))
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"uploaded\n"
    release = tmp_path / "main" / "releases" / "r1"
    assert (release / "patches" / "01-x.diff").read_bytes() == b"--- a\n+++ b\n"
    assert (release / "engine.env").stat().st_mode & 0o777 == 0o600
    assert (release / "compose.yaml").stat().st_mode & 0o777 == 0o644
    assert release.stat().st_mode & 0o777 == 0o755
    assert list((tmp_path / "main" / "staging").iterdir()) == []
    again = run(remote.upload_release(base, "main", "r1", checksum_lines(FILES)),
                tar_bytes(FILES))
    assert again.returncode == 0 and again.stdout == b"present\n"


@pytest.mark.parametrize("cut", ["member_boundary", "mid_member", "empty"])
def test_cut_upload_leaves_no_release(tmp_path: Path, cut: str) -> None:
    data = tar_bytes(FILES)
    # The first member's header and data take 1024 bytes (after the folder entry's 512):
    # cutting at 1536 ends the stream cleanly between members, which tar itself accepts.
    end = {"member_boundary": 1536, "mid_member": 1300, "empty": 0}[cut]
    done = run(remote.upload_release(str(tmp_path), "main", "r1", checksum_lines(FILES)),
               data[:end])
    assert done.returncode != 0
    assert not (tmp_path / "main" / "releases" / "r1").exists()
    assert list((tmp_path / "main" / "staging").iterdir()) == []


def test_switch_points_current_at_the_release(tmp_path: Path) -> None:
    for release in ("r1", "r2"):
        (tmp_path / "main" / "releases" / release).mkdir(parents=True)
    assert run(remote.switch_current(str(tmp_path), "main", "r1")).returncode == 0
    assert os.readlink(tmp_path / "main" / "current") == "releases/r1"
    assert not (tmp_path / "main" / "previous").exists()
    assert run(remote.switch_current(str(tmp_path), "main", "r2")).returncode == 0
    assert os.readlink(tmp_path / "main" / "current") == "releases/r2"
    assert os.readlink(tmp_path / "main" / "previous") == "releases/r1"
    # Switching to the release that is current already keeps previous as it was.
    assert run(remote.switch_current(str(tmp_path), "main", "r2")).returncode == 0
    assert os.readlink(tmp_path / "main" / "previous") == "releases/r1"
    assert sorted(p.name for p in (tmp_path / "main").iterdir()) == [
        "current", "previous", "releases"]


def test_prune_keeps_the_newest_and_the_protected(tmp_path: Path) -> None:
    releases = tmp_path / "main" / "releases"
    now = time.time()
    for age, name in enumerate(["r7", "r6", "r5", "r4", "r3", "r2", "r1"]):
        (releases / name).mkdir(parents=True)
        os.utime(releases / name, (now - age * 60, now - age * 60))
    (tmp_path / "main" / "staging" / "x.n1").mkdir(parents=True)
    done = run(remote.prune_releases(str(tmp_path), "main", 3, ["r1"]))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in releases.iterdir()) == ["r1", "r5", "r6", "r7"]
    assert list((tmp_path / "main" / "staging").iterdir()) == []


ALICE = "alice@a pid=1 since=T op=deploy id=aaaa11112222"
BOB = "bob@b pid=2 since=T op=deploy id=bbbb33334444"


def test_lock_is_exclusive_and_only_its_owner_releases_it(tmp_path: Path) -> None:
    base = str(tmp_path / "base")
    lock = tmp_path / "base" / remote.LOCK_DIR
    first = run(remote.acquire_lock(base, ALICE))
    assert first.returncode == 0, first.stderr
    second = run(remote.acquire_lock(base, BOB))
    assert second.returncode == remote.LOCK_HELD_EXIT
    assert second.stdout == f"{ALICE}\n".encode()
    assert run(remote.release_lock(base, BOB)).returncode == 0
    assert lock.is_dir()
    # --force-unlock with another id leaves a live lock alone.
    wrong = run(remote.acquire_lock(base, BOB, unlock_id="cccc55556666"))
    assert wrong.returncode == remote.LOCK_HELD_EXIT
    assert (lock / "owner").read_text() == f"{ALICE}\n"
    forced = run(remote.acquire_lock(base, BOB, unlock_id="aaaa11112222"))
    assert forced.returncode == 0
    assert run(remote.release_lock(base, ALICE)).returncode == 0
    assert (lock / "owner").read_text() == f"{BOB}\n"
    run(remote.release_lock(base, BOB))
    assert not lock.exists()


def test_lock_state_is_written_only_by_the_holder_and_shown_when_held(tmp_path: Path) -> None:
    base = str(tmp_path)
    lock = tmp_path / remote.LOCK_DIR
    run(remote.acquire_lock(base, ALICE))
    assert run(remote.set_lock_state(base, BOB, "phase=boot")).returncode == \
        remote.LOCK_HELD_EXIT
    assert run(remote.set_lock_state(base, ALICE, "phase=boot deployment=main release=r2 "
                                     "at=T1")).returncode == 0
    assert (lock / "state").read_text() == "phase=boot deployment=main release=r2 at=T1\n"
    held = run(remote.acquire_lock(base, BOB))
    assert held.returncode == remote.LOCK_HELD_EXIT
    assert held.stdout.decode().splitlines() == [ALICE, "phase=boot deployment=main "
                                                 "release=r2 at=T1"]


def test_an_abandoned_lock_is_taken_over_and_its_lines_returned(tmp_path: Path) -> None:
    base = str(tmp_path)
    run(remote.acquire_lock(base, ALICE))
    run(remote.set_lock_state(base, ALICE, "phase=boot at=T1 abandoned=second-signal"))
    done = run(remote.sequence(remote.acquire_lock(base, BOB), ["echo", "then"]))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == [
        remote.LOCK_TAKEN_OVER, ALICE, "phase=boot at=T1 abandoned=second-signal", "",
        remote.LOCK_TAKEN_OVER_END, "then"]
    assert (tmp_path / remote.LOCK_DIR / "owner").read_text() == f"{BOB}\n"


def test_force_unlock_removes_only_the_lock_with_that_id(tmp_path: Path) -> None:
    base = str(tmp_path)
    assert run(remote.force_unlock(base, "aaaa11112222")).stdout == b"not locked\n"
    run(remote.acquire_lock(base, ALICE))
    other = run(remote.force_unlock(base, "bbbb33334444"))
    assert other.returncode == remote.LOCK_HELD_EXIT
    assert other.stdout.decode().splitlines()[0] == ALICE
    assert (tmp_path / remote.LOCK_DIR).is_dir()
    done = run(remote.force_unlock(base, "aaaa11112222"))
    assert done.returncode == 0 and done.stdout == b"removed\n"
    assert not (tmp_path / remote.LOCK_DIR).exists()


def test_values_are_never_run_as_shell(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = f"$(touch {marker}); `touch {marker}` ' \" \\"
    done = run(remote.append_audit(str(tmp_path), "main", hostile))
    assert done.returncode != 0  # the folder does not exist; the point is what ran
    (tmp_path / "main").mkdir()
    assert run(remote.append_audit(str(tmp_path), "main", hostile)).returncode == 0
    assert (tmp_path / "main" / "audit.log").read_text() == hostile + "\n"
    run(remote.acquire_lock(str(tmp_path), hostile))
    assert (tmp_path / remote.LOCK_DIR / "owner").read_text() == hostile + "\n"
    assert not marker.exists()


def test_repair_upload_moves_the_edited_folder_aside(tmp_path: Path) -> None:
    base = str(tmp_path)
    assert run(remote.upload_release(base, "main", "r1", checksum_lines(FILES)),
               tar_bytes(FILES)).returncode == 0
    release = tmp_path / "main" / "releases" / "r1"
    (release / "compose.yaml").write_bytes(b"services: {}\n# edited by hand\n")
    repair = remote.upload_release(base, "main", "r1", checksum_lines(FILES), "edited-T1")
    done = run(repair, tar_bytes(FILES))
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"uploaded\n"
    assert (release / "compose.yaml").read_bytes() == b"services: {}\n"
    aside = tmp_path / "main" / "releases" / "r1.edited-T1"
    assert (aside / "compose.yaml").read_bytes().endswith(b"# edited by hand\n")
    # A retry of the same repair (a new connection) finds its own upload: nothing moves.
    again = run(repair, tar_bytes(FILES))
    assert again.returncode == 0 and again.stdout == b"present\n"
    assert sorted(p.name for p in (tmp_path / "main" / "releases").iterdir()) == [
        "r1", "r1.edited-T1"]


def test_replacing_upload_keeps_a_folder_of_the_same_files_and_replaces_other_secrets(
        tmp_path: Path) -> None:
    # A folder of the release left by an earlier deploy: its manifest's time stamp differs
    # from this upload's, which alone never replaces it; another HF_TOKEN value does.
    base = str(tmp_path)
    old_manifest = {**FILES, "manifest.json": (b'{"created_at": "earlier"}\n', 0o644)}
    assert run(remote.upload_release(base, "main", "r1", checksum_lines(old_manifest)),
               tar_bytes(old_manifest)).returncode == 0
    content = {p: f for p, f in FILES.items() if p != "manifest.json"}
    same = run(remote.upload_release(base, "main", "r1", checksum_lines(FILES), "edited-T1",
                                     checksum_lines(content)), tar_bytes(FILES))
    assert same.returncode == 0 and same.stdout == b"present\n", same.stderr
    release = tmp_path / "main" / "releases" / "r1"
    assert (release / "manifest.json").read_bytes() == b'{"created_at": "earlier"}\n'

    rotated = {**FILES, "engine.env": (b"HF_TOKEN='hf_rotated_value'\n", 0o600)}
    rotated_content = {p: f for p, f in rotated.items() if p != "manifest.json"}
    done = run(remote.upload_release(base, "main", "r1", checksum_lines(rotated), "edited-T2",
                                     checksum_lines(rotated_content)), tar_bytes(rotated))
    assert done.returncode == 0 and done.stdout == b"uploaded\n", done.stderr
    assert (release / "engine.env").read_bytes() == b"HF_TOKEN='hf_rotated_value'\n"
    aside = tmp_path / "main" / "releases" / "r1.edited-T2"
    assert (aside / "engine.env").read_bytes() == b"HF_TOKEN='hf_secret_value'\n"


def test_list_releases_reads_each_manifest(tmp_path: Path) -> None:
    main = tmp_path / "main"
    for name, when in (("r1", "2026-11-20T10:00:00+00:00"), ("r2", "2026-11-21T10:00:00+00:00")):
        (main / "releases" / name).mkdir(parents=True)
        (main / "releases" / name / "manifest.json").write_text(
            f'{{"release_id": "{name}", "created_at": "{when}", "profile": "p-{name}"}}')
    (main / "releases" / "r0").mkdir()
    os.symlink("releases/r1", main / "current")
    os.symlink("releases/r2", main / "previous")
    done = run(remote.list_releases(str(tmp_path), "main"))
    releases = parse_releases(done.stdout.decode())
    assert [(r.release_id, r.current, r.previous, r.profile) for r in releases] == [
        ("r2", False, True, "p-r2"), ("r1", True, False, "p-r1"), ("r0", False, False, None)]


def test_preflight_sees_a_listening_port(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        busy = parse_preflight(run(remote.preflight(str(tmp_path), port),
                                   DOCKER_HOST=f"unix://{tmp_path}/none.sock").stdout.decode())
    free = parse_preflight(run(remote.preflight(str(tmp_path), port),
                               DOCKER_HOST=f"unix://{tmp_path}/none.sock").stdout.decode())
    assert busy.port_in_use is True
    assert free.port_in_use is False
    assert busy.disk_free_bytes is not None and busy.disk_free_bytes > 0
    assert busy.docker_version is None and busy.docker_error


def test_up_prints_the_node_time_first(tmp_path: Path) -> None:
    argv = compose_commands.up(["echo"], str(tmp_path), "main", "r1", ["compose.yaml"])
    done = run(argv)
    lines = done.stdout.decode().splitlines()
    # To the nanosecond: a restarted container's log still holds the run before, whose
    # last lines may fall in the same second.
    seconds, dot, nanos = lines[0].removeprefix("since=").partition(".")
    assert seconds.isdigit() and dot and len(nanos) == 9 and nanos.isdigit(), lines[0]
    assert compose_commands.parse_since(done.stdout.decode()) == lines[0].removeprefix("since=")
    assert lines[1] == (f"-p servefleet-main --project-directory {tmp_path}/main/releases/r1 "
                        f"-f {tmp_path}/main/releases/r1/compose.yaml up -d --remove-orphans")


def test_parse_since_keeps_what_docker_logs_since_takes() -> None:
    assert compose_commands.parse_since("since=1795514400.250000001\n") == "1795514400.250000001"
    assert compose_commands.parse_since("since=1795514400.25\n") == "1795514400.250000000"
    # busybox's date has no %N: whole seconds are all there is.
    assert compose_commands.parse_since("since=1795514400.%N\n") == "1795514400"
    assert compose_commands.parse_since("") == "0"
    assert compose_commands.parse_since("since=; rm -rf /\n") == "0"

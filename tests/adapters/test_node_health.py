"""The pieces of ``servefleet health`` that need no fleet: the remote read/write commands run
by the real ``sh`` here (with a stand-in ``docker`` on the PATH), their answers parsed, and
log lines split into runs by docker's timestamps."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from servefleet.adapters.node_health import (
    epoch_of,
    key_of_epoch,
    parse_lines,
    parse_read,
    read_log_and_baselines,
    split_runs,
    stamp_key,
    write_baselines,
)
from servefleet.core.baselines import BASELINE_FILE, BaselineBook, parse_book, record
from servefleet.core.bootlog import parse_text
from servefleet.core.project import load_profiles, profile_identity
from tests.reference_project import REPO_ROOT

# Two runs of one container: the first died at boot, the second became ready.
LOG = b"""\
2026-11-21T10:00:00.000000001Z INFO 11-21 10:00:00 [api_server.py:1] vLLM API server version 0.21.0
2026-11-21T10:00:05.100000000Z (EngineCore pid=96) ERROR 11-21 10:00:05 [core.py:1] ValueError: \
No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when \
initializing the engine.
2026-11-21T10:00:09.000000000Z INFO 11-21 10:00:09 [api_server.py:1] vLLM API server version 0.21.0
2026-11-21T10:00:11.000000000Z (EngineCore pid=97) INFO 11-21 10:00:11 [kv_cache_utils.py:1] \
GPU KV cache size: 360,448 tokens
2026-11-21T10:00:12.000000000Z (APIServer pid=1) INFO:     Application startup complete.
"""
STARTED_AT = "2026-11-21T10:00:08.5Z"  # docker inspect trims trailing zeros
IMAGE_ID = "sha256:" + "ab" * 32


def fake_docker(folder: Path, log: bytes, container: str = "c0ffee") -> dict[str, str]:
    """A ``docker`` on the PATH that lists one container, tells its image and prints ``log``
    (half of it on stderr, as an engine's stderr reaches ``docker logs``)."""
    (folder / "log.txt").write_bytes(log)
    script = folder / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = ps ]; then echo {container}; exit 0; fi\n'
        'if [ "$1" = inspect ]; then\n'
        f'  [ "$2 $3 $4" = "--format {{{{.Image}}}} {container}" ] || exit 9\n'
        f'  echo {IMAGE_ID}; exit 0\n'
        "fi\n"
        'if [ "$1" = logs ]; then\n'
        f'  [ "$2" = --timestamps ] && [ "$3" = {container} ] || exit 9\n'
        f'  head -n 2 "{folder}/log.txt"; tail -n +3 "{folder}/log.txt" >&2; exit 0\n'
        "fi\nexit 1\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def run(argv: list[str], env: dict[str, str], stdin: bytes | None = None) -> bytes:
    return subprocess.run(argv, input=stdin, env=env, capture_output=True, check=True).stdout


def test_read_command_returns_clock_baselines_and_the_merged_log(tmp_path: Path) -> None:
    env = fake_docker(tmp_path, LOG)
    base = tmp_path / "srv"
    base.mkdir()
    profile = load_profiles(REPO_ROOT)[0]["qwen36-fp8"]
    book = record(BaselineBook(), profile, profile_identity(profile),
                  parse_text(LOG.decode()), now=datetime(2026, 11, 21, tzinfo=UTC),
                  release_id="r1", deployment="main")
    assert book is not None
    # Written as the node would: through the write command, from stdin.
    run(write_baselines(str(base) + "/"), env, book.to_text().encode())
    assert parse_book((base / BASELINE_FILE).read_text()) == (book, None)
    assert not [p for p in base.iterdir() if p.name != BASELINE_FILE]  # no temporary left

    read = parse_read(run(read_log_and_baselines(str(base), "main"), env))
    assert read.now is not None and abs(read.now - datetime.now(UTC).timestamp()) < 60
    assert read.book == book and read.book_problem is None
    assert read.has_container and b"".join(read.lines) == LOG
    assert read.image_id == IMAGE_ID


def test_read_without_baselines_or_container(tmp_path: Path) -> None:
    env = fake_docker(tmp_path, b"", container="")
    read = parse_read(run(read_log_and_baselines(str(tmp_path), "main"), env))
    assert read.book == BaselineBook() and read.book_problem is None
    assert not read.has_container and read.lines == () and read.image_id is None
    (tmp_path / BASELINE_FILE).write_text("{broken")
    read = parse_read(run(read_log_and_baselines(str(tmp_path), "main"), env))
    assert read.book == BaselineBook() and "unreadable" in (read.book_problem or "")


def test_values_reach_the_scripts_as_arguments_only() -> None:
    argv = read_log_and_baselines("/srv/x'; touch /tmp/x #", "dep$(id)")
    assert argv[:2] == ["sh", "-c"]
    assert argv[3:] == ["sh", "/srv/x'; touch /tmp/x #", "servefleet-dep$(id)"]
    assert "touch" not in argv[2] and "$(id)" not in argv[2]
    assert write_baselines("/srv/")[3:] == ["sh", "/srv"]


def test_timestamps_compare_whatever_their_precision() -> None:
    assert stamp_key("2026-11-21T10:00:08.5Z") == ("2026-11-21T10:00:08", 500_000_000)
    assert stamp_key(b"2026-11-21T10:00:08.500000000Z line") == \
        ("2026-11-21T10:00:08", 500_000_000)
    assert stamp_key("2026-11-21T10:00:08Z") == ("2026-11-21T10:00:08", 0)
    assert stamp_key(b"INFO no stamp") is None
    assert epoch_of("0001-01-01T00:00:00Z") is None
    epoch = epoch_of(STARTED_AT)
    assert epoch == datetime(2026, 11, 21, 10, 0, 8, 500_000, tzinfo=UTC).timestamp()
    assert key_of_epoch(epoch) == stamp_key(STARTED_AT)


@pytest.mark.parametrize("start", [STARTED_AT, epoch_of(STARTED_AT)])
def test_runs_split_at_the_container_start(start: str | float | None) -> None:
    earlier, current = split_runs(LOG.splitlines(keepends=True), start)
    assert len(earlier) == 2 and len(current) == 3
    before, now = parse_lines(earlier, "vllm"), parse_lines(current, "vllm")
    assert (before.outcome, before.failure_class) == ("failed", "kv_cache_oom")
    assert (now.outcome, now.kv_cache_tokens) == ("ready", 360_448)


def test_without_a_start_everything_is_the_current_run() -> None:
    earlier, current = split_runs(LOG.splitlines(keepends=True), None)
    assert earlier == [] and len(current) == 5


def test_health_reads_a_node_once_for_all_its_deployments(tmp_path: Path) -> None:
    """Two deployments on one node: one read of the node (the fake node counts every
    command), each deployment judged from it (here: nothing deployed, so no further read)."""
    import dataclasses
    from typing import cast

    from fake_node import FakeNodeTransport, one_deployment_project

    from servefleet.adapters.node_health import check_fleet
    from servefleet.adapters.runtime import Transport
    from servefleet.core.models import Deployment

    project = one_deployment_project(tmp_path / "srv", "rtx5090", "qwen36-q4-llamacpp")
    node = project.nodes["rtx5090"]
    stack = project.stack.model_copy(update={"deployments": [
        *project.stack.deployments,
        Deployment(node="rtx5090", name="second", profile="qwen36-q4-llamacpp",
                   port=node.ports[1])]})
    project = dataclasses.replace(project, stack=stack)
    transport = FakeNodeTransport(node, tmp_path / "node")
    found = check_fleet(project, ["rtx5090"],
                        transport_factory=lambda _node, _mask: cast(Transport, transport))
    assert [(r.deployment, r.rows[0].observed) for r in found] == [
        ("main", "nothing deployed here"), ("second", "nothing deployed here")]
    assert transport.labels == ["observe the node"]

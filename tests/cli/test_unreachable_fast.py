"""Read-only commands fail fast on a node that is down: one short connect attempt per node
(``servefleet.core.connect_policy``), nodes in parallel, one line per unreachable node, and
``watch --once`` one table; a rollout keeps its retries.

Real addresses, no fakes: a loopback port nobody listens on (refused at once), a loopback
port whose listen queue is full (the kernel drops the SYN, as on a non-routable address)
and 10.255.255.1 (non-routable; whatever this machine's network does with it), the last
two with a short ``ssh.connect_timeout_seconds``.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

Run = Callable[..., Result]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHWrinkP5271G+hYsu19FVutAVLAaXGxtzVCSx8KdwfB"
LIMIT_SECONDS = 5.0


@pytest.fixture()
def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture()
def blackhole() -> Iterator[int]:
    """A loopback port that never completes a TCP handshake: its listen queue (backlog 0)
    is held full, so the kernel drops every further SYN."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    held = socket.create_connection(("127.0.0.1", port))
    yield port
    held.close()
    server.close()


def point(project: Path, node: str, address: str, port: int,
          timeout: float | None = None) -> None:
    """Aim ``node``'s inventory at ``address:port`` with a pinned host key."""
    path = project / f"nodes/{node}.yaml"
    text = re.sub(r"^address: .*$", f"address: {address}", path.read_text(), count=1,
                  flags=re.M)
    text = re.sub(r"^  port: \d+$", f"  port: {port}", text, count=1, flags=re.M)
    extra = f"\n  connect_timeout_seconds: {timeout}" if timeout is not None else ""
    text = text.replace("host_keys: []", f'host_keys: ["{KEY}"]{extra}')
    path.write_text(text)


@pytest.fixture(params=["blackhole", "non-routable"])
def down_project(request: pytest.FixtureRequest, project: Path, closed_port: int) -> Path:
    """The shipped project with every node down: rtx5090 on a closed loopback port, the
    two Sparks on an address that never answers (1 s timeout)."""
    if request.param == "blackhole":
        address, port = "127.0.0.1", request.getfixturevalue("blackhole")
    else:
        address, port = "10.255.255.1", 22
    point(project, "rtx5090", "127.0.0.1", closed_port)
    for spark in ("dgx-spark-1", "dgx-spark-2"):
        point(project, spark, address, port, timeout=1)
    return project


def _timed(run: Run, *args: str) -> tuple[Result, float]:
    started = time.monotonic()
    result = run(*args, env={"HF_TOKEN": ""})
    return result, time.monotonic() - started


def _one_attempt(output: str, node: str) -> None:
    lines = [line for line in output.splitlines() if f"{node}: cannot reach" in line
             or f"{node}: unreachable" in line or (node in line and "attempt" in line)]
    assert lines, output
    assert all("after 1 attempt " in line for line in lines if "attempt" in line), lines


@pytest.mark.parametrize("args", [("probe", "dgx-spark-2"), ("probe", "rtx5090"),
                                  ("logs", "dgx-spark-2"), ("history", "dgx-spark-2"),
                                  ("releases", "dgx-spark-2")])
def test_a_one_node_command_is_one_line_within_seconds(run: Run, down_project: Path,
                                                       args: tuple[str, ...]) -> None:
    result, seconds = _timed(run, *args)
    assert result.exit_code == 1, result.output
    assert seconds < LIMIT_SECONDS, (seconds, result.output)
    [line] = result.output.splitlines()
    node = args[1]
    assert re.search(rf"{node}: (cannot reach .* over SSH after 1 attempt |unreachable: )",
                     line), line


@pytest.mark.parametrize("command", ["plan", "health", "drift", "doctor"])
def test_a_fleet_command_checks_the_nodes_in_parallel(run: Run, down_project: Path,
                                                      command: str) -> None:
    result, seconds = _timed(run, command)
    assert result.exit_code == 1, result.output
    # Three nodes, one attempt of at most 1 s (Sparks) each, in parallel.
    assert seconds < LIMIT_SECONDS, (seconds, result.output)
    text = " ".join(result.output.split())  # rich wraps long lines
    for node in ("dgx-spark-1", "dgx-spark-2", "rtx5090"):
        _one_attempt(text.replace(f" {node}:", f"\n{node}:"), node)
    assert "attempts" not in text


def test_watch_once_prints_one_table_and_stops(run: Run, down_project: Path) -> None:
    result, seconds = _timed(run, "watch", "--once")
    assert result.exit_code == 1, result.output
    assert seconds < LIMIT_SECONDS, (seconds, result.output)
    assert result.output.count("┏") == 1, result.output
    assert result.output.count("unknown") == 4  # four deployments on three nodes


def test_watch_once_json_stops_after_one_sample(run: Run, down_project: Path) -> None:
    import json

    result, seconds = _timed(run, "watch", "--once", "--json")
    assert result.exit_code == 1
    assert seconds < LIMIT_SECONDS
    events = [json.loads(line) for line in result.output.splitlines()]
    assert len(events) == 4 and {e["state"] for e in events} == {"unknown"}


def test_a_rollout_keeps_its_retries(run: Run, project: Path, closed_port: int) -> None:
    from servefleet.core import connect_policy

    point(project, "rtx5090", "127.0.0.1", closed_port)
    assert "after 1 attempt " in run("probe", "rtx5090").output
    # The read-only policy ends with its command: a deploy retries as before.
    assert connect_policy.current() == connect_policy.ROLLOUT
    result = run("deploy", "rtx5090", "--yes", env={"HF_TOKEN": "hf_x"})
    assert result.exit_code == 1
    assert f"cannot reach 127.0.0.1:{closed_port} over SSH after 4 attempts" in \
        " ".join(result.output.split())

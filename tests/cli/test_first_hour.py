"""The first hour with servefleet: global options after the command, ``--version``, the
project found from any folder inside it, one line (no traceback) for a node that does not
speak SSH, and a plan that still shows what git renders for a node it cannot read."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import component_unavailable

Run = Callable[..., Result]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHWrinkP5271G+hYsu19FVutAVLAaXGxtzVCSx8KdwfB"


def test_global_options_after_the_command(run_cli: Run, project: Path) -> None:
    before = run_cli("validate", project=project, stack="reference")
    after = run_cli("validate", "--stack", "reference", "--project", str(project))
    assert after.exit_code == 0, after.output
    assert after.output == before.output
    assert after.output.splitlines()[-1].startswith("stack reference: 0 error(s)")


def test_global_options_reach_a_command_inside_a_group(run_cli: Run, project: Path,
                                                       tmp_path: Path) -> None:
    out = tmp_path / "units"
    result = run_cli("watch", "install", "--out", str(out), "--stack", "reference",
                     "--project", str(project))
    assert result.exit_code == 0, result.output
    unit = (out / "servefleet-watch.service").read_text()
    assert f" --project {project} --stack reference watch --json" in unit


def test_the_last_stack_given_wins(run_cli: Run, project: Path) -> None:
    result = run_cli("validate", "--stack", "nope", project=project, stack="reference")
    assert result.exit_code == 1
    assert result.output.startswith("error: Pulumi.nope.yaml: no such stack file")


def test_version(run_cli: Run) -> None:
    result = run_cli("--version")
    assert result.exit_code == 0
    assert result.output == f"servefleet {version('servefleet')}\n"


def test_project_found_from_a_folder_inside_it(run_cli: Run, project: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVEFLEET_PROJECT", raising=False)
    monkeypatch.chdir(project / "nodes")
    result = run_cli("validate", "--stack", "reference")
    assert result.exit_code == 0, result.output
    assert "nodes/dgx-spark-1.yaml" in result.output


def test_no_project_above_says_where_it_looked(run_cli: Run, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVEFLEET_PROJECT", raising=False)
    here = tmp_path / "elsewhere" / "deeper"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    looked = [here.resolve(), *here.resolve().parents]
    if any((f / "Pulumi.yaml").exists() or any(f.glob("Pulumi.*.yaml")) for f in looked):
        component_unavailable("a folder above the temporary folder holds a Pulumi project: "
                              "no folder here is outside every project")
    result = run_cli("validate")
    assert result.exit_code == 1
    assert result.output == (
        f"error: no servefleet project found: none of {', '.join(map(str, looked))} holds "
        "Pulumi.yaml or a Pulumi.<stack>.yaml; run servefleet inside your config repo, or "
        "pass --project DIR (or set SERVEFLEET_PROJECT)\n")


def test_missing_stack_file_says_which_exist_and_how_to_pick(run_cli: Run,
                                                             project: Path) -> None:
    result = run_cli("validate", project=project, stack="sim")
    assert result.exit_code == 1
    assert result.output == (
        f"error: Pulumi.sim.yaml: no such stack file in {project.resolve()} (stacks here: "
        "reference); pick one with --stack reference (or export "
        "SERVEFLEET_STACK=reference)\n")


# -- no traceback on stderr ------------------------------------------------------------------
@pytest.fixture()
def not_ssh() -> Iterator[int]:
    """A local port that accepts and at once closes: the SSH library's transport thread
    logs a traceback for it (``Error reading SSH protocol banner``)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


@pytest.fixture()
def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _point_rtx5090_at(project: Path, port: int) -> None:
    path = project / "nodes/rtx5090.yaml"
    text = path.read_text().replace("address: rtx5090.lan", "address: 127.0.0.1")
    text = text.replace("  port: 22\n", f"  port: {port}\n").replace(
        "host_keys: []", f'host_keys: ["{KEY}"]')
    path.write_text(text)


def _servefleet(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servefleet.cli.main", "--project",
                           str(project), "--stack", "reference", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_TOKEN": ""})


@pytest.mark.parametrize("command", ["keyscan", "probe", "plan"])
def test_a_node_that_does_not_speak_ssh_is_one_line(project: Path, not_ssh: int,
                                                    command: str) -> None:
    _point_rtx5090_at(project, not_ssh)
    done = _servefleet(project, command, "rtx5090")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "Exception (client)" not in done.stderr
    errors = done.stderr if command != "plan" else done.stdout
    if command == "keyscan":
        # One line; paramiko appends the socket's error when the peer resets the link
        # before its banner is read ("…banner[Errno 104] Connection reset by peer").
        assert done.stderr.startswith("error: rtx5090: SSH handshake failed (Error reading "
                                      "SSH protocol banner"), done.stderr
        assert done.stderr.endswith(")\n") and done.stderr.count("\n") == 1, done.stderr
    else:
        assert f"rtx5090: cannot reach 127.0.0.1:{not_ssh} over SSH after " in errors


def test_a_closed_port_is_one_line(project: Path, closed_port: int) -> None:
    _point_rtx5090_at(project, closed_port)
    done = _servefleet(project, "keyscan", "rtx5090")
    assert done.returncode == 1
    assert done.stderr == (f"error: rtx5090: cannot reach 127.0.0.1:{closed_port} "
                           "([Errno 111] Connection refused)\n")


def test_verbose_shows_the_ssh_library_s_log(project: Path, not_ssh: int) -> None:
    _point_rtx5090_at(project, not_ssh)
    done = _servefleet(project, "keyscan", "rtx5090", "--verbose")
    assert "Traceback" in done.stderr


# -- plan of a node it cannot read -----------------------------------------------------------
RTX5090_FROM_GIT = [
    "  + -m /models/Qwen3.6-35B-A3B-Q4_K_M.gguf", "  + --alias qwen36-q4",
    "  + --host 0.0.0.0", "  + --port 8000", "  + -c 65536", "  + -np 1", "  + -ngl all",
    "  + -fa on", "  + -ctk q8_0", "  + -ctv q8_0", "  + -b 2048", "  + -ub 512",
    "  + --jinja", "  + --metrics", "  + -lv 4", "  + --no-cache-prompt"]


def _released(lines: list[str]) -> list[str]:
    return [re.sub(r"release [0-9a-f]{12} ", "release <id> ", line) for line in lines]


def test_plan_of_a_node_it_cannot_read_shows_git_s_side(run: Run) -> None:
    result = run("plan", "rtx5090", "dgx-spark-2", env={"HF_TOKEN": ""})
    assert result.exit_code == 1
    lines = _released([line for line in result.output.splitlines()
                       if not line.startswith(("warning: ", "note: "))])
    refused = ("no host key is pinned in the inventory (ssh.host_keys); servefleet does not "
               "trust on first use: run `servefleet keyscan {0}` (or `ssh-keyscan -t ed25519 "
               "-- {0}.lan`), check the fingerprint on the node's console, and paste the line "
               "under ssh.host_keys in its inventory file, as printed")
    spark = lines.index("dgx-spark-2/main: unreachable: compared with git only: release <id> "
                        "(profile qwen36-fp8-mtp)")
    assert lines[spark - 1] == f"dgx-spark-2: {refused.format('dgx-spark-2')}"
    assert "  + --speculative-config {\"method\":\"qwen3_next_mtp\",\"num_speculative_tokens\":2}" \
        in lines[spark:]
    kv = next(line for line in lines[spark:] if line.startswith("    "))
    assert re.fullmatch(r"    KV pool ≈ [0-9.]+[Mk] tokens, CUDA graphs PIECEWISE, concurrency "
                        r"at 131,072 ≈ [0-9.]+× \(modelled cold\)", kv), kv
    rtx = lines.index("rtx5090/main: unreachable: compared with git only: release <id> "
                      "(profile qwen36-q4-llamacpp)")
    assert lines[rtx - 1] == f"rtx5090: {refused.format('rtx5090')}"
    assert lines[rtx + 1:rtx + 1 + len(RTX5090_FROM_GIT)] == RTX5090_FROM_GIT


def test_plan_json_lists_git_s_side_as_unknown(run: Run) -> None:
    import json

    data = json.loads(run("plan", "dgx-spark-2", "--json", env={"HF_TOKEN": ""}).output)
    [item] = data["plan"]
    assert (item["action"], item["compared_with"], item["reasons"], item["engine_state"]) == \
        ("unknown", "git", ["unreachable: compared with git only"], "unknown")
    assert item["flag_diff"]["added"]["--max-model-len"] == "131072"
    assert item["preview"].startswith("KV pool ≈ ")
    assert [e["node"] for e in data["errors"]] == ["dgx-spark-2"]

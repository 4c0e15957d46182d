"""``servefleet watch`` without the fleet: the unit it installs, its Prometheus text, and a
``--once`` run against nodes it cannot reach (every deployment ``unknown``, none acted on)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from servefleet.adapters.watch.fleet import WatchEvent
from servefleet.cli.watch import once_exit_code, prometheus_text
from servefleet.core.watch.classify import TROUBLE

Run = Callable[..., Result]


def test_install_renders_a_service_that_keeps_watch_running(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "units"
    result = run("watch", "install", "--out", str(out), "--notify", "mail -s 'wedge 100%' ops",
                 "--user", "ops")
    assert result.exit_code == 0, result.output
    unit = (out / "servefleet-watch.service").read_text()
    assert "Restart=always" in unit and "User=ops" in unit
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert " watch --json --notify " in exec_start
    assert '"mail -s \'wedge 100%%\' ops"' in exec_start
    assert "--textfile /var/lib/node_exporter/textfile/servefleet_watch.prom" in exec_start


def test_prometheus_text_one_state_set_per_deployment() -> None:
    events = [WatchEvent("sample", "dgx-spark-1", "main", "wedged", "canary", "t"),
              WatchEvent("sample", "rtx5090", "main", "idle", "", "t")]
    text = prometheus_text(events, {"dgx-spark-1/main": 2})
    assert 'servefleet_watch_state{node="dgx-spark-1",deployment="main",state="wedged"} 1' in text
    assert 'servefleet_watch_state{node="dgx-spark-1",deployment="main",state="idle"} 0' in text
    assert 'servefleet_watch_restarts{node="dgx-spark-1",deployment="main"} 2' in text
    assert 'servefleet_watch_restarts{node="rtx5090",deployment="main"} 0' in text
    assert text.count("# TYPE") == 3


def test_once_with_unreachable_nodes_reports_unknown_and_exits_1(run: Run, project: Path,
                                                                 tmp_path: Path) -> None:
    # The reference nodes pin no host key: servefleet never connects, as to a dead node.
    stack = project / "Pulumi.reference.yaml"
    stack.write_text(stack.read_text() + "  servefleet:watch:\n    wedgeIntervals: 2\n")
    prom = tmp_path / "watch.prom"
    result = run("watch", "--once", "--json", "--interval", "1", "--textfile", str(prom))
    assert result.exit_code == 1, result.output
    events = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert events and {e["state"] for e in events} == {"unknown"}
    assert {e["action"] for e in events} == {"none"}
    # No node answered the first sample: --once stops there (nothing more can be read in
    # its window) instead of waiting out wedgeIntervals + 1 samples.
    assert len(events) == len({(e["node"], e["deployment"]) for e in events})
    assert 'state="unknown"} 1' in prom.read_text()


def test_unknown_node_is_one_line_error(run: Run) -> None:
    result = run("watch", "no-such-node", "--once")
    assert result.exit_code == 1
    assert "no-such-node" in result.output


def test_once_exit_status_follows_drift_s_convention() -> None:
    def events(*states: str) -> list[WatchEvent]:
        return [WatchEvent("sample", "n", f"d{i}", state, "", "t")
                for i, state in enumerate(states)]

    assert once_exit_code(events("healthy", "idle", "starting"), TROUBLE) == 0
    assert once_exit_code(events("healthy", "wedged"), TROUBLE) == 2
    assert once_exit_code(events("down", "unknown"), TROUBLE) == 1
    assert once_exit_code([], TROUBLE) == 1


def test_watch_help_documents_the_exit_status(run: Run) -> None:
    text = " ".join(run("watch", "--help").output.split())
    assert ("Exit status with --once (from the last sample): 0 every deployment healthy, idle "
            "or starting, 2 one wedged, crash-looping or down, 1 error (a node unreachable, "
            "so its deployments unknown; a configuration error).") in text

"""The health table: rows per deployment, failures with their proving lines, JSON."""

from __future__ import annotations

import json

from servefleet.core.health_table import (
    CheckRow,
    DeploymentHealth,
    failed_rows,
    fleet_json,
    render_text,
    rows_pass,
    table_lines,
)

OOM_LINE = ("L5: (EngineCore pid=96) ERROR 11-21 10:00:05 [core.py:1] ValueError: No available "
            "memory for the cache blocks.")

HEALTHY = DeploymentHealth(
    node="sim-spark-1", deployment="main", profile="qwen36-fp8", release_id="r-1",
    url="http://10.77.1.2:8000",
    rows=(CheckRow("boot outcome", "ready", "ready", "pass"),
          CheckRow("KV cache tokens", ">= 300,000", "360,448", "pass"),
          CheckRow("KV cache usage", "-", "0.0%", "info")),
    facts={"kv_cache_tokens": 360448})
FAILED = DeploymentHealth(
    node="sim-spark-2", deployment="main", profile="qwen36-fp8", release_id="r-2",
    rows=(CheckRow("engine container", "running", "restarting (exit 1)", "fail"),
          CheckRow("boot outcome", "ready", "failed: kv_cache_oom", "fail",
                   (OOM_LINE, *[f"L{n}: traceback" for n in range(6, 16)]))),
    failure_class="kv_cache_oom")
UNREACHABLE = DeploymentHealth("sim-5090", "main", (),
                               error="sim-5090: cannot reach 10.77.1.4:22 (timed out)")


def test_table_columns_align() -> None:
    lines = table_lines(HEALTHY.rows)
    assert lines[0].split() == ["fact", "expected", "observed", "verdict"]
    assert lines[2] == "KV cache tokens  >= 300,000  360,448   pass"
    assert len({line.index(line.split()[-1]) for line in lines[1:] if "pass" in line}) == 1


def test_report_names_failed_facts_with_their_proving_lines() -> None:
    text = render_text([HEALTHY, FAILED, UNREACHABLE])
    assert "sim-spark-1/main  profile qwen36-fp8  release r-1  http://10.77.1.2:8000: " \
           "healthy" in text
    assert "sim-spark-2/main  profile qwen36-fp8  release r-2: UNHEALTHY [kv_cache_oom]" in text
    assert "  FAILED boot outcome: expected ready, observed failed: kv_cache_oom" in text
    assert f"      {OOM_LINE}" in text
    assert "… 3 more (see --json)" in text  # 11 proving lines, 8 shown
    assert "sim-5090/main: unreachable: cannot reach 10.77.1.4:22 (timed out)\n" in text
    assert "UNHEALTHY" not in text.split("sim-5090/main")[1]
    assert "error: sim-5090" not in text  # the reason is said once, in the title
    assert text.rstrip().endswith("1 of 3 deployment(s) healthy")


def test_json_has_every_row_and_evidence() -> None:
    data = json.loads(json.dumps(fleet_json([HEALTHY, FAILED, UNREACHABLE])))
    assert data["ok"] is False
    healthy, failed, unreachable = data["deployments"]
    assert healthy["ok"] and healthy["facts"] == {"kv_cache_tokens": 360448}
    assert [c["verdict"] for c in healthy["checks"]] == ["pass", "pass", "info"]
    assert failed["failure_class"] == "kv_cache_oom"
    assert len(failed["checks"][1]["evidence"]) == 11
    assert unreachable == {"node": "sim-5090", "deployment": "main", "ok": False,
                           "state": "unreachable", "boot_phase": None, "profile": None,
                           "release_id": None, "url": None,
                           "failure_class": None, "facts": {},
                           "error": "sim-5090: cannot reach 10.77.1.4:22 (timed out)",
                           "checks": []}


def test_long_cells_are_cut() -> None:
    row = CheckRow("x", "-", "y" * 200, "info")
    line = table_lines([row])[1]
    assert "…" in line and len(line) < 100


BOOTING = DeploymentHealth(
    "sim-spark-1", "hc", (CheckRow("boot outcome", "ready",
                                   "booting: starting the API server (1 s of the 900 s "
                                   "deadline)", "info"),),
    profile="qwen36-w8a16-1m", release_id="r-3", boot_phase="starting the API server")


def test_a_boot_in_progress_is_neither_healthy_nor_failed() -> None:
    assert (BOOTING.ok, BOOTING.booting, BOOTING.failed, BOOTING.state) == \
        (False, True, False, "booting")
    text = render_text([HEALTHY, BOOTING])
    assert "sim-spark-1/hc  profile qwen36-w8a16-1m  release r-3: booting (starting the " \
           "API server)" in text
    assert "FAILED" not in text
    assert text.rstrip().endswith("1 of 2 deployment(s) healthy, 1 still booting")
    data = fleet_json([BOOTING])
    assert data["ok"] is False
    assert data["deployments"][0]["state"] == "booting"
    assert data["deployments"][0]["boot_phase"] == "starting the API server"
    # A failed row wins over the boot in progress.
    failed = DeploymentHealth("n", "d", (CheckRow("engine restarts", "0", "1", "fail"),),
                              boot_phase="profiling")
    assert failed.state == "unhealthy" and not failed.booting



def test_only_failed_rows_fail() -> None:
    warned = (CheckRow("KV baselines file", "readable", "not JSON", "warn"),
              CheckRow("KV cache usage", "-", "0.0%", "info"))
    assert rows_pass(warned) and rows_pass(()) and rows_pass(HEALTHY.rows)
    assert failed_rows(FAILED.rows) == list(FAILED.rows) and not rows_pass(FAILED.rows)
    assert FAILED.failures == failed_rows(FAILED.rows) and not FAILED.ok

"""A measured tune takes its deployment out of the real HAProxy's rotation for the whole
search and puts it back only when the node ends on a gated profile."""

from __future__ import annotations

from pathlib import Path

import pytest
from live_gateway import (
    SPARK1,
    engines,
    follow_in,
    free_port,
    loopback_project,
    pair_project,
    rotation,
    running_gateway,
)

from servefleet.adapters.gateway.follow import OutageRefused
from servefleet.adapters.gateway.runtime_api import RuntimeApi, local_connect
from servefleet.adapters.tune import TuneOutcome, drained_search
from servefleet.core.tune.search import Trial


def _outcome(serving: str | None) -> TuneOutcome:
    return TuneOutcome("qwen36-fp8", Trial((), "measured"), serving=serving)


def test_the_search_runs_drained_and_the_gated_node_is_readmitted_after(
        haproxy: str, tmp_path: Path) -> None:
    with engines(2) as (e1, e2):
        project = pair_project(e1, e2)
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            api = RuntimeApi(local_connect("127.0.0.1", gw.admin_port))
            follow = follow_in(project, api)
            seen: dict[str, object] = {}

            def search() -> TuneOutcome:
                seen["rotation"] = rotation(api)["dgx-spark-1.main"]
                seen["ports"] = {gw.post("/v1/completions", {"model": "qwen36", "prompt": "x"})
                                 [1]["port"] for _ in range(6)}
                return _outcome("qwen36-fp8")

            said: list[str] = []
            drained_search(follow, "dgx-spark-1", "main", said.append, search)
            # Every user request during the search went to the other engine.
            assert seen == {"rotation": "out", "ports": {e2.port}}
            assert rotation(api) == {"dgx-spark-1.main": "serving",
                                      "dgx-spark-2.main": "serving"}
            assert said[-1] == "serving in the gateway again"


@pytest.mark.parametrize("ends", ["ungated", "interrupted"])
def test_a_search_that_leaves_no_gated_profile_leaves_the_node_out_of_rotation(
        haproxy: str, tmp_path: Path, ends: str) -> None:
    with engines(2) as (e1, e2):
        project = pair_project(e1, e2)
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            api = RuntimeApi(local_connect("127.0.0.1", gw.admin_port))
            follow = follow_in(project, api)

            def search() -> TuneOutcome:
                if ends == "interrupted":
                    raise KeyboardInterrupt
                return _outcome(None)  # putting the control back failed

            said: list[str] = []
            if ends == "interrupted":
                with pytest.raises(KeyboardInterrupt):
                    drained_search(follow, "dgx-spark-1", "main", said.append, search)
            else:
                drained_search(follow, "dgx-spark-1", "main", said.append, search)
            assert rotation(api)["dgx-spark-1.main"] == "out"
            assert said[-1] == ("gateway: dgx-spark-1/main stays out of rotation; a rollout "
                                "of it that passes its gate (`servefleet deploy dgx-spark-1`) "
                                "re-admits it")


def test_the_last_engine_of_a_route_is_refused_before_the_search_starts(
        haproxy: str, tmp_path: Path) -> None:
    with engines(1) as (e1,):
        project = loopback_project({SPARK1: e1.port}, {
            "node": "rtx5090", "port": free_port(), "adminPort": free_port()})
        with running_gateway(haproxy, project, tmp_path / "gw") as gw:
            api = RuntimeApi(local_connect("127.0.0.1", gw.admin_port))
            follow = follow_in(project, api)
            started: list[bool] = []
            with pytest.raises(OutageRefused, match="last engine serving route"):
                drained_search(follow, "dgx-spark-1", "main", lambda line: None,
                               lambda: started.append(True) or _outcome("p"))
            assert not started and rotation(api)["dgx-spark-1.main"] == "serving"


def test_without_a_gateway_the_search_just_runs() -> None:
    assert drained_search(None, "n", "d", lambda line: None,
                          lambda: _outcome("p")).serving == "p"

"""What ``servefleet bench`` prints of each finished seed."""

from __future__ import annotations

from servefleet.cli.bench import _rerun_note
from tests.core.bench.test_compare import rec


def test_a_seed_that_ran_again_says_why() -> None:
    lost = {"failed": 1, "error": "aiohttp.client_exceptions.ServerDisconnectedError: "
                                  "Server disconnected"}
    note = _rerun_note(rec("A", 42, 395.1, 22.7, reruns=[lost]))
    assert note == (" (ran 2 times: 1 request(s) of the earlier run(s) found their "
                    "connection closed by the engine before it answered)")
    assert _rerun_note(rec("A", 42, 395.1, 22.7)) == ""

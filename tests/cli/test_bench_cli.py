"""What ``servefleet bench`` prints of each finished seed, and of a seed that ran again
after requests lost to a connection the engine closed (``figures["reruns"]``, written by
the load program): its progress line and the table at the end both say so, with the
recorded error, and ``--json`` keeps the record's ``reruns``."""

from __future__ import annotations

import json

import pytest

from servefleet.cli.bench import _rerun_note, print_summaries
from servefleet.core.bench.record import parse_records
from servefleet.core.bench.summary import summarise
from tests.core.bench.test_compare import rec

LOST = {"failed": 1, "error": "aiohttp.client_exceptions.ServerDisconnectedError: "
                              "Server disconnected"}


def test_a_seed_that_ran_again_says_why() -> None:
    note = _rerun_note(rec("A", 42, 395.1, 22.7, reruns=[LOST]))
    assert note == (" (ran 2 times: 1 request(s) of the earlier run(s) found their "
                    "connection closed by the engine before it answered: "
                    "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected)")
    assert _rerun_note(rec("A", 42, 395.1, 22.7)) == ""
    twice = _rerun_note(rec("A", 42, 395.1, 22.7, reruns=[LOST, {**LOST, "failed": 2}]))
    assert twice.startswith(" (ran 3 times: 3 request(s) ")
    assert twice.count("Server disconnected") == 1  # the same error, said once


def test_the_table_at_the_end_names_the_seed_that_ran_again(
        capsys: pytest.CaptureFixture[str]) -> None:
    records = [rec("A", 42, 395.1, 22.7, reruns=[LOST]), rec("A", 123, 401.0, 21.9),
               rec("C", 42, 900.0, 40.0)]
    print_summaries(summarise(records), "n/main: release r", records)
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "ran 2 times" in line]
    # Exactly the seed that ran again, once, with the error it recorded; the summary's
    # failed column is the last run's (0), so without this line nothing would show it.
    assert len(said) == 1 and said[0].startswith("A seed 42: (ran 2 times: 1 request(s)")
    assert "ServerDisconnectedError" in said[0]
    assert "seed 123" not in out and "C seed" not in out


def test_the_record_keeps_its_reruns_through_its_line() -> None:
    record = rec("A", 42, 395.1, 22.7, reruns=[LOST])
    [back], skipped = parse_records([record.to_line()])
    assert skipped == 0 and back.figures["reruns"] == [LOST]
    assert json.loads(record.to_line())["figures"]["reruns"] == [LOST]  # what --json prints

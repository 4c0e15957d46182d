"""The load generator against a loopback fault server that answers, errs, cuts bodies,
resets, closes, stalls and sends junk on a fixed schedule: every request ends in exactly
one class, and the counts per class are the schedule's. Refusals come from a port nobody
listens on. A worker that dies is said at stop, never lost."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from servefleet.adapters.gateway.follow import GatewayEvent
from servefleet.sim import gateway_load
from servefleet.sim.gateway_load import (
    ENGINE_HEADER,
    DrainWindow,
    GatewayLoad,
    LoadBroken,
    Outcome,
    drain_windows,
    phases,
    summary,
)

TIMEOUT = 0.5
OK_BODY = b'{"choices": [{"message": {"content": "hi"}}]}'


def _read_request(conn: socket.socket) -> None:
    """Read one request, headers and ``content-length`` body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


def _answer(conn: socket.socket, status: str, body: bytes, length: int | None = None) -> None:
    conn.sendall(f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
                 f"{ENGINE_HEADER}: fault-engine\r\n"
                 f"content-length: {len(body) if length is None else length}\r\n"
                 "connection: close\r\n\r\n".encode() + body)


def behave(kind: str, conn: socket.socket) -> None:
    """One connection's fault."""
    _read_request(conn)
    if kind == "ok":
        _answer(conn, "200 OK", OK_BODY)
    elif kind == "http_503":
        _answer(conn, "503 Service Unavailable", b'{"error": "drained"}')
    elif kind == "cut":
        _answer(conn, "200 OK", OK_BODY[:12], length=len(OK_BODY))
    elif kind == "reset":
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif kind == "close":
        pass  # an orderly close before any status line
    elif kind == "stall":
        time.sleep(TIMEOUT * 3)
    elif kind == "junk":
        conn.sendall(b"garbage that is no status line\r\n\r\n")
    elif kind == "no_choices":
        _answer(conn, "200 OK", b'{"object": "error"}')
    else:
        raise AssertionError(kind)


@dataclass
class FaultServer:
    """Connection ``i`` gets ``schedule[i % len(schedule)]``."""

    schedule: list[str]
    sock: socket.socket = field(default_factory=socket.socket)
    accepted: int = 0
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1/chat/completions"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            kind = self.schedule[self.accepted % len(self.schedule)]
            self.accepted += 1
            thread = threading.Thread(target=self._one, args=(kind, conn), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _one(self, kind: str, conn: socket.socket) -> None:
        with conn:
            behave(kind, conn)


@pytest.fixture
def fault_server(request: pytest.FixtureRequest) -> Iterator[FaultServer]:
    server = FaultServer(list(request.param))
    server.sock.bind(("127.0.0.1", 0))
    server.sock.listen(64)
    threading.Thread(target=server._serve, daemon=True).start()
    yield server
    server.sock.close()


SCHEDULE = ["ok", "http_503", "cut", "reset", "close", "stall", "junk", "no_choices"]


@pytest.mark.parametrize("fault_server", [SCHEDULE], indirect=True)
def test_every_fault_is_counted_in_its_own_class(fault_server: FaultServer) -> None:
    rounds = 4
    load = GatewayLoad(fault_server.url, {"model": "m"}, workers=3, timeout=TIMEOUT,
                       max_requests=rounds * len(SCHEDULE)).start()
    outcomes = load.wait(timeout=60)
    seen = summary(outcomes)
    assert fault_server.accepted == load.sent == len(outcomes) == rounds * len(SCHEDULE)
    assert seen["failed"] == rounds * (len(SCHEDULE) - 1)
    assert seen["by_class"] == {"http_error": rounds, "refused": 0, "reset": 2 * rounds,
                                "cut_body": rounds, "timeout": rounds,
                                "other": 2 * rounds}, seen
    ok = [o for o in outcomes if o.ok]
    assert len(ok) == rounds and {o.engine for o in ok} == {"fault-engine"}
    # A request that never got a status line was answered by no engine.
    assert all(o.engine is None for o in outcomes if o.kind in ("reset", "timeout"))
    # A stalled request is given up at the timeout, not before.
    stalled = [o for o in outcomes if o.kind == "timeout"]
    assert all(TIMEOUT * 0.9 <= o.seconds < TIMEOUT * 3 for o in stalled), stalled


def test_a_port_nobody_listens_on_is_counted_as_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    load = GatewayLoad(f"http://127.0.0.1:{port}/v1/chat/completions", {}, workers=2,
                       timeout=TIMEOUT, max_requests=10, engine="never").start()
    seen = summary(load.wait(timeout=30))
    assert seen["requests"] == 10 and seen["by_class"]["refused"] == 10, seen
    assert seen["engines"] == {"-": 10}


@pytest.mark.parametrize("fault_server", [["ok"]], indirect=True)
def test_the_load_s_own_engine_names_direct_answers(fault_server: FaultServer) -> None:
    load = GatewayLoad(fault_server.url, {}, workers=1, timeout=TIMEOUT, max_requests=3,
                       engine="sim-spark-1.gw").start()
    outcomes = load.wait(timeout=30)
    # The header wins over the load's own name: it says which server answered.
    assert {o.engine for o in outcomes} == {"fault-engine"}


@pytest.mark.parametrize("fault_server", [["ok"]], indirect=True)
def test_a_worker_that_dies_is_said_at_stop(fault_server: FaultServer,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = GatewayLoad._one

    def dies_on_the_third(self: GatewayLoad) -> gateway_load.Outcome:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("worker bug")
        return real(self)

    monkeypatch.setattr(GatewayLoad, "_one", dies_on_the_third)
    load = GatewayLoad(fault_server.url, {}, workers=2, timeout=TIMEOUT,
                       max_requests=10).start()
    with pytest.raises(LoadBroken, match="RuntimeError: worker bug"):
        load.wait(timeout=30)
    assert load.sent == len(load.outcomes) + 1  # the lost request is counted as sent


@pytest.mark.parametrize("fault_server", [["stall"]], indirect=True)
def test_a_worker_still_running_at_stop_is_said(fault_server: FaultServer) -> None:
    load = GatewayLoad(fault_server.url, {}, workers=1, timeout=30).start()
    time.sleep(0.2)
    load.timeout = 0.1  # stop waits this long (+5 s) for the stalled request
    load._stop.set()
    load._threads[0].join(0.1)
    with pytest.raises(LoadBroken, match="still running: load-0"):
        load.check()


def test_within_keeps_only_requests_answered_inside_the_window() -> None:
    load = GatewayLoad("http://127.0.0.1:9/", {})
    mk = gateway_load.Outcome
    load.outcomes = [mk(1.0, 2.0, "ok", "a", ""), mk(1.5, 3.5, "ok", "a", ""),
                     mk(0.5, 1.5, "ok", "a", ""), mk(2.0, 2.5, "reset", None, "")]
    assert [o.started for o in load.within(1.0, 3.0)] == [1.0, 2.0]
    assert [o.started for o in load.between(1.0, 3.0)] == [1.0, 1.5, 2.0]


def test_drain_windows_pair_each_drain_with_its_readmission() -> None:
    events = [GatewayEvent("drained", "r0", "a.gw", 1.0),
              GatewayEvent("drained", "r1", "a.gw", 1.1),
              GatewayEvent("admitting", "r0", "a.gw", 5.0),
              GatewayEvent("admitting", "r1", "a.gw", 5.1),
              GatewayEvent("drained", "r1", "b.gw", 6.0)]
    assert drain_windows(events) == [DrainWindow("a.gw", 1.0, 5.0, "r0"),
                                     DrainWindow("a.gw", 1.1, 5.1, "r1"),
                                     DrainWindow("b.gw", 6.0, float("inf"), "r1")]
    parts = phases(events, 0.0, 8.0)
    assert [(name, a, b) for name, a, b in parts] == [
        ("all in rotation", 0.0, 1.0), ("a.gw drained", 1.0, 1.1), ("a.gw drained", 1.1, 5.0),
        ("a.gw drained", 5.0, 5.1), ("all in rotation", 5.1, 6.0), ("b.gw drained", 6.0, 8.0)]


def test_a_drained_window_counts_only_its_own_routes_requests() -> None:
    """An engine in two routes is drained from one, then the other: a request the second
    route still sent it in between is no leak of the first route's drain (the real run:
    sim-spark-2 drained 0.6 s apart in its two routes, one request answered in between),
    while one the drained route sent it is."""
    events = [GatewayEvent("drained", "long", "b.gw", 1.0),
              GatewayEvent("drained", "any", "b.gw", 1.6),
              GatewayEvent("admitting", "long", "b.gw", 9.0),
              GatewayEvent("admitting", "any", "b.gw", 9.1)]
    long_window, any_window = drain_windows(events)
    through_any = Outcome(1.2, 1.3, "ok", "b.gw", "200", "any")
    assert long_window.leaked([through_any]) == []
    assert any_window.leaked([through_any]) == []  # sent before that route's drain
    through_long = Outcome(2.0, 2.1, "ok", "b.gw", "200", "long")
    assert long_window.leaked([through_long]) == [through_long]
    late_any = Outcome(2.0, 2.1, "ok", "b.gw", "200", "any")
    assert any_window.leaked([late_any]) == [late_any]
    # Without the route header every request counts against every window (as before).
    unnamed = Outcome(1.2, 1.3, "ok", "b.gw", "200")
    assert long_window.leaked([unnamed]) == [unnamed]

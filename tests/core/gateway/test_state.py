# ruff: noqa: E501
"""HAProxy's runtime answers read back: ``show servers state`` and ``show stat`` as
Debian's HAProxy 2.6.12 wrote them (a server drained by hand, one up, one down)."""

from __future__ import annotations

from servefleet.core.gateway.state import parse_servers_state, parse_stat, server_states

SERVERS_STATE = """1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 b1 1 s1 127.0.0.1 2 8 1 1 0 6 3 4 6 0 0 0 - 18091 - 0 0 - - 0
4 long 1 s2 127.0.0.1 2 0 1 1 1 6 3 4 6 0 0 0 - 18092 - 0 0 - - 0
4 long 2 s3 127.0.0.1 0 1 1 1 1 6 3 4 6 0 0 0 - 18093 - 0 0 - - 0

"""
STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight
fleet,FRONTEND,,,0,1,262,1,,,,,,,,,,OPEN,
b1,s1,0,0,2,2,,5,,,,,,,,,,DRAIN,1
b1,BACKEND,0,0,2,2,,5,,,,,,,,,,UP,0
long,s2,0,0,0,0,,0,,,,,,,,,,UP,1
long,s3,0,0,0,0,,0,,,,,,,,,,MAINT,1
"""


def test_admin_states_come_from_the_bits() -> None:
    assert parse_servers_state(SERVERS_STATE) == {
        ("b1", "s1"): "drain", ("long", "s2"): "ready", ("long", "s3"): "maint"}


def test_stat_keeps_servers_only() -> None:
    assert parse_stat(STAT) == {("b1", "s1"): ("DRAIN", 2), ("long", "s2"): ("UP", 0),
                                ("long", "s3"): ("MAINT", 0)}
    assert parse_stat("") == {} and parse_stat("Unknown command.\n") == {}


def test_rotation_says_serving_draining_or_out() -> None:
    states = {s.server: s for s in server_states(SERVERS_STATE, STAT)}
    assert states["s1"].rotation == "draining" and states["s1"].up
    assert states["s2"].rotation == "serving"
    assert states["s3"].rotation == "out" and not states["s3"].up

"""RESP3 on the RESP door: the encoders, and Redis 6's HELLO handshake over a real DisqueCore.

Expected replies are written out byte for byte (RESP3's types are what is under test, so they
are not built with the encoders being checked). A connection that never sent ``HELLO 3`` must
get exactly the RESP2 bytes it always got.
"""

from __future__ import annotations

import itertools
import math

import pytest
from test_disque_commands import FakeNode, add, cmd, make_door, route

from disq.doors.resp_door import RespDoor
from disq.protocol import resp

HELLO3 = (
    b"%7\r\n"
    b"$6\r\nserver\r\n$6\r\ndisque\r\n"
    b"$7\r\nversion\r\n$7\r\n1.0-rc1\r\n"
    b"$5\r\nproto\r\n:3\r\n"
    b"$2\r\nid\r\n:0\r\n"
    b"$4\r\nmode\r\n$10\r\nstandalone\r\n"
    b"$4\r\nrole\r\n$6\r\nmaster\r\n"
    b"$7\r\nmodules\r\n*0\r\n"
)
HELLO2 = (
    b"*14\r\n"
    b"$6\r\nserver\r\n$6\r\ndisque\r\n"
    b"$7\r\nversion\r\n$7\r\n1.0-rc1\r\n"
    b"$5\r\nproto\r\n:2\r\n"
    b"$2\r\nid\r\n:0\r\n"
    b"$4\r\nmode\r\n$10\r\nstandalone\r\n"
    b"$4\r\nrole\r\n$6\r\nmaster\r\n"
    b"$7\r\nmodules\r\n*0\r\n"
)
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def door(node: FakeNode) -> RespDoor:
    return make_door(node, itertools.count(1))


def resp3_door(node: FakeNode) -> RespDoor:
    d = make_door(node, itertools.count(1))
    assert d.feed(cmd("HELLO", 3)) == HELLO3
    return d


# ------------------------------------------------------------------ encoders
def test_null_and_map_header() -> None:
    assert resp.NULL == b"_\r\n"
    assert resp.map_header(0) == b"%0\r\n"
    assert resp.map_header(12) == b"%12\r\n"


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (1.5, b",1.5\r\n"),
        (-2.0, b",-2.0\r\n"),
        (0.1, b",0.1\r\n"),
        (1e300, b",1e+300\r\n"),
        (math.inf, b",inf\r\n"),
        (-math.inf, b",-inf\r\n"),
        (math.nan, b",nan\r\n"),
    ],
)
def test_double(value: float, wire: bytes) -> None:
    assert resp.double(value) == wire


def test_double_round_trips() -> None:
    for x in (1 / 3, 2.5e-308, 123456789.123456789, -0.0):
        assert float(resp.double(x)[1:-2]) == x


def test_verbatim() -> None:
    assert resp.verbatim(b"a:1\r\n") == b"=9\r\ntxt:a:1\r\n\r\n"
    assert resp.verbatim(b"", b"mkd") == b"=4\r\nmkd:\r\n"
    with pytest.raises(ValueError):
        resp.verbatim(b"x", b"text")


def test_encode3_types() -> None:
    assert resp.encode3(None) == b"_\r\n"
    assert resp.encode3(True) == b"#t\r\n"
    assert resp.encode3(False) == b"#f\r\n"
    assert resp.encode3(7) == b":7\r\n"
    assert resp.encode3(2.5) == b",2.5\r\n"
    assert resp.encode3(b"ab") == b"$2\r\nab\r\n"
    assert resp.encode3("\u00e9") == b"$2\r\n\xc3\xa9\r\n"
    assert resp.encode3(resp.SimpleString("OK")) == b"+OK\r\n"
    assert resp.encode3([]) == b"*0\r\n"
    assert resp.encode3({}) == b"%0\r\n"


def test_encode3_nests_maps_arrays_and_nulls_in_order() -> None:
    value = {b"k": [1, None, {"x": 0.5}], "z": None}
    assert resp.encode3(value) == (
        b"%2\r\n$1\r\nk\r\n*3\r\n:1\r\n_\r\n%1\r\n$1\r\nx\r\n,0.5\r\n$1\r\nz\r\n_\r\n"
    )


def test_encode3_refuses_what_has_no_resp3_type() -> None:
    with pytest.raises(TypeError):
        resp.encode3(object())  # type: ignore[arg-type]


def test_string2ll_is_redis_7_strict() -> None:
    assert resp.string2ll(b"3") == 3
    assert resp.string2ll(b"+3") is None
    assert resp.string2ll(b"03") is None
    assert resp.string2ll(b"") is None


# ------------------------------------------------------------------ HELLO
def test_hello_3_replies_a_map_and_switches(door: RespDoor) -> None:
    assert door.feed(cmd("HELLO", 3)) == HELLO3
    assert door.client.protocol == 3


def test_hello_2_replies_the_flat_array(door: RespDoor) -> None:
    assert door.feed(cmd("HELLO", 2)) == HELLO2
    assert door.client.protocol == 2


def test_hello_2_switches_back_in_resp2(node: FakeNode) -> None:
    d = resp3_door(node)
    assert d.feed(cmd("HELLO", 2)) == HELLO2
    assert d.feed(cmd("GETJOB", "NOHANG", "FROM", "q")) == b"*-1\r\n"


def test_hello_is_inline_too(door: RespDoor) -> None:
    assert door.feed(b"hello 3\r\n") == HELLO3


def test_disque_hello_without_arguments_is_unchanged_in_resp3(node: FakeNode) -> None:
    plain = make_door(node, itertools.count(1)).feed(cmd("HELLO"))
    assert plain.startswith(b"*3\r\n:1\r\n")
    assert resp3_door(node).feed(cmd("HELLO")) == plain


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((1,), b"-NOPROTO unsupported protocol version\r\n"),
        ((4,), b"-NOPROTO unsupported protocol version\r\n"),
        ((-3,), b"-NOPROTO unsupported protocol version\r\n"),
        (("x",), b"-ERR Protocol version is not an integer or out of range\r\n"),
        (("+3",), b"-ERR Protocol version is not an integer or out of range\r\n"),
        ((3, "AUTH", "default"), b"-ERR Syntax error in HELLO option 'AUTH'\r\n"),
        ((3, "SETNAME"), b"-ERR Syntax error in HELLO option 'SETNAME'\r\n"),
        ((3, "nope", "x"), b"-ERR Syntax error in HELLO option 'nope'\r\n"),
        ((3, "AUTH", "bob", "pw"), WRONGPASS),
        (
            (3, "SETNAME", "a b"),
            b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
        ),
    ],
)
def test_hello_errors_leave_the_protocol(
    door: RespDoor, args: tuple[str | int, ...], error: bytes
) -> None:
    assert door.feed(cmd("HELLO", *args)) == error
    assert door.client.protocol == 2
    assert door.feed(cmd("CLIENT", "GETNAME")) == b"$-1\r\n"


def test_hello_setname(door: RespDoor) -> None:
    assert door.feed(cmd("HELLO", 3, "SETNAME", "worker-1")) == HELLO3
    assert door.feed(cmd("CLIENT", "GETNAME")) == b"$8\r\nworker-1\r\n"


def test_hello_auth_without_a_password_takes_default_with_any(door: RespDoor) -> None:
    assert door.feed(cmd("HELLO", 3, "AUTH", "default", "whatever")) == HELLO3


def test_hello_auth_honours_requirepass(node: FakeNode) -> None:
    node.requirepass = "s3cret"
    d = make_door(node, itertools.count(1))
    assert d.feed(cmd("QLEN", "q")) == b"-NOAUTH Authentication required.\r\n"
    assert d.feed(cmd("HELLO", 3)) == (
        b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the "
        b"HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
        b"select the RESP protocol version at the same time\r\n"
    )
    assert d.feed(cmd("HELLO", 3, "AUTH", "default", "wrong")) == WRONGPASS
    assert d.feed(cmd("HELLO", 3, "AUTH", "root", "s3cret")) == WRONGPASS
    assert d.client.protocol == 2
    assert d.feed(cmd("QLEN", "q")) == b"-NOAUTH Authentication required.\r\n"
    assert d.feed(cmd("HELLO", 3, "AUTH", "default", "s3cret", "SETNAME", "n")) == HELLO3
    assert d.feed(cmd("QLEN", "q")) == b":0\r\n"
    assert d.feed(cmd("CLIENT", "GETNAME")) == b"$1\r\nn\r\n"
    # Authenticated now, so HELLO without AUTH goes through the table as any command.
    assert d.feed(cmd("HELLO", 2)) == HELLO2


# ------------------------------------------------------------------ replies in RESP3
def test_show_is_a_map_with_null_values(node: FakeNode) -> None:
    d = resp3_door(node)
    job_id = add(d, "q", b"body", "RETRY", 0)  # no requeue: next-requeue-within is null
    two = make_door(node, itertools.count(100)).feed(cmd("SHOW", job_id))
    got = d.feed(cmd("SHOW", job_id))
    # Same pairs, same order; the map header is half the array's, and the nulls are "_".
    assert two.startswith(b"*30\r\n") and got.startswith(b"%15\r\n")
    assert got[5:] == two[5:].replace(b"$-1\r\n", b"_\r\n")
    assert b"$19\r\nnext-requeue-within\r\n_\r\n" in got
    assert got.endswith(b"$4\r\nbody\r\n$4\r\nbody\r\n")


def test_show_of_an_unknown_job_is_null(node: FakeNode) -> None:
    d = resp3_door(node)
    unknown = b"D-a1b2c3d4-" + b"A" * 24 + b"-0000"
    assert d.feed(cmd("SHOW", unknown)) == b"_\r\n"
    assert make_door(node, itertools.count(9)).feed(cmd("SHOW", unknown)) == b"$-1\r\n"


def test_qstat_is_a_map(node: FakeNode) -> None:
    d = resp3_door(node)
    add(d, "q")
    assert d.feed(cmd("QSTAT", "q")) == (
        b"%13\r\n"
        b"$4\r\nname\r\n$1\r\nq\r\n"
        b"$3\r\nlen\r\n:1\r\n"
        b"$3\r\nage\r\n:0\r\n"
        b"$4\r\nidle\r\n:0\r\n"
        b"$7\r\nblocked\r\n:0\r\n"
        b"$11\r\nimport-from\r\n*0\r\n"
        b"$11\r\nimport-rate\r\n:0\r\n"
        b"$7\r\njobs-in\r\n:1\r\n"
        b"$8\r\njobs-out\r\n:0\r\n"
        b"$5\r\npause\r\n$4\r\nnone\r\n"
        b"$4\r\njobs\r\n:1\r\n"
        b"$6\r\nactive\r\n:0\r\n"
        b"$7\r\ndelayed\r\n:0\r\n"
    )
    assert d.feed(cmd("QSTAT", "nope")) == b"_\r\n"


def test_getjob_nulls_and_jobs(node: FakeNode) -> None:
    d = resp3_door(node)
    assert d.feed(cmd("GETJOB", "NOHANG", "FROM", "q")) == b"_\r\n"
    job_id = add(d, "q", b"x")
    # Jobs stay arrays: RESP3 changes only the null.
    assert d.feed(cmd("GETJOB", "FROM", "q")) == (
        b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$1\r\nx\r\n"
    )
    assert d.feed(cmd("ACKJOB", job_id)) == b":1\r\n"


def test_blocked_getjob_times_out_with_null(node: FakeNode) -> None:
    d = resp3_door(node)
    assert d.feed(cmd("GETJOB", "TIMEOUT", 100, "WITHCOUNTERS", "FROM", "q")) == b""
    node.clock += 200
    node.disque.tick(node.clock)
    assert route(node, d) == {0: b"_\r\n"}


def test_jscan_reply_all_gives_maps(node: FakeNode) -> None:
    d = resp3_door(node)
    job_id = add(d, "q")
    got = d.feed(cmd("JSCAN", "REPLY", "all"))
    assert got.startswith(b"*2\r\n$1\r\n0\r\n*1\r\n%15\r\n$2\r\nid\r\n$40\r\n" + job_id)


def test_cluster_info_and_nodes_are_verbatim(node: FakeNode) -> None:
    d = resp3_door(node)
    text = b"cluster_state:ok\r\ncluster_known_nodes:1\r\n"
    assert d.feed(cmd("CLUSTER", "INFO")) == b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text)
    assert d.feed(cmd("CLUSTER", "NODES")).startswith(b"=")


def test_whole_null_replies_of_other_commands_are_resp3_nulls(node: FakeNode) -> None:
    d = resp3_door(node)
    assert d.feed(cmd("CLIENT", "GETNAME")) == b"_\r\n"


def test_resp2_replies_are_unchanged(node: FakeNode) -> None:
    """Byte for byte what a RESP2 client got before RESP3 existed, null values included."""
    d = make_door(node, itertools.count(1))
    assert d.feed(cmd("QSTAT", "nope")) == b"*-1\r\n"
    assert d.feed(cmd("GETJOB", "NOHANG", "FROM", "q")) == b"*-1\r\n"
    assert (
        d.feed(cmd("CLUSTER", "INFO"))
        == b"$41\r\ncluster_state:ok\r\ncluster_known_nodes:1\r\n\r\n"
    )
    assert d.feed(cmd("CLIENT", "GETNAME")) == b"$-1\r\n"
    job_id = add(d, "q", b"b", "RETRY", 0)
    show = d.feed(cmd("SHOW", job_id))
    assert show.startswith(b"*30\r\n")
    assert b"$19\r\nnext-requeue-within\r\n$-1\r\n" in show


def test_config_get_is_a_map_in_resp3(node: FakeNode) -> None:
    d = resp3_door(node)
    assert d.feed(cmd("CONFIG", "GET", "*")) == (
        b"%2\r\n$9\r\nmaxmemory\r\n$10\r\n1073741824\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    )
    assert d.feed(cmd("CONFIG", "GET", "maxmemory")) == (
        b"%1\r\n$9\r\nmaxmemory\r\n$10\r\n1073741824\r\n"
    )
    assert d.feed(cmd("CONFIG", "GET", "none*")) == b"%0\r\n"


def test_config_get_stays_the_flat_array_in_resp2(node: FakeNode) -> None:
    d = make_door(node, itertools.count(1))
    assert d.feed(cmd("CONFIG", "GET", "*")) == (
        b"*4\r\n$9\r\nmaxmemory\r\n$10\r\n1073741824\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    )
    assert d.feed(cmd("CONFIG", "GET", "none*")) == b"*0\r\n"
    # HELLO 2 after HELLO 3 gives the array back
    d3 = resp3_door(node)
    assert d3.feed(cmd("HELLO", 2)) == HELLO2
    assert d3.feed(cmd("CONFIG", "GET", "none*")) == b"*0\r\n"


def test_info_is_verbatim_in_resp3_and_bulk_in_resp2(node: FakeNode) -> None:
    text = b"# CPU\r\nused_cpu_sys:0.50\r\n"
    assert make_door(node, itertools.count(1)).feed(cmd("INFO", "cpu")) == (
        b"$%d\r\n%s\r\n" % (len(text), text)
    )
    d = resp3_door(node)
    assert d.feed(cmd("INFO", "cpu")) == b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text)
    assert d.feed(cmd("INFO", "nosuch")) == b"=4\r\ntxt:\r\n"
    assert d.feed(cmd("INFO", "a", "b")) == b"-ERR syntax error\r\n"

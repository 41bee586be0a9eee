"""The pure parts of CLIENT, MONITOR, SLOWLOG and LATENCY (disq.doors.disque.admin), and
their wiring through the sans-IO door with a fake node and a settable clock."""

from __future__ import annotations

import itertools
import re

import pytest

from disq.doors.disque import RespStats
from disq.doors.disque.admin import (
    AdminState,
    KillFilter,
    LatencyMonitor,
    SlowLog,
    kill_matches,
    parse_kill,
    redact,
    repr_arg,
    slowlog_argv,
)
from disq.doors.disque.client import Client
from disq.doors.resp_door import RespDoor
from disq.protocol import resp


class FakeNode:
    """Just what execute() and the door read for server commands."""

    requirepass: str | None = None
    aof_error: str | None = None

    def __init__(self) -> None:
        self.resp_stats = RespStats()
        self.clock = 1_000_000
        self.config: dict[str, str] = {}

    def now_ms(self) -> int:
        return self.clock

    def config_get(self, pattern: str) -> list[tuple[str, str]]:
        return [(pattern, self.config[pattern])] if pattern in self.config else []


def cmd(*args: str | bytes) -> bytes:
    return resp.encode([a if isinstance(a, bytes) else a.encode() for a in args])


def make_doors(n: int, node: FakeNode | None = None) -> tuple[FakeNode, AdminState, list[RespDoor]]:
    node = node or FakeNode()
    admin = AdminState()
    tokens = itertools.count(1)
    doors = []
    for i in range(n):
        d = RespDoor(node, tokens.__next__, admin=admin)  # type: ignore[arg-type]
        admin.register(d.client, node.now_ms())
        d.client.addr = b"127.0.0.1:%d" % (40000 + i)
        doors.append(d)
    return node, admin, doors


# ---------------------------------------------------------------- argument rendering
def test_repr_arg_quotes_and_escapes_like_sdscatrepr() -> None:
    assert repr_arg(b"keys") == b'"keys"'
    assert repr_arg(b"*") == b'"*"'
    assert repr_arg(b'a"b\\c') == b'"a\\"b\\\\c"'
    assert repr_arg(b"\r\n\t\x07\x08") == b'"\\r\\n\\t\\a\\b"'
    assert repr_arg(b"\x00\xff") == b'"\\x00\\xff"'
    assert repr_arg(b"") == b'""'


def test_redact_hides_auth_passwords_only() -> None:
    assert redact([b"AUTH", b"pw"]) == [b"AUTH", b"(redacted)"]
    assert redact([b"HELLO", b"3", b"AUTH", b"u", b"p", b"SETNAME", b"n"]) == [
        b"HELLO", b"3", b"AUTH", b"(redacted)", b"(redacted)", b"SETNAME", b"n"
    ]  # fmt: skip
    argv = [b"PING", b"auth"]
    assert redact(argv) is argv


def test_slowlog_argv_keeps_32_arguments_and_128_bytes_each() -> None:
    argv = [b"QPEEK", *(b"%d" % i for i in range(40))]  # 41 arguments
    out = slowlog_argv(argv)
    assert len(out) == 32
    assert out[:31] == argv[:31]
    assert out[31] == b"... (10 more arguments)"
    exactly = [b"X"] * 32
    assert slowlog_argv(exactly) == exactly
    long = b"a" * 200
    assert slowlog_argv([b"ADDJOB", b"q", long]) == [
        b"ADDJOB",
        b"q",
        b"a" * 128 + b"... (72 more bytes)",
    ]
    assert slowlog_argv([b"x" * 128]) == [b"x" * 128]


# ---------------------------------------------------------------- slow log ring
def test_slowlog_ring_newest_first_trimmed_ids_never_reused() -> None:
    log = SlowLog(max_len=3)
    for i in range(5):
        log.push([b"PING", b"%d" % i], 10 + i, 100 + i, b"a:1", b"")
    assert [e.id for e in log.entries] == [4, 3, 2]
    assert [e.id for e in log.get(2)] == [4, 3]
    assert [e.id for e in log.get(-1)] == [4, 3, 2]
    assert log.get(0) == []
    log.max_len = 1
    log.trim()
    assert [e.id for e in log.entries] == [4]
    log.reset()
    assert not log.entries
    log.push([b"PING"], 1, 1, b"a:1", b"n")
    assert log.entries[0].id == 5


def test_latency_keeps_one_sample_per_second_and_the_max() -> None:
    lat = LatencyMonitor()
    lat.add(b"command", 100, 5)
    lat.add(b"command", 100, 3)  # same second, smaller: kept as 5
    lat.add(b"command", 100, 9)  # same second, larger: replaces
    lat.add(b"command", 101, 2)
    ev = lat.events[b"command"]
    assert list(ev.samples) == [(100, 9), (101, 2)]
    assert ev.max_ms == 9
    for t in range(200):
        lat.add(b"fast-command", 1000 + t, 1)
    assert len(lat.events[b"fast-command"].samples) == 160
    assert lat.reset([b"command", b"nope"]) == 1
    assert lat.reset([]) == 1
    assert lat.events == {}


# ---------------------------------------------------------------- CLIENT KILL filters
def test_parse_kill_old_and_new_forms() -> None:
    assert parse_kill([b"1.2.3.4:5"]) == KillFilter(addr=b"1.2.3.4:5", skipme=False, old_form=True)
    f = parse_kill([b"ID", b"7", b"SKIPME", b"no", b"laddr", b"h:1", b"TYPE", b"normal"])
    assert f == KillFilter(laddr=b"h:1", client_id=7, client_type="normal", skipme=False)
    assert parse_kill([b"ADDR", b"a:1", b"USER", b"default", b"MAXAGE", b"10"]) == KillFilter(
        addr=b"a:1", user=b"default", maxage_s=10
    )
    assert parse_kill([b"TYPE", b"slave"]) == KillFilter(client_type="replica")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([b"ID", b"0"], b"-ERR client-id should be greater than 0\r\n"),
        ([b"ID", b"x"], b"-ERR client-id should be greater than 0\r\n"),
        ([b"TYPE", b"bogus"], b"-ERR Unknown client type 'bogus'\r\n"),
        ([b"USER", b"bob"], b"-ERR No such user 'bob'\r\n"),
        ([b"SKIPME", b"maybe"], b"-ERR syntax error\r\n"),
        ([b"ADDR"], None),  # a single argument is the old form
        ([b"ADDR", b"a", b"ID"], b"-ERR syntax error\r\n"),
        ([b"COLOUR", b"red"], b"-ERR syntax error\r\n"),
    ],
)
def test_parse_kill_errors(args: list[bytes], error: bytes | None) -> None:
    r = parse_kill(args)
    if error is None:
        assert isinstance(r, KillFilter)
    else:
        assert r == error


def test_kill_matches_every_given_criterion() -> None:
    node = FakeNode()
    admin = AdminState()
    me = Client(node, lambda: 1, admin)  # type: ignore[arg-type]
    other = Client(node, lambda: 1, admin)  # type: ignore[arg-type]
    admin.register(me, 0)
    admin.register(other, 0)
    other.addr, other.laddr = b"10.0.0.1:5", b"10.0.0.9:7711"
    assert kill_matches(KillFilter(), other, me, 0)
    assert not kill_matches(KillFilter(), me, me, 0)  # SKIPME yes by default
    assert kill_matches(KillFilter(skipme=False), me, me, 0)
    assert kill_matches(KillFilter(addr=b"10.0.0.1:5"), other, me, 0)
    assert not kill_matches(KillFilter(addr=b"10.0.0.1:6"), other, me, 0)
    assert kill_matches(KillFilter(laddr=b"10.0.0.9:7711", client_id=other.cid), other, me, 0)
    assert not kill_matches(KillFilter(client_id=me.cid), other, me, 0)
    assert not kill_matches(KillFilter(client_type="pubsub"), other, me, 0)
    assert not kill_matches(KillFilter(maxage_s=5), other, me, 4_999)
    assert kill_matches(KillFilter(maxage_s=5), other, me, 5_000)


# ---------------------------------------------------------------- through the door
_LINE = re.compile(rb"^\+\d+\.\d{6} \[0 127\.0\.0\.1:40001\] (.*)\r\n$")


def test_monitor_streams_other_clients_commands_in_redis_format() -> None:
    _node, admin, (mon, cl) = make_doors(2)
    assert mon.feed(cmd("MONITOR")) == b"+OK\r\n"
    assert admin.monitors == {mon.client}
    cl.feed(cmd("PING") + cmd("ECHO", b'a "b"\n') + cmd("CONFIG", "GET", "x") + cmd("NOPE"))
    lines = [_LINE.match(x) for x in mon.client.outbox]
    assert all(lines), mon.client.outbox
    # CONFIG is an admin command and NOPE never ran: neither is shown.
    assert [m.group(1) for m in lines if m] == [b'"PING"', b'"ECHO" "a \\"b\\"\\n"']
    # The monitor's own commands are read and dropped (no reply in the stream); QUIT works.
    assert mon.feed(cmd("PING")) == b""
    assert mon.feed(cmd("MONITOR")) == b""
    assert mon.feed(cmd("QUIT")) == b"+OK\r\n"


def test_monitor_wake_called_once_per_batch() -> None:
    _node, _admin, (mon, cl) = make_doors(2)
    wakes: list[int] = []
    mon.client.wake = lambda: wakes.append(1)
    mon.feed(cmd("MONITOR"))
    cl.feed(cmd("PING") + cmd("PING"))
    assert len(wakes) == 1 and len(mon.client.outbox) == 2


def test_slow_commands_go_to_the_slowlog_and_latency_per_config() -> None:
    node = FakeNode()
    node.config = {"slowlog-log-slower-than": "0", "slowlog-max-len": "2"}
    node, admin, (d,) = make_doors(1, node)
    admin.load_config(node)
    d.client.name = b"w1"
    d.feed(cmd("PING") + cmd("ECHO", "x") + cmd("AUTH", "pw"))
    assert [e.argv for e in admin.slowlog.entries] == [[b"AUTH", b"(redacted)"], [b"ECHO", b"x"]]
    assert admin.slowlog.entries[0].addr == b"127.0.0.1:40000"
    assert admin.slowlog.entries[0].name == b"w1"
    assert admin.latency.events == {}  # latency-monitor-threshold 0: off
    node.config = {"slowlog-log-slower-than": "-1"}
    admin.load_config(node)
    assert admin.slowlog.max_len == 128
    d.feed(cmd("PING"))
    assert len(admin.slowlog.entries) == 2


def test_client_pause_holds_every_command_until_the_end() -> None:
    node, _admin, (a, b) = make_doors(2)
    assert a.feed(cmd("CLIENT", "PAUSE", "500") + cmd("PING")) == b"+OK\r\n"
    assert b.feed(cmd("PING")) == b""
    assert not a.runnable and not b.runnable
    node.clock += 500
    assert not b.runnable  # over once its end is passed (disq/core/timers.py)
    node.clock += 1
    assert a.runnable and b.runnable
    assert a.run_pending() == b"+PONG\r\n"
    assert b.run_pending() == b"+PONG\r\n"
    assert a.feed(cmd("CLIENT", "PAUSE", "-1")) == b"-ERR timeout is negative\r\n"
    assert a.feed(cmd("CLIENT", "PAUSE", "x")) == (
        b"-ERR timeout is not an integer or out of range\r\n"
    )


def test_client_list_kill_id_info() -> None:
    _node, admin, (a, b) = make_doors(2)
    killed: list[int] = []
    b.client.kill = lambda: killed.append(1)
    a.feed(cmd("CLIENT", "SETNAME", "alpha"))
    reply = a.feed(cmd("CLIENT", "LIST"))
    header, body = reply.split(b"\r\n", 1)
    assert header == b"$%d" % (len(body) - 2)
    lines = body[:-2].decode().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"id={a.client.cid} addr=127.0.0.1:40000 laddr=")
    assert " name=alpha " in lines[0] and lines[1].startswith(f"id={b.client.cid} ")
    assert a.feed(cmd("CLIENT", "ID")) == b":%d\r\n" % a.client.cid
    info = a.feed(cmd("CLIENT", "INFO"))
    assert b" name=alpha " in info and b" cmd=client " in info
    assert a.feed(cmd("CLIENT", "KILL", "127.0.0.1:1")) == b"-ERR No such client\r\n"
    assert a.feed(cmd("CLIENT", "KILL", "ID", str(b.client.cid))) == b":1\r\n"
    assert killed == [1] and b.client.cid not in admin.clients
    # The old form kills the caller too: the reply leaves, then the connection closes.
    assert a.feed(cmd("CLIENT", "KILL", "127.0.0.1:40000")) == b"+OK\r\n"
    assert a.client.closing


def test_a_monitor_that_does_not_read_is_closed_past_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("disq.doors.disque.admin.MONITOR_MAX_OUTPUT_BYTES", 200)
    _node, admin, (mon, cl) = make_doors(2)
    killed: list[int] = []
    mon.client.kill = lambda: killed.append(1)
    mon.feed(cmd("MONITOR"))
    cl.feed(cmd("PING"))
    assert killed == [] and mon.client.outbox
    cl.feed(cmd("ECHO", "x" * 300))
    assert killed == [1]
    assert not admin.monitors and mon.client.cid not in admin.clients
    assert mon.client.outbox == [] and mon.client.closing

"""The RESP door and Disque's command set, driven over a real DisqueCore.

Replies are compared as whole byte strings: what a Disque client parses is the bytes, and
the expected values are built with the codec's generic encoder (``resp.encode``) or written
out, never with the formatting code under test.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from disq.core.beanstalk.core import BeanstalkCore
from disq.core.disque.api import DisqueError
from disq.core.disque.core import DisqueCore
from disq.core.messages import GotJob, ReplJob
from disq.core.node_core import NodeCore
from disq.doors import disque as dc
from disq.doors.disque import NodeEntry, RespStats, parse_cursor, parse_ll
from disq.doors.resp_door import RespDoor
from disq.protocol import resp
from disq.server.resp_tcp import RespHub
from disq.server.router import ReplyRouter

MY_ID = "a1b2c3d4" + "0" * 32
PEER = "f" * 40
T0 = 1_700_000_000_123
ID_RE = re.compile(rb"^D-a1b2c3d4-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


class StaticView:
    """A fixed membership: this node, plus optional reachable peers."""

    def __init__(self, peers: list[str] | None = None, leaving: bool = False) -> None:
        self._peers = peers or []
        self.leaving = leaving

    @property
    def my_id(self) -> str:
        return MY_ID

    def cluster_size(self) -> int:
        return 1 + len(self._peers)

    def reachable_peers(self) -> list[str]:
        return list(self._peers)

    def all_peers(self) -> list[str]:
        return list(self._peers)


class FakeNode:
    """NodeApi over a real core; admin calls are recorded, not performed."""

    def __init__(self, view: StaticView | None = None) -> None:
        self.view = view or StaticView()
        self.clock = T0
        self.wall_offset_ms = 0  # wall minus node clock, as the runtime's (server/clock.py)
        # The doors drive the node core, as on a node; the tests read the Disque core in it.
        self.disque = DisqueCore(self.view, random.Random(7), T0)
        self.core = NodeCore(BeanstalkCore(), self.disque)
        self.requirepass: str | None = None
        self.aof_error: str | None = None
        self.disk_full: str | None = None
        self.resp_stats = RespStats()
        self.calls: list[tuple[object, ...]] = []
        self.leaving = False
        self.config = {"maxmemory": "1073741824", "appendonly": "no"}
        self.fail_with: DisqueError | None = None

    def now_ms(self) -> int:
        return self.clock

    def wall_ms(self) -> int:
        return self.clock + self.wall_offset_ms

    def info_fields(self, section: str) -> list[tuple[str, str | int | float]]:
        if section == "server":
            return [("disque_version", "1.0-rc1"), ("run_id", "r" * 40), ("tcp_port", 7711)]
        if section == "clients":
            return [("connected_clients", 1), ("blocked_clients", 0)]
        if section == "cpu":
            return [("used_cpu_sys", 0.5)]
        return [(f"{section}_key", 1)]

    def cluster_nodes(self) -> list[NodeEntry]:
        out = [NodeEntry(MY_ID, "127.0.0.1", 7711, "alive", self.leaving, 1)]
        for p in self.view.all_peers():
            out.append(NodeEntry(p, "10.0.0.2", 7712, "suspect", False, 10))
        return out

    def _maybe_fail(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    def cluster_meet(self, host: str, port: int) -> bool:
        self.calls.append(("meet", host, port))
        return 0 < port < 55536

    def cluster_forget(self, node_id: str) -> None:
        self.calls.append(("forget", node_id))

    def cluster_leaving(self, flag: bool | None) -> bool:
        if flag is not None:
            self.leaving = flag
        return self.leaving

    def cluster_reset(self, hard: bool) -> None:
        self.calls.append(("reset", hard))

    def cluster_info(self) -> list[tuple[str, str | int]]:
        return [("cluster_state", "ok"), ("cluster_known_nodes", 1)]

    def cluster_saveconfig(self) -> None:
        self._maybe_fail()
        self.calls.append(("saveconfig",))

    def config_get(self, pattern: str) -> list[tuple[str, str]]:
        return [(k, v) for k, v in self.config.items() if pattern in ("*", k)]

    def config_set(self, name: str, value: str) -> None:
        if name not in self.config:
            raise DisqueError("ERR", f"Unsupported CONFIG parameter: {name}")
        self.config[name] = value

    def config_rewrite(self) -> None:
        self._maybe_fail()
        self.calls.append(("rewrite",))

    def config_resetstat(self) -> None:
        self.calls.append(("resetstat",))

    def shutdown(self, mode: str) -> None:
        self._maybe_fail()
        self.calls.append(("shutdown", mode))

    def bgrewriteaof(self) -> str:
        self._maybe_fail()
        return "Background append only file rewriting started"

    def debug_sleep(self, seconds: float) -> None:
        self.calls.append(("sleep", seconds))

    def drop_peers(self, node_ids: list[str]) -> None:
        self.calls.append(("drop", tuple(node_ids)))


# ------------------------------------------------------------------ helpers
def cmd(*args: bytes | str | int) -> bytes:
    """A multibulk request."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


def err(text: str) -> bytes:
    return b"-" + text.encode() + b"\r\n"


def bulk(b: bytes | str) -> bytes:
    return resp.encode(b if isinstance(b, bytes) else b.encode())


@pytest.fixture
def node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def tokens() -> Iterator[int]:
    return itertools.count(1)


def make_door(node: FakeNode, tokens: Iterator[int], **kw: int) -> RespDoor:
    return RespDoor(node, tokens.__next__, **kw)  # type: ignore[arg-type]


@pytest.fixture
def door(node: FakeNode, tokens: Iterator[int]) -> RespDoor:
    return make_door(node, tokens)


def route(node: FakeNode, *doors: RespDoor) -> dict[int, bytes]:
    """What the node does with core.replies: give each to the door waiting on its token (the
    blocked command's, or a run-ahead ADDJOB's). A door appears in the result when its
    blocked command was answered, or when a held run-ahead reply was released."""
    out: dict[int, bytes] = {}
    while node.disque.replies:
        replies = node.disque.replies
        node.disque.replies = []
        for token, result in replies:
            for i, d in enumerate(doors):
                if token in d.pending_tokens:
                    head = token == d.pending_token
                    r = d.deliver(result, token)
                    if r or head:
                        out[i] = out.get(i, b"") + r
    return out


def add(door: RespDoor, queue: str = "q", body: bytes = b"body", *opts: str | int) -> bytes:
    r = door.feed(cmd("ADDJOB", queue, body, 0, *opts))
    assert r.startswith(b"+D-"), r
    return r[1:-2]


# ------------------------------------------------------------------ number parsing
@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"0", 0),
        (b"12", 12),
        (b"+5", 5),
        (b"-7", -7),
        (b"007", 7),
        (b"-0", 0),
        (b"", 0),  # strtoll("") consumes nothing and stops at the NUL: Redis takes 0
        (b"5\x00junk", 5),  # a C string ends at the NUL
        (b"9223372036854775807", (1 << 63) - 1),
        (b"-9223372036854775808", -(1 << 63)),
        (b"9223372036854775808", None),
        (b" 5", None),
        (b"5 ", None),
        (b"+", None),
        (b"1_0", None),
        (b"0x10", None),
        (b"1.5", None),
        (b"0" * 5000 + b"3", 3),
        (b"\xd9\xa3", None),  # non-ASCII digits
    ],
)
def test_parse_ll_is_strtoll_as_redis_checks_it(raw: bytes, value: int | None) -> None:
    assert parse_ll(raw) == value


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"0", 0),
        (b"42", 42),
        (b"-1", (1 << 64) - 1),  # strtoul wraps negatives
        (b"18446744073709551615", (1 << 64) - 1),
        (b"18446744073709551616", None),
        (b"abc", None),
        (b" 1", None),
    ],
)
def test_parse_cursor_is_strtoul(raw: bytes, value: int | None) -> None:
    assert parse_cursor(raw) == value


# ------------------------------------------------------------------ dispatch
def test_ping_inline_and_multibulk(door: RespDoor) -> None:
    assert door.feed(b"PING\r\n") == b"+PONG\r\n"
    assert door.feed(b"ping hello\r\n") == b"$5\r\nhello\r\n"
    assert door.feed(cmd("PING", "a", "b")) == err(
        "ERR wrong number of arguments for 'ping' command"
    )


def test_unknown_command_keeps_the_client_spelling(door: RespDoor) -> None:
    assert door.feed(b"FooBar x\r\n") == err("ERR unknown command 'FooBar'")
    assert door.feed(cmd(b"no\r\nway")) == err("ERR unknown command 'no  way'")


@pytest.mark.parametrize(
    ("request_", "name"),
    [
        (cmd("ADDJOB", "q", "b"), "addjob"),
        (cmd("GETJOB"), "getjob"),
        (cmd("SHOW"), "show"),
        (cmd("SHOW", "a", "b"), "show"),
        (cmd("QLEN"), "qlen"),
        (cmd("QPEEK", "q"), "qpeek"),
        (cmd("WORKING"), "working"),
        (cmd("PAUSE", "q"), "pause"),
        (cmd("TIME", "x"), "time"),
        (cmd("AUTH"), "auth"),
        (cmd("CLUSTER"), "cluster"),
        (cmd("CONFIG"), "config"),
        (cmd("DEBUG"), "debug"),
        (cmd("CLIENT"), "client"),
        (cmd("BGREWRITEAOF", "x"), "bgrewriteaof"),
        (cmd("ECHO"), "echo"),
    ],
)
def test_arity_errors(door: RespDoor, request_: bytes, name: str) -> None:
    assert door.feed(request_) == err(f"ERR wrong number of arguments for '{name}' command")


def test_commands_are_case_insensitive(door: RespDoor) -> None:
    assert door.feed(cmd("qLeN", "q")) == b":0\r\n"


def test_pipelined_replies_come_in_order_in_one_buffer(door: RespDoor) -> None:
    data = cmd("PING") + b"QLEN q\r\n" + cmd("ECHO", "x") + cmd("NOPE") + b"PING\r\n"
    assert door.feed(data) == (
        b"+PONG\r\n:0\r\n$1\r\nx\r\n" + err("ERR unknown command 'NOPE'") + b"+PONG\r\n"
    )


def test_split_input_is_buffered(door: RespDoor) -> None:
    data = cmd("ECHO", "hello")
    out = b"".join(door.feed(data[i : i + 1]) for i in range(len(data)))
    assert out == b"$5\r\nhello\r\n"


def test_quit_replies_ok_then_ignores_everything(door: RespDoor) -> None:
    assert door.feed(cmd("PING") + cmd("QUIT") + cmd("PING")) == b"+PONG\r\n+OK\r\n"
    assert door.closing
    assert door.feed(cmd("PING")) == b""


def test_protocol_error_is_replied_then_the_connection_closes(door: RespDoor) -> None:
    assert door.feed(b"PING\r\n*1\r\n$x\r\n") == (
        b"+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"
    )
    assert door.closing


def test_inline_addjob(door: RespDoor) -> None:
    r = door.feed(b"ADDJOB q hello 0\r\n")
    assert ID_RE.match(r[1:-2]), r


def test_misconf_refuses_writes_and_ping(door: RespDoor, node: FakeNode) -> None:
    node.aof_error = "No space left on device"
    misconf = err("MISCONF Errors writing to the AOF file: No space left on device")
    assert door.feed(cmd("ADDJOB", "q", "b", 0)) == misconf
    assert door.feed(cmd("PING")) == misconf
    assert door.feed(cmd("QLEN", "q")) == b":0\r\n"


# ------------------------------------------------------------------ ADDJOB
def test_addjob_replies_the_id_as_a_status(door: RespDoor, node: FakeNode) -> None:
    r = door.feed(cmd("ADDJOB", "q", "body", 0))
    job_id = r[1:-2]
    assert r == b"+" + job_id + b"\r\n"
    assert ID_RE.match(job_id)
    job = node.disque.jobs[job_id.decode()]
    assert (job.queue, job.body, job.repl, job.retry_s) == ("q", b"body", 1, 300)
    assert int(job_id[-4:], 16) & 1 == 1  # retry > 0: odd TTL field


def test_addjob_options(door: RespDoor, node: FakeNode) -> None:
    job_id = add(door, "q", b"x", "ttl", 600, "retry", 0, "replicate", 1, "delay", 5, "async")
    job = node.disque.jobs[job_id.decode()]
    assert (job.retry_s, job.delay_s, job.etime_ms) == (0, 5, T0 + 600_000)
    assert int(job_id[-4:], 16) == 10  # 600 s = 10 minutes, even: at-most-once
    assert door.feed(cmd("QLEN", "q")) == b":0\r\n"  # delayed jobs are not queued


def test_addjob_delayms_queues_the_job_to_the_millisecond(door: RespDoor, node: FakeNode) -> None:
    """disq's DELAYMS: the job is queued that many ms after the add (its record keeps the
    delay in whole seconds rounded up, for the copies and the AOF, which never queue it
    early)."""
    job_id = add(door, "q", b"x", "DELAYMS", 300).decode()
    job = node.disque.jobs[job_id]
    assert (job.delay_s, job.qtime_ms) == (1, T0 + 300)
    node.disque.tick(T0 + 300)  # due once passed (core/timers.py)
    assert node.disque.qlen("q") == 0
    node.disque.tick(T0 + 301)
    assert node.disque.qlen("q") == 1
    assert door.feed(cmd("ADDJOB", "q", "b", 0, "DELAY", 1, "DELAYMS", 5)) == err(
        "ERR DELAY and DELAYMS exclude each other"
    )


@pytest.mark.parametrize(
    ("opts", "error"),
    [
        (("DELAYMS", -1), "ERR DELAYMS time must be a non negative number"),
        (("DELAYMS", "0.5"), "ERR DELAYMS time must be a non negative number"),
        (
            ("TTL", 10, "DELAYMS", 10_000),
            "ERR The specified DELAY is greater than TTL. Job refused since would never be "
            "delivered",
        ),
        (("REPLICATE", 0), "ERR REPLICATE must be between 1 and 65535"),
        (("REPLICATE", 65536), "ERR REPLICATE must be between 1 and 65535"),
        (("REPLICATE", "x"), "ERR REPLICATE must be between 1 and 65535"),
        (("TTL", 0), "ERR TTL must be a number > 0"),
        (("TTL", "-1"), "ERR TTL must be a number > 0"),
        (("RETRY", -1), "ERR RETRY time must be a non negative number"),
        (("DELAY", "1.5"), "ERR DELAY time must be a non negative number"),
        (("MAXLEN", 0), "ERR MAXLEN must be a positive number"),
        (("NOPE",), "ERR syntax error"),
        (("TTL",), "ERR syntax error"),  # an option without its value
        (("ASYNC", "TTL", 10, "EXTRA"), "ERR syntax error"),
        (("IDEMPOTENCY-KEY",), "ERR syntax error"),
        (("IDEMPOTENCY-KEY", ""), "ERR IDEMPOTENCY-KEY must not be empty"),
        (("IDEMPOTENCY-KEY", "k" * 257), "ERR the idempotency key is longer than 256 bytes"),
        (
            ("REPLICATE", 2, "RETRY", 0),
            "ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)",
        ),
        (
            ("TTL", 10, "DELAY", 10),
            "ERR The specified DELAY is greater than TTL. Job refused since would never be "
            "delivered",
        ),
        (
            ("REPLICATE", 2),
            "NOREPL Not enough reachable nodes for the requested replication level",
        ),
    ],
)
def test_addjob_errors(door: RespDoor, opts: tuple[str | int, ...], error: str) -> None:
    assert door.feed(cmd("ADDJOB", "q", "b", 0, *opts)) == err(error)


def test_addjob_idempotency_key_answers_the_first_id(door: RespDoor, node: FakeNode) -> None:
    first = add(door, "q", b"x", "IDEMPOTENCY-KEY", "order-42")
    assert add(door, "q", b"x", "idempotency-key", "order-42") == first
    assert door.feed(cmd("QLEN", "q")) == b":1\r\n"
    assert node.disque.jobs[first.decode()].idem_key == "order-42"
    assert add(door, "q", b"x", "IDEMPOTENCY-KEY", "order-43") != first


def test_addjob_timeout_errors_come_after_option_errors(door: RespDoor) -> None:
    assert door.feed(cmd("ADDJOB", "q", "b", "x")) == err(
        "ERR timeout is not an integer or out of range"
    )
    assert door.feed(cmd("ADDJOB", "q", "b", -1)) == err("ERR timeout is negative")
    assert door.feed(cmd("ADDJOB", "q", "b", "x", "TTL", 0)) == err("ERR TTL must be a number > 0")


def test_addjob_maxlen_and_paused(door: RespDoor) -> None:
    add(door)
    add(door)
    assert door.feed(cmd("ADDJOB", "q", "b", 0, "MAXLEN", 2)) == err(
        "MAXLEN Queue is already longer than the specified MAXLEN count"
    )
    assert door.feed(cmd("PAUSE", "q", "in")) == b"+in\r\n"
    assert door.feed(cmd("ADDJOB", "q", "b", 0)) == err("PAUSED Queue paused in input, try later")


def test_sync_addjob_blocks_until_the_copy_is_confirmed(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("ADDJOB", "q", "b", 0, "REPLICATE", 2) + cmd("PING")) == b""
    assert d.blocked
    repl = [m for dest, m in node.disque.outbox if dest == PEER and isinstance(m, ReplJob)]
    job_id = repl[0].job.id
    node.disque.on_message(T0 + 1, PEER, GotJob(job_id))
    assert route(node, d) == {0: b"+" + job_id.encode() + b"\r\n+PONG\r\n"}
    assert not d.blocked


def test_sync_addjob_timeout_is_norepl(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("ADDJOB", "q", "b", 100, "REPLICATE", 2)) == b""
    node.disque.tick(T0 + 101)
    assert route(node, d) == {
        0: err("NOREPL Timeout reached before replicating to the requested number of nodes")
    }


def test_closing_a_blocked_sync_addjob_cancels_it(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    d.feed(cmd("ADDJOB", "q", "b", 0, "REPLICATE", 2))
    assert len(node.disque.jobs) == 1
    d.close()
    assert node.disque.jobs == {}
    assert node.disque.blocked.count() == 0


# ------------------------------------------------------------------ GETJOB
def test_getjob_byte_exact(door: RespDoor) -> None:
    job_id = add(door, "q", b"hello")
    assert door.feed(cmd("GETJOB", "FROM", "q")) == (
        b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$5\r\nhello\r\n"
    )


def test_getjob_withcounters_byte_exact(door: RespDoor) -> None:
    job_id = add(door, "q", b"hi")
    assert door.feed(cmd("GETJOB", "WITHCOUNTERS", "FROM", "q")) == resp.encode(
        [[b"q", job_id, b"hi", b"nacks", 0, b"additional-deliveries", 0]]
    )
    assert door.feed(cmd("NACK", job_id)) == b":1\r\n"
    assert door.feed(cmd("GETJOB", "withcounters", "from", "q")) == resp.encode(
        [[b"q", job_id, b"hi", b"nacks", 1, b"additional-deliveries", 0]]
    )


def test_getjob_count_and_queue_order(door: RespDoor) -> None:
    a1 = add(door, "a", b"1")
    a2 = add(door, "a", b"2")
    b1 = add(door, "b", b"3")
    assert door.feed(cmd("GETJOB", "COUNT", 10, "FROM", "b", "a")) == resp.encode(
        [[b"b", b1, b"3"], [b"a", a1, b"1"], [b"a", a2, b"2"]]
    )


def test_getjob_inorder_takes_a_queues_jobs_before_the_next_queues(door: RespDoor) -> None:
    """disq's INORDER (the gRPC API's in_order): Disque's one job per queue per pass
    becomes queue by queue, in the order named; the integrations' priority steps."""
    a1 = add(door, "a", b"1")
    a2 = add(door, "a", b"2")
    b1 = add(door, "b", b"3")
    assert door.feed(cmd("GETJOB", "COUNT", 10, "INORDER", "FROM", "a", "b")) == resp.encode(
        [[b"a", a1, b"1"], [b"a", a2, b"2"], [b"b", b1, b"3"]]
    )
    b2 = add(door, "b", b"4")
    a3 = add(door, "a", b"5")
    assert door.feed(cmd("GETJOB", "COUNT", 1, "inorder", "FROM", "b", "a")) == resp.encode(
        [[b"b", b2, b"4"]]
    )
    assert door.feed(cmd("GETJOB", "COUNT", 5, "INORDER", "FROM", "a")) == resp.encode(
        [[b"a", a3, b"5"]]
    )


def test_getjob_nohang_on_empty_is_null_multibulk(door: RespDoor) -> None:
    assert door.feed(cmd("GETJOB", "NOHANG", "FROM", "q")) == b"*-1\r\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("FROM",), "ERR syntax error"),
        (("NOHANG",), "ERR syntax error"),  # FROM is mandatory
        (("BOGUS", "FROM", "q"), "ERR syntax error"),
        (("COUNT", 0, "FROM", "q"), "ERR COUNT must be a number greater than zero"),
        (("COUNT", "x", "FROM", "q"), "ERR COUNT must be a number greater than zero"),
        (("TIMEOUT", "x", "FROM", "q"), "ERR timeout is not an integer or out of range"),
        (("TIMEOUT", -5, "FROM", "q"), "ERR timeout is negative"),
        (
            ("TIMEOUT", "x", "COUNT", 0, "FROM", "q"),
            "ERR timeout is not an integer or out of range",
        ),
    ],
)
def test_getjob_errors(door: RespDoor, args: tuple[str | int, ...], error: str) -> None:
    assert door.feed(cmd("GETJOB", *args)) == err(error)


def test_getjob_options_after_from_are_queue_names(door: RespDoor, node: FakeNode) -> None:
    # "NOHANG" after FROM is a queue: the call blocks on queues "q" and "NOHANG".
    assert door.feed(cmd("GETJOB", "FROM", "q", "NOHANG")) == b""
    assert door.blocked
    assert set(node.disque.queues) == {"q", "NOHANG"}


def test_blocked_getjob_holds_later_commands_until_another_door_adds(
    node: FakeNode, tokens: Iterator[int]
) -> None:
    consumer = make_door(node, tokens)
    producer = make_door(node, tokens)
    assert consumer.feed(cmd("GETJOB", "FROM", "q") + cmd("PING") + b"QLEN q\r\n") == b""
    assert consumer.blocked
    assert consumer.feed(cmd("ECHO", "later")) == b""  # still held, still in order
    job_id = add(producer, "q", b"payload")
    assert route(node, consumer, producer) == {
        0: resp.encode([[b"q", job_id, b"payload"]]) + b"+PONG\r\n:0\r\n$5\r\nlater\r\n"
    }
    assert not consumer.blocked
    assert consumer.feed(cmd("PING")) == b"+PONG\r\n"


def test_blocked_getjob_withcounters_keeps_its_flag(node: FakeNode, tokens: Iterator[int]) -> None:
    consumer = make_door(node, tokens)
    producer = make_door(node, tokens)
    consumer.feed(cmd("GETJOB", "WITHCOUNTERS", "FROM", "q"))
    job_id = add(producer, "q", b"x")
    assert route(node, consumer) == {
        0: resp.encode([[b"q", job_id, b"x", b"nacks", 0, b"additional-deliveries", 0]])
    }


def test_blocked_getjob_times_out_with_null(door: RespDoor, node: FakeNode) -> None:
    assert door.feed(cmd("GETJOB", "TIMEOUT", 100, "FROM", "q") + cmd("PING")) == b""
    node.disque.tick(T0 + 100)  # the timeout is over once passed (disq/core/timers.py)
    assert route(node, door) == {}
    node.disque.tick(T0 + 101)
    assert route(node, door) == {0: b"*-1\r\n+PONG\r\n"}


def test_closed_door_cancels_its_getjob(node: FakeNode, tokens: Iterator[int]) -> None:
    gone = make_door(node, tokens)
    other = make_door(node, tokens)
    gone.feed(cmd("GETJOB", "FROM", "q"))
    gone.close()
    assert node.disque.blocked.count() == 0
    job_id = add(other, "q", b"x")
    assert route(node, gone, other) == {}
    assert other.feed(cmd("GETJOB", "NOHANG", "FROM", "q")) == resp.encode([[b"q", job_id, b"x"]])
    assert gone.deliver(None) == b""


def test_getjob_on_a_leaving_node(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(leaving=True))
    d = make_door(node, tokens)
    assert d.feed(cmd("GETJOB", "FROM", "q")) == err(
        "LEAVING This node is leaving the cluster, please connect to a different one"
    )
    assert d.feed(cmd("GETJOB", "NOHANG", "FROM", "q")) == b"*-1\r\n"


def test_protocol_error_behind_a_blocked_command_keeps_the_order(
    door: RespDoor, node: FakeNode, tokens: Iterator[int]
) -> None:
    assert door.feed(cmd("GETJOB", "FROM", "q") + b"*1\r\n$x\r\n") == b""
    assert not door.closing
    producer = make_door(node, tokens)
    job_id = add(producer, "q", b"x")
    assert route(node, door) == {
        0: resp.encode([[b"q", job_id, b"x"]]) + b"-ERR Protocol error: invalid bulk length\r\n"
    }
    assert door.closing


def test_queued_input_past_the_bound_closes_the_connection(
    node: FakeNode, tokens: Iterator[int]
) -> None:
    d = make_door(node, tokens, max_queued_bytes=1000)
    d.feed(cmd("GETJOB", "FROM", "q"))
    d.feed(cmd("ECHO", "x" * 500))
    assert d.queued_bytes > 500 and not d.closing
    d.feed(cmd("ECHO", "x" * 500))
    assert d.closing and d.queued_bytes == 0


def test_big_pipelines_are_answered_in_batches(door: RespDoor) -> None:
    add(door, "q", b"x" * 100_000)
    n = 10
    first = door.feed(cmd("QPEEK", "q", 1) * n)
    assert 0 < len(first) < n * 100_000 and door.runnable
    rest = b""
    while door.runnable:
        rest += door.run_pending()
    one = door.feed(cmd("QPEEK", "q", 1))
    assert first + rest == one * n


# ------------------------------------------------------------------ ids commands
@pytest.mark.parametrize("name", ["ACKJOB", "FASTACK", "DELJOB", "ENQUEUE", "NACK", "DEQUEUE"])
def test_ids_commands_validate_every_id_first(door: RespDoor, node: FakeNode, name: str) -> None:
    job_id = add(door)
    bad = b"D-12345678-" + b"x" * 23 + b"-0001"  # 39 chars
    assert door.feed(cmd(name, job_id, bad)) == err("BADID Invalid Job ID format.")
    assert door.feed(cmd(name, b"X" + job_id[1:])) == err("BADID Invalid Job ID format.")
    assert job_id.decode() in node.disque.jobs  # nothing done
    assert door.feed(cmd(name)) == b":0\r\n"  # arity -1: no ids is fine


def test_ackjob_fastack_deljob(door: RespDoor, node: FakeNode) -> None:
    j1, j2, j3 = add(door), add(door), add(door)
    unknown = b"D-a1b2c3d4-" + b"A" * 24 + b"-0001"
    assert door.feed(cmd("ACKJOB", j1, unknown)) == b":1\r\n"
    assert door.feed(cmd("ACKJOB", j1)) == b":0\r\n"  # already acked (or gone)
    assert door.feed(cmd("FASTACK", j2, unknown)) == b":1\r\n"
    assert door.feed(cmd("DELJOB", j3, j3)) == b":1\r\n"
    assert node.disque.jobs == {}


def test_dequeue_enqueue_nack(door: RespDoor) -> None:
    job_id = add(door)
    assert door.feed(cmd("DEQUEUE", job_id)) == b":1\r\n"
    assert door.feed(cmd("QLEN", "q")) == b":0\r\n"
    assert door.feed(cmd("DEQUEUE", job_id)) == b":0\r\n"
    assert door.feed(cmd("ENQUEUE", job_id)) == b":1\r\n"
    assert door.feed(cmd("ENQUEUE", job_id)) == b":0\r\n"
    assert door.feed(cmd("GETJOB", "FROM", "q")).startswith(b"*1\r\n")
    assert door.feed(cmd("NACK", job_id)) == b":1\r\n"
    assert door.feed(cmd("QLEN", "q")) == b":1\r\n"


def test_working(door: RespDoor, node: FakeNode) -> None:
    job_id = add(door, "q", b"b", "RETRY", 30)
    assert door.feed(cmd("WORKING", job_id)) == b":30\r\n"
    assert door.feed(cmd("QLEN", "q")) == b":0\r\n"  # WORKING dequeues
    assert door.feed(cmd("WORKING", b"D-a1b2c3d4-" + b"B" * 24 + b"-0001")) == err(
        "NOJOB Job not known in the context of this node."
    )
    assert door.feed(cmd("WORKING", "nope")) == err("BADID Invalid Job ID format.")
    node.clock = T0 + 86400 * 1000 // 2 + 1000
    assert door.feed(cmd("WORKING", job_id)) == err(
        "TOOLATE Half of job TTL already elapsed, you are no longer allowed to postpone the "
        "next delivery."
    )


# ------------------------------------------------------------------ SHOW, queues
def test_show_byte_exact(door: RespDoor, node: FakeNode) -> None:
    job_id = add(door, "q", b"body")
    job = node.disque.jobs[job_id.decode()]
    node.clock = T0 + 1500
    assert door.feed(cmd("SHOW", job_id)) == resp.encode(
        [
            b"id",
            job_id,
            b"queue",
            b"q",
            b"state",
            b"queued",
            b"repl",
            1,
            b"ttl",
            86398,
            b"ctime",
            T0 * 1_000_000,
            b"delay",
            0,
            b"retry",
            300,
            b"nacks",
            0,
            b"additional-deliveries",
            0,
            b"nodes-delivered",
            [MY_ID.encode()],
            b"nodes-confirmed",
            [],
            b"next-requeue-within",
            job.qtime_ms - node.clock,
            b"next-awake-within",
            job.awake_ms - node.clock,
            b"body",
            b"body",
        ]
    )


def test_show_unknown_is_null_bulk_and_bad_id_is_badid(door: RespDoor) -> None:
    assert door.feed(cmd("SHOW", b"D-a1b2c3d4-" + b"C" * 24 + b"-0001")) == b"$-1\r\n"
    assert door.feed(cmd("SHOW", "x")) == err("BADID Invalid Job ID format.")


def test_show_at_most_once_job_has_null_requeue(door: RespDoor) -> None:
    job_id = add(door, "q", b"b", "RETRY", 0)
    door.feed(cmd("GETJOB", "FROM", "q"))
    reply = door.feed(cmd("SHOW", job_id))
    assert b"$19\r\nnext-requeue-within\r\n$-1\r\n" in reply


def test_qpurge_acks_every_queued_job_of_the_queue_and_answers_the_count(
    door: RespDoor,
) -> None:
    assert door.feed(cmd("QPURGE", "q")) == b":0\r\n"
    ids = [add(door, "q", b"x%d" % i) for i in range(5)]
    add(door, "other")
    door.feed(cmd("GETJOB", "FROM", "q"))  # one delivered: not queued, it stays
    assert door.feed(cmd("QPURGE", "q")) == b":4\r\n"
    assert door.feed(cmd("QLEN", "q")) == b":0\r\n"
    assert door.feed(cmd("QLEN", "other")) == b":1\r\n"
    # One node: an acked job has no other copy to wait for, so it is gone at once.
    shown = [door.feed(cmd("SHOW", i)) for i in ids]
    assert [s == b"$-1\r\n" for s in shown] == [False, True, True, True, True]
    assert b"$6\r\nactive\r\n" in shown[0]  # the delivered one (the oldest)
    assert door.feed(cmd("QPURGE")) == err("ERR wrong number of arguments for 'qpurge' command")


def test_qlen_qstat(door: RespDoor, node: FakeNode) -> None:
    assert door.feed(cmd("QSTAT", "q")) == b"*-1\r\n"
    add(door)
    add(door)
    door.feed(cmd("GETJOB", "FROM", "q"))
    node.clock = T0 + 3000
    assert door.feed(cmd("QLEN", "q")) == b":1\r\n"
    assert door.feed(cmd("QSTAT", "q")) == resp.encode(
        [
            b"name",
            b"q",
            b"len",
            1,
            b"age",
            3,
            b"idle",
            3,
            b"blocked",
            0,
            b"import-from",
            [],
            b"import-rate",
            0,
            b"jobs-in",
            2,
            b"jobs-out",
            1,
            b"pause",
            b"none",
            # disq's, after Disque's own fields: every live job held (2), the delivered one,
            # none delayed (disq/core/disque/counts.py).
            b"jobs",
            2,
            b"active",
            1,
            b"delayed",
            0,
        ]
    )
    add(door, "q", b"later", "DELAY", 5)
    assert door.feed(cmd("QSTAT", "q")).endswith(
        resp.encode([b"jobs", 3, b"active", 1, b"delayed", 1])[4:]
    )
    # A queue with no queue record but jobs held (only delayed ones): an empty queue's
    # Disque fields and the counts, where Disque answers null.
    add(door, "only-delayed", b"d", "DELAY", 5)
    assert door.feed(cmd("QLEN", "only-delayed")) == b":0\r\n"
    stat = door.feed(cmd("QSTAT", "only-delayed"))
    assert stat.startswith(b"*26\r\n$4\r\nname\r\n$12\r\nonly-delayed\r\n$3\r\nlen\r\n:0\r\n")
    assert stat.endswith(resp.encode([b"jobs", 1, b"active", 0, b"delayed", 1])[4:])


def test_qpeek(door: RespDoor) -> None:
    j1 = add(door, "q", b"1")
    j2 = add(door, "q", b"2")
    j3 = add(door, "q", b"3")
    assert door.feed(cmd("QPEEK", "q", 2)) == resp.encode([[b"q", j1, b"1"], [b"q", j2, b"2"]])
    assert door.feed(cmd("QPEEK", "q", -2)) == resp.encode([[b"q", j3, b"3"], [b"q", j2, b"2"]])
    assert door.feed(cmd("QPEEK", "empty", 5)) == b"*0\r\n"
    assert door.feed(cmd("QPEEK", "q", "x")) == err("ERR value is not an integer or out of range")


def test_queue_names_are_binary_safe(door: RespDoor) -> None:
    name = b"\xff\x00q\xe9"
    job_id = add(door, name, b"b")  # type: ignore[arg-type]
    assert door.feed(cmd("GETJOB", "FROM", name)) == resp.encode([[name, job_id, b"b"]])


def test_qscan(door: RespDoor) -> None:
    for q in ("a", "b", "c"):
        add(door, q)
    assert door.feed(cmd("QSCAN")) == resp.encode([b"0", [b"a", b"b", b"c"]])
    assert door.feed(cmd("QSCAN", "COUNT", 2)) == resp.encode([b"2", [b"a", b"b"]])
    # The cursor can be anywhere among the options.
    assert door.feed(cmd("QSCAN", "COUNT", 2, 2)) == resp.encode([b"0", [b"c"]])
    assert door.feed(cmd("QSCAN", 2, "COUNT", 2)) == resp.encode([b"0", [b"c"]])
    assert door.feed(cmd("QSCAN", "BUSYLOOP", "COUNT", 1)) == resp.encode(
        [b"0", [b"a", b"b", b"c"]]
    )
    assert door.feed(cmd("QSCAN", "MINLEN", 2)) == resp.encode([b"0", []])
    assert door.feed(cmd("QSCAN", "MAXLEN", 1, "IMPORTRATE", 0)) == resp.encode(
        [b"0", [b"a", b"b", b"c"]]
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0, 1), "ERR syntax error"),
        (("nope",), "ERR invalid cursor or option name"),
        (("COUNT",), "ERR invalid cursor or option name"),  # no value: taken as a cursor
        (("COUNT", "x"), "ERR value is not an integer or out of range"),
        (("MINLEN", "x"), "ERR value is not an integer or out of range"),
        (("MAXLEN", "1.5"), "ERR value is not an integer or out of range"),
        (("IMPORTRATE", "x"), "ERR value is not an integer or out of range"),
    ],
)
def test_qscan_errors(door: RespDoor, args: tuple[str | int, ...], error: str) -> None:
    assert door.feed(cmd("QSCAN", *args)) == err(error)


def test_jscan(door: RespDoor, node: FakeNode) -> None:
    a = add(door, "a")
    b = add(door, "b")
    ids = sorted([a, b])
    assert door.feed(cmd("JSCAN")) == (
        b"*2\r\n$1\r\n0\r\n*2\r\n" + b"".join(b"+" + i + b"\r\n" for i in ids)
    )
    assert door.feed(cmd("JSCAN", "QUEUE", "b", "REPLY", "id")) == (
        b"*2\r\n$1\r\n0\r\n*1\r\n+" + b + b"\r\n"
    )
    assert door.feed(cmd("JSCAN", "STATE", "active")) == b"*2\r\n$1\r\n0\r\n*0\r\n"
    assert door.feed(cmd("JSCAN", "STATE", "QUEUED", "STATE", "acked", "COUNT", 1)) == (
        b"*2\r\n$1\r\n1\r\n*1\r\n+" + ids[0] + b"\r\n"
    )
    show = door.feed(cmd("SHOW", a))
    assert door.feed(cmd("JSCAN", "QUEUE", "a", "REPLY", "ALL")) == (
        b"*2\r\n$1\r\n0\r\n*1\r\n" + show
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("STATE", "nope"), "ERR Invalid job state name"),
        (("REPLY", "some"), "ERR Invalid REPLY type, try ID or ALL"),
        (("COUNT", "x"), "ERR value is not an integer or out of range"),
        ((0, 0), "ERR syntax error"),
        (("x",), "ERR invalid cursor or option name"),
        # The first error in argument order is the reply.
        (("COUNT", "x", 0, 0), "ERR value is not an integer or out of range"),
        ((0, 0, "COUNT", "x"), "ERR syntax error"),
    ],
)
def test_jscan_errors(door: RespDoor, args: tuple[str | int, ...], error: str) -> None:
    assert door.feed(cmd("JSCAN", *args)) == err(error)


def test_jscan_skips_dummy_acks(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    unknown = b"D-12345678-" + b"D" * 24 + b"-0001"
    assert d.feed(cmd("ACKJOB", unknown)) == b":0\r\n"
    assert unknown.decode() in node.disque.jobs  # a dummy ACK is held
    assert d.feed(cmd("JSCAN")) == b"*2\r\n$1\r\n0\r\n*0\r\n"


@pytest.mark.parametrize(
    ("opts", "reply"),
    [
        (("state",), b"+none\r\n"),
        (("in",), b"+in\r\n"),
        (("out",), b"+out\r\n"),
        (("in", "out"), b"+all\r\n"),
        (("all", "none"), b"+none\r\n"),
        (("all", "none", "out"), b"+out\r\n"),
        (("ALL", "BCAST"), b"+all\r\n"),
        (("bogus",), b"-ERR syntax error\r\n"),
    ],
)
def test_pause(door: RespDoor, opts: tuple[str, ...], reply: bytes) -> None:
    assert door.feed(cmd("PAUSE", "q", *opts)) == reply


def test_pause_state_reads_without_changing(door: RespDoor) -> None:
    door.feed(cmd("PAUSE", "q", "out"))
    assert door.feed(cmd("PAUSE", "q", "state")) == b"+out\r\n"
    add(door)
    assert door.feed(cmd("GETJOB", "NOHANG", "FROM", "q")) == b"*-1\r\n"  # paused out


# ------------------------------------------------------------------ cluster
def test_hello_byte_exact(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("HELLO")) == resp.encode(
        [
            1,
            MY_ID.encode(),
            [MY_ID.encode(), b"127.0.0.1", b"7711", b"1"],
            [PEER.encode(), b"10.0.0.2", b"7712", b"10"],
        ]
    )


def test_cluster_myid_nodes_info(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("CLUSTER", "MYID")) == bulk(MY_ID)
    assert d.feed(cmd("cluster", "nodes")) == bulk(
        f"{MY_ID} 127.0.0.1:7711 myself 0 0 connected\n{PEER} 10.0.0.2:7712 fail? 0 0 connected\n"
    )
    assert d.feed(cmd("CLUSTER", "INFO")) == bulk("cluster_state:ok\r\ncluster_known_nodes:1\r\n")


def test_cluster_meet(door: RespDoor, node: FakeNode) -> None:
    assert door.feed(cmd("CLUSTER", "MEET", "10.0.0.9", 7711)) == b"+OK\r\n"
    assert node.calls == [("meet", "10.0.0.9", 7711)]
    assert door.feed(cmd("CLUSTER", "MEET", "h", "p")) == err("ERR Invalid TCP port specified: p")
    assert door.feed(cmd("CLUSTER", "MEET", "h", 70000)) == err(
        "ERR Invalid node address specified: h:70000"
    )
    assert door.feed(cmd("CLUSTER", "MEET", "h")) == err(
        "ERR Wrong CLUSTER subcommand or number of arguments"
    )


def test_cluster_forget(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("CLUSTER", "FORGET", "abc")) == err("ERR Invalid node identifier")
    assert d.feed(cmd("CLUSTER", "FORGET", MY_ID)) == err(
        "ERR I tried hard but I can't forget myself..."
    )
    assert d.feed(cmd("CLUSTER", "FORGET", "e" * 40)) == err("ERR Unknown node " + "e" * 40)
    assert d.feed(cmd("CLUSTER", "FORGET", PEER)) == b"+OK\r\n"
    assert node.calls == [("forget", PEER)]


def test_cluster_reset_leaving_saveconfig(door: RespDoor, node: FakeNode) -> None:
    assert door.feed(cmd("CLUSTER", "RESET")) == b"+OK\r\n"
    assert door.feed(cmd("CLUSTER", "RESET", "HARD")) == b"+OK\r\n"
    assert door.feed(cmd("CLUSTER", "RESET", "maybe")) == err("ERR syntax error")
    assert node.calls == [("reset", False), ("reset", True)]
    assert door.feed(cmd("CLUSTER", "LEAVING")) == b"+no\r\n"
    assert door.feed(cmd("CLUSTER", "LEAVING", "yes")) == b"+OK\r\n"
    assert door.feed(cmd("CLUSTER", "LEAVING")) == b"+yes\r\n"
    assert door.feed(cmd("CLUSTER", "LEAVING", "maybe")) == err(
        "ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'"
    )
    assert door.feed(cmd("CLUSTER", "SAVECONFIG")) == b"+OK\r\n"
    node.fail_with = DisqueError("ERR", "error saving the cluster node config: EIO")
    assert door.feed(cmd("CLUSTER", "SAVECONFIG")) == err(
        "ERR error saving the cluster node config: EIO"
    )
    assert door.feed(cmd("CLUSTER", "BOGUS")) == err(
        "ERR Wrong CLUSTER subcommand or number of arguments"
    )


# ------------------------------------------------------------------ server commands
def test_info_sections(door: RespDoor) -> None:
    add(door)
    assert door.feed(cmd("INFO", "jobs")) == bulk("# Jobs\r\nregistered_jobs:1\r\n")
    assert door.feed(cmd("INFO", "Queues")) == bulk("# Queues\r\nregistered_queues:1\r\n")
    assert door.feed(cmd("INFO", "cpu")) == bulk("# CPU\r\nused_cpu_sys:0.50\r\n")
    assert door.feed(cmd("INFO", "nosuch")) == b"$0\r\n\r\n"
    assert door.feed(cmd("INFO", "a", "b")) == err("ERR syntax error")
    text = door.feed(cmd("INFO")).split(b"\r\n", 1)[1]
    assert text.startswith(b"# Server\r\ndisque_version:1.0-rc1\r\nrun_id:")
    titles = re.findall(rb"# (\w+)\r\n", text)
    assert titles == b"Server Clients Memory Jobs Queues Persistence Stats CPU".split()
    assert b"\r\n\r\n# Clients\r\n" in text
    everything = door.feed(cmd("INFO", "all"))
    assert b"# Commandstats\r\ncmdstat_addjob:calls=1,usec=" in everything


def test_time(door: RespDoor) -> None:
    assert door.feed(cmd("TIME")) == resp.encode([b"1700000000", b"123000"])


def test_command(door: RespDoor) -> None:
    n = len(dc.COMMANDS)
    assert door.feed(cmd("COMMAND", "COUNT")) == b":%d\r\n" % n
    assert door.feed(cmd("COMMAND", "INFO", "addjob", "nosuch", "GETJOB")) == (
        b"*3\r\n"
        b"*6\r\n$6\r\naddjob\r\n:-4\r\n*3\r\n+write\r\n+denyoom\r\n+fast\r\n:0\r\n:0\r\n:0\r\n"
        b"$-1\r\n"
        b"*6\r\n$6\r\ngetjob\r\n:-2\r\n*2\r\n+write\r\n+fast\r\n:0\r\n:0\r\n:0\r\n"
    )
    everything = door.feed(cmd("COMMAND"))
    assert everything.startswith(b"*%d\r\n*6\r\n$4\r\nauth\r\n:2\r\n" % n)
    assert door.feed(cmd("COMMAND", "DOCS")) == err(
        "ERR Unknown subcommand or wrong number of arguments."
    )
    assert door.feed(cmd("COMMAND", "COUNT", "x")) == err(
        "ERR Unknown subcommand or wrong number of arguments."
    )


def test_config(door: RespDoor, node: FakeNode) -> None:
    assert door.feed(cmd("CONFIG", "GET", "maxmemory")) == resp.encode(
        [b"maxmemory", b"1073741824"]
    )
    assert door.feed(cmd("CONFIG", "SET", "appendonly", "yes")) == b"+OK\r\n"
    assert node.config["appendonly"] == "yes"
    assert door.feed(cmd("CONFIG", "SET", "nope", "1")) == err(
        "ERR Unsupported CONFIG parameter: nope"
    )
    assert door.feed(cmd("CONFIG", "GET", "none*")) == b"*0\r\n"
    assert door.feed(cmd("CONFIG", "REWRITE")) == b"+OK\r\n"
    node.resp_stats.commands = 99
    assert door.feed(cmd("CONFIG", "RESETSTAT")) == b"+OK\r\n"
    assert node.resp_stats.commands == 0
    assert node.calls == [("rewrite",), ("resetstat",)]
    assert door.feed(cmd("CONFIG", "get")) == err("ERR Wrong number of arguments for CONFIG get")
    assert door.feed(cmd("CONFIG", "SET", "a")) == err(
        "ERR Wrong number of arguments for CONFIG SET"
    )
    assert door.feed(cmd("CONFIG", "nope")) == err(
        "ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE"
    )
    node.fail_with = DisqueError("ERR", "The server is running without a config file")
    assert door.feed(cmd("CONFIG", "REWRITE")) == err(
        "ERR The server is running without a config file"
    )


def test_debug(door: RespDoor, node: FakeNode) -> None:
    add(door)
    assert door.feed(cmd("DEBUG", "FLUSHALL")) == b"+OK\r\n"
    assert node.disque.jobs == {}
    assert door.feed(cmd("DEBUG", "SLEEP", "0.25")) == b"+OK\r\n"
    assert door.feed(cmd("DEBUG", "drop-peers", PEER, "b" * 40)) == b"+OK\r\n"
    assert door.feed(cmd("DEBUG", "DROP-PEERS")) == b"+OK\r\n"
    assert node.calls == [("sleep", 0.25), ("drop", (PEER, "b" * 40)), ("drop", ())]
    assert door.feed(cmd("DEBUG", "ERROR", "OOPS it broke")) == b"-OOPS it broke\r\n"
    assert door.feed(cmd("DEBUG", "segfault")) == err(
        "ERR Unknown DEBUG subcommand or wrong number of arguments for 'segfault'"
    )


def test_shutdown(door: RespDoor, node: FakeNode, tokens: Iterator[int]) -> None:
    assert door.feed(cmd("SHUTDOWN", "nope")) == err("ERR syntax error")
    assert door.feed(cmd("SHUTDOWN", "a", "b")) == err("ERR syntax error")
    node.fail_with = DisqueError("ERR", "Errors trying to SHUTDOWN. Check logs.")
    assert door.feed(cmd("SHUTDOWN")) == err("ERR Errors trying to SHUTDOWN. Check logs.")
    assert not door.closing
    node.fail_with = None
    assert door.feed(cmd("SHUTDOWN", "REWRITE-AOF") + cmd("PING")) == b""
    assert door.closing
    assert node.calls == [("shutdown", "rewrite-aof")]
    other = make_door(node, tokens)
    other.feed(cmd("shutdown", "nosave"))
    assert node.calls[-1] == ("shutdown", "nosave")


def test_bgrewriteaof(door: RespDoor, node: FakeNode) -> None:
    assert door.feed(cmd("BGREWRITEAOF")) == b"+Background append only file rewriting started\r\n"
    node.fail_with = DisqueError("ERR", "Background append only file rewriting already in progress")
    assert door.feed(cmd("BGREWRITEAOF")) == err(
        "ERR Background append only file rewriting already in progress"
    )


def test_auth_flow(node: FakeNode, tokens: Iterator[int]) -> None:
    d = make_door(node, tokens)
    assert d.feed(cmd("AUTH", "x")) == err("ERR Client sent AUTH, but no password is set")
    node.requirepass = "s3cret"
    assert d.feed(cmd("PING")) == err("NOAUTH Authentication required.")
    assert d.feed(cmd("ADDJOB", "q", "b", 0)) == err("NOAUTH Authentication required.")
    # Disque checks the name and the arity before authentication.
    assert d.feed(cmd("NOPE")) == err("ERR unknown command 'NOPE'")
    assert d.feed(cmd("QLEN")) == err("ERR wrong number of arguments for 'qlen' command")
    assert d.feed(cmd("AUTH", "wrong")) == err("ERR invalid password")
    assert d.feed(cmd("AUTH", "s3cret") + cmd("PING")) == b"+OK\r\n+PONG\r\n"
    assert d.feed(cmd("AUTH", "wrong") + cmd("PING")) == (
        err("ERR invalid password") + err("NOAUTH Authentication required.")
    )
    assert make_door(node, tokens).feed(cmd("QUIT")) == b"+OK\r\n"  # QUIT needs no AUTH


def test_client_commands(door: RespDoor) -> None:
    assert door.feed(cmd("CLIENT", "GETNAME")) == b"$-1\r\n"
    assert door.feed(cmd("CLIENT", "SETNAME", "worker-1")) == b"+OK\r\n"
    assert door.feed(cmd("CLIENT", "GETNAME")) == b"$8\r\nworker-1\r\n"
    assert door.feed(cmd("CLIENT", "SETNAME", "a b")) == err(
        "ERR Client names cannot contain spaces, newlines or special characters."
    )
    assert door.feed(cmd("CLIENT", "SETNAME", "")) == b"+OK\r\n"
    assert door.feed(cmd("CLIENT", "GETNAME")) == b"$-1\r\n"
    # What redis-py sends on every connect.
    assert door.feed(cmd("CLIENT", "SETINFO", "LIB-NAME", "redis-py")) == b"+OK\r\n"
    assert door.feed(cmd("CLIENT", "SETINFO", "LIB-VER", "7.4.1")) == b"+OK\r\n"
    assert door.feed(cmd("CLIENT", "SETINFO", "colour", "x")) == err(
        "ERR Unrecognized option 'colour'"
    )
    assert door.feed(cmd("CLIENT", "REPLY", "OFF")) == err(
        "ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)"
    )


def test_select_and_echo(door: RespDoor) -> None:
    assert door.feed(cmd("SELECT", 0)) == b"+OK\r\n"
    assert door.feed(cmd("SELECT", 1)) == err("ERR DB index is out of range")
    assert door.feed(cmd("SELECT", "x")) == err("ERR invalid DB index")
    assert door.feed(cmd("ECHO", b"\x00\r\n")) == b"$3\r\n\x00\r\n\r\n"


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0B"), (1023, "1023B"), (1024, "1.00K"), (1536 * 1024, "1.50M"), (3 << 30, "3.00G")],
)
def test_bytes_to_human(n: int, text: str) -> None:
    assert dc.bytes_to_human(n) == text


def test_stats_count_commands(door: RespDoor, node: FakeNode) -> None:
    door.feed(cmd("PING") + cmd("PING") + cmd("QLEN", "q") + cmd("NOPE"))
    assert node.resp_stats.commands == 3
    assert {k: v[0] for k, v in node.resp_stats.calls.items()} == {"ping": 2, "qlen": 1}


# ------------------------------------------------------------------ TCP and real clients
class FakeRespNode(FakeNode):
    """The transport's node: routes the core's replies through a real router and flushes
    at once (no AOF, no peers)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.hub: RespHub | None = None
        self.router = ReplyRouter()
        self.dirty: list[Any] = []
        self.new_token = itertools.count(1).__next__

    def wait_reply(self, token: int, waiter: Any) -> None:
        self.router.wait(token, waiter)

    def cancel(self, token: int) -> None:
        self.router.forget(token)
        self.disque.cancel(token)

    def mark_dirty(self, conn: Any) -> None:
        self.dirty.append(conn)

    def after_commands(self, conn: Any = None) -> None:
        if conn is not None:
            self.dirty.append(conn)
        while self.disque.replies:
            replies, self.disque.replies = self.disque.replies, []
            for token, result in replies:
                self.router.route(token, result)
        dirty, self.dirty = self.dirty, []
        for p in dirty:
            p.flush()
        self.disque.outbox.clear()
        self.disque.aof_out.clear()


@pytest.fixture
def live_port() -> Iterator[tuple[int, FakeRespNode]]:
    loop = asyncio.new_event_loop()
    node = FakeRespNode(loop)
    node.now_ms = lambda: T0  # type: ignore[method-assign]
    hub = RespHub(node)  # type: ignore[arg-type]
    node.hub = hub
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = loop.run_until_complete(loop.create_server(hub.protocol_factory, sock=sock))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], node
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(hub.close_all)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _exchange(port: int, data: bytes, expect: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        got = b""
        while len(got) < expect:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def test_tcp_pipelined_and_blocked(live_port: tuple[int, FakeRespNode]) -> None:
    port, _ = live_port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as consumer:
        consumer.sendall(cmd("GETJOB", "FROM", "q") + b"PING\r\n")
        reply = _exchange(port, cmd("ADDJOB", "q", "x", 0), 43)
        job_id = reply[1:-2]
        assert ID_RE.match(job_id)
        expected = resp.encode([[b"q", job_id, b"x"]]) + b"+PONG\r\n"
        got = b""
        while len(got) < len(expected):
            got += consumer.recv(65536)
        assert got == expected


def test_tcp_quit_closes(live_port: tuple[int, FakeRespNode]) -> None:
    port, _ = live_port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"PING\r\nQUIT\r\nPING\r\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        assert got == b"+PONG\r\n+OK\r\n"


def test_redis_py_and_pydisque_connect(live_port: tuple[int, FakeRespNode]) -> None:
    redis = pytest.importorskip("redis")
    pydisque = pytest.importorskip("pydisque.client")
    port, node = live_port
    r = redis.Redis("127.0.0.1", port)  # connects with CLIENT SETINFO (redis-py >= 5)
    assert r.ping() is True
    assert r.execute_command("QLEN", "q") == 0
    client = pydisque.Client([f"127.0.0.1:{port}"])
    client.connect()
    job_id = client.add_job("q", "hello", timeout=100)
    assert ID_RE.match(job_id.encode() if isinstance(job_id, str) else job_id)
    jobs = client.get_job(["q"], timeout=100)
    assert [(q, b) for q, _, b in jobs] == [(b"q", b"hello")]
    client.ack_job(jobs[0][1])
    assert client.qlen("q") == 0
    stats = node.resp_stats
    assert stats.connections_received >= 2
    assert stats.net_input_bytes > 0 and stats.net_output_bytes > 0


# ------------------------------------------------------------------ ADDJOB run-ahead
def _repl_ids(node: FakeNode) -> list[str]:
    ids = [m.job.id for dest, m in node.disque.outbox if isinstance(m, ReplJob)]
    node.disque.outbox.clear()
    return ids


def test_pipelined_sync_addjobs_replicate_together_and_answer_in_order(
    tokens: Iterator[int],
) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    pipeline = (
        cmd("ADDJOB", "q", "a", 0, "REPLICATE", 2)
        + cmd("ADDJOB", "q", "b", 0, "REPLICATE", 2)
        + cmd("ADDJOB", "q", "c", 0, "REPLICATE", 9)  # refused at once: its error waits its turn
        + cmd("PING")
        + cmd("ADDJOB", "q", "d", 0, "REPLICATE", 2)  # behind PING: not started yet
    )
    assert d.feed(pipeline) == b""
    a, b = _repl_ids(node)  # both copies asked for at once
    assert len(d.pending_tokens) == 2
    node.disque.on_message(T0 + 1, PEER, GotJob(b))
    assert route(node, d) == {}  # b is ready, but a is first
    node.disque.on_message(T0 + 2, PEER, GotJob(a))
    assert route(node, d) == {
        0: b"+%s\r\n+%s\r\n" % (a.encode(), b.encode())
        + err("NOREPL Not enough reachable nodes for the requested replication level")
        + b"+PONG\r\n"
    }
    [dd] = _repl_ids(node)  # only now, after PING, the last ADDJOB ran
    node.disque.on_message(T0 + 3, PEER, GotJob(dd))
    assert route(node, d) == {0: b"+%s\r\n" % dd.encode()}
    assert not d.blocked and not d.pending_tokens


def test_no_run_ahead_behind_a_blocked_getjob(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    assert d.feed(cmd("GETJOB", "FROM", "q") + cmd("ADDJOB", "q", "x", 0)) == b""
    assert node.disque.jobs == {}  # the ADDJOB waits: it must not serve its own GETJOB


def test_closing_cancels_every_run_ahead_addjob(tokens: Iterator[int]) -> None:
    node = FakeNode(StaticView(peers=[PEER]))
    d = make_door(node, tokens)
    d.feed(b"".join(cmd("ADDJOB", "q", str(i), 0, "REPLICATE", 2) for i in range(5)))
    assert len(node.disque.jobs) == 5 and len(d.pending_tokens) == 5
    d.close()
    assert node.disque.jobs == {}  # nobody will learn those ids: every copy is withdrawn
